"""``kernel-agent replay``: runs' notebooks re-executed, each in a fresh confined kernel, and compared."""

from __future__ import annotations

import sys
from typing import Any

import click

from ...agent.settings import Table, option
from ...errors import ConfigError
from ..edge import edge
from ..options import kernel_arguments, kernel_options, table_options, timeout_option
from .common import workspace_row

__all__ = ["REPLAY", "replay"]

REPLAY = Table(
    workspace_row(
        "replay",
        "Where the data files are",
        shown="beside the notebook, or in its recorded workspace when that is a folder under the notebook's",
    ),
    option("replay", "check", bool, True, "Compare the new outputs with the recorded ones", negatable=True),
)


@click.command()
@click.argument("notebooks", metavar="RUN.ipynb...", nargs=-1, required=True)
@table_options(*REPLAY.values())
@timeout_option
@kernel_options
def replay(notebooks: tuple[str, ...], workspace: str | None, check: bool, **options: Any) -> None:
    """Re-execute runs' notebooks, each in a fresh kernel, and report cell by cell.

    The recorded code is model-written: it runs confined exactly as an agent run's kernel does.
    Several notebooks (``replay agent-runs/*.ipynb``) are replayed one after the other.

    Exits 1 when a cell's outputs differ from the recorded ones (with --check) or a cell fails,
    2 when a notebook or its data files cannot be found.
    """
    from rich.console import Console
    from rich.text import Text

    from ...agent.config import AgentConfig
    from ...notebook.replay import replay as replay_notebook
    from ...safe.terminal import one_line
    from ..show import show_replay

    with edge():
        config = AgentConfig.resolve(**kernel_arguments(options), exec_timeout=options["exec_timeout"])
        if config.kernel.provider_name() != "local":
            raise ConfigError("replay runs the notebook in a local kernel; --gateway and --provider are for the agent")
        limits = config.kernel.limits()
        if limits.sandbox == "off":
            click.echo(f"Warning: the kernel runs unconfined (sandbox off): {limits.describe()}", err=True)
        if workspace is not None and len(notebooks) > 1:
            raise ConfigError("--workspace names one run's data: give it with one notebook")
    console, ok = Console(highlight=False), True
    for notebook in notebooks:
        if len(notebooks) > 1:
            console.rule(Text(one_line(notebook)))
        with edge():
            report = replay_notebook(
                notebook,
                workspace=workspace,
                check=check,
                timeout=config.kernel.exec_timeout,
                limits=limits,
                kernel_name=config.kernel.name,
                python=config.kernel.python,
            )
        show_replay(console, report)
        ok = ok and report.ok
    sys.exit(0 if ok else 1)
