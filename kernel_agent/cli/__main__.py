"""``python -m kernel_agent.cli``: the same as the ``kernel-agent`` script."""

from kernel_agent.cli import main

main()
