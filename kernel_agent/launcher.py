"""Compatibility entry point: kernelspecs installed before the ``kernel/`` layout run
``python -m kernel_agent.launcher``. The launcher itself is ``kernel_agent.kernel.launcher``."""

from kernel_agent.kernel.launcher import main

if __name__ == "__main__":
    main()
