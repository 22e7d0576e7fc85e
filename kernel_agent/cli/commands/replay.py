"""``kernel-agent replay``: runs' notebooks re-executed, each in a fresh confined kernel, and compared."""

from __future__ import annotations

import sys
from typing import Any

import click

from ...agent.settings import Table, option
from ...errors import ConfigError
from ..edge import edge
from ..options import kernel_arguments, kernel_options, table_options, timeout_option
from .common import data_row, workspace_row

__all__ = ["REPLAY", "replay"]

REPLAY = Table(
    workspace_row(
        "replay",
        "Where the data files are",
        shown="beside the notebook, or in its recorded workspace when that is a folder under the notebook's",
    ),
    option("replay", "check", bool, True, "Compare the new outputs with the recorded ones", negatable=True),
    data_row(
        "replay",
        "A live data source the notebook names, again: NAME=postgresql://... (repeatable); "
        "default: the pg_service.conf service NAME",
    ),
)


@click.command()
@click.argument("notebooks", metavar="RUN.ipynb...", nargs=-1, required=True)
@table_options(*REPLAY.values())
@timeout_option
@kernel_options
def replay(
    notebooks: tuple[str, ...], workspace: str | None, check: bool, data: tuple[str, ...], **options: Any
) -> None:
    """Re-execute runs' notebooks, each in a fresh kernel, and report cell by cell.

    The recorded code is model-written: it runs confined exactly as an agent run's kernel does.
    Several notebooks (``replay agent-runs/*.ipynb``) are replayed one after the other.

    A notebook's live data sources (databases it queried with ``sql()``) are reconnected by name:
    ``--data NAME=URI`` given again, else the libpq service of that name.

    Exits 1 when a cell's outputs differ from the recorded ones (with --check) or a cell fails,
    2 when a notebook, its data files or its data sources cannot be found.
    """
    from rich.console import Console
    from rich.text import Text

    from ...agent.config import AgentConfig
    from ...agent.run.live import replay_with_sources, split_data
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
        files, sources = split_data(data)
        if files:
            raise ConfigError(f"replay's --data names live data sources (NAME=URI), not files: {files[0]}")
    console, ok = Console(highlight=False), True
    for notebook in notebooks:
        if len(notebooks) > 1:
            console.rule(Text(one_line(notebook)))
        with edge():
            report = replay_with_sources(
                notebook,
                sources,
                workspace=workspace,
                check=check,
                timeout=config.kernel.exec_timeout,
                limits=limits,
                kernel_name=config.kernel.name,
                python=config.kernel.python,
                template=config.kernel.template,
            )
        show_replay(console, report)
        ok = ok and report.ok
    sys.exit(0 if ok else 1)
