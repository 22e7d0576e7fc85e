"""The ``kernel-agent`` group: the commands assembled, one module each (``cli/commands/``), with ``keys``
(``keys.py``), ``plugins`` (``plugins.py``) and ``eval`` (``eval.py``).

Each command reads its options, calls the library, renders with ``render``
or ``show``, and translates errors at the edge (``edge.py``): ``ConfigError``,
``DataFileError`` and ``NotebookError`` exit 2 with their message, a
``ModelError`` or ``KernelError`` exits 1, never with a traceback. Exit
codes of runs come from ``drive``: 0 answer, 1 no answer, 130 Ctrl-C,
143 SIGTERM. No analysis logic lives here.

Start-up stays light: at import this module loads click and the option
definitions only; the agent, kernels, notebooks, rich and the servers are
imported inside the command that uses them, so ``--help``, ``--version`` and
every ``COMMAND --help`` answer at once (``tests/test_startup_imports.py``).
"""

from __future__ import annotations

import click

from .._version import __version__
from .commands.demo import demo
from .commands.kernelspec import kernelspec
from .commands.mcp import mcp
from .commands.plan import plan
from .commands.replay import replay
from .commands.resume import resume
from .commands.run import run
from .commands.serve import serve
from .commands.show import show
from .eval import eval_group
from .invocation import warn_of_relative_pythonpath
from .keys import keys
from .logs import install_log_handler
from .plugins import plugins

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", "-V", prog_name="kernel-agent")
def cli() -> None:
    """kernel-agent: an LLM analyses your data by writing code in rounds against a live Jupyter
    kernel. Every run is exported as a notebook you can open, review and replay.

    Quick start:

    \b
        kernel-agent demo                                   bundled data, no model needed
        kernel-agent run "What drives sales?" --data sales.csv --model gpt-4o-mini
        kernel-agent show agent-runs/RUN.ipynb              review a run in the terminal
        kernel-agent resume RUN.ipynb "And by month?"       continue it with a follow-up question
        kernel-agent replay RUN.ipynb --check               re-execute it and compare outputs
        kernel-agent eval SUITE --model gpt-4o-mini         score a benchmark suite (InfiAgent-DABench, ...)
    """


for command in (run, plan, resume, demo, replay, show, serve, mcp, kernelspec, keys, plugins):
    cli.add_command(command)
cli.add_command(eval_group())


def main(argv: list[str] | None = None) -> None:
    """The ``kernel-agent`` console script."""
    install_log_handler()
    warn_of_relative_pythonpath()
    cli.main(args=argv, prog_name="kernel-agent")
