"""What several commands share: the output options (``--quiet``, ``--json``), the renderer they pick, the
drive of one run to its exit code, the folder ``--out`` points into, and the epilog listing the
environment variables. Errors are translated at the edge (``edge.py``); exit codes come from ``drive``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ...agent.settings import SETTINGS, Setting, option
from ..drive import EXIT_USAGE, Job
from ..edge import Failure, edge
from ..options import secret_flags, table_options

if TYPE_CHECKING:
    from ..render import Renderer

__all__ = ["ENVIRONMENT", "data_row", "make_parent", "output_options", "renderer", "run_job", "workspace_row"]


def _environment() -> str:
    """The commands' epilog: each setting's environment variable and the flag that wins over it."""
    rows = [row for row in SETTINGS.values() if row.env]
    width = max(len(row.env or "") for row in rows)
    lines = [f"  {row.env:<{width}}  {row.flag or ', '.join(secret_flags(row.name))}" for row in rows]
    return (
        "\n\b\nEnvironment (flags win over it):\n"
        + "\n".join(lines)
        + "\n\n\b\nThe key: prefer --api-key-file FILE (or --api-key-stdin, or OPENAI_API_KEY) to\n"
        "--api-key, which every user of this machine can read from the process list.\n"
        "It never reaches the kernel, the notebook, the events or the log.\n"
    )


ENVIRONMENT = _environment()

output_options = table_options(
    option("output", "quiet", bool, False, "Print only the answer and the notebook path", short="-q"),
    option("output", "as_json", bool, False, "Print one JSON event per line (for scripts)", flag="--json"),
)


def data_row(command: str, help: str) -> Setting:
    """A command's ``--data``/``-d``: data files, repeatable."""
    return option(command, "data", str, (), help, short="-d", metavar="FILE", multiple=True)


def workspace_row(command: str, help: str, default: str | None = None, shown: str | None = None) -> Setting:
    """A command's ``--workspace``/``-w``: the folder the kernel works in."""
    return option(
        command,
        "workspace",
        str,
        default,
        help,
        short="-w",
        metavar="DIR",
        optional=default is None,
        shown_default=shown,
    )


def renderer(quiet: bool, as_json: bool) -> Renderer:
    """The live renderer, or the quiet or JSON one. Raises ``click.UsageError`` for both flags."""
    from rich.console import Console

    from ..render import JsonRenderer, LiveRenderer, QuietRenderer

    if quiet and as_json:
        raise click.UsageError("--quiet and --json cannot be used together")
    if as_json:
        return JsonRenderer(sys.stdout)
    if quiet:
        return QuietRenderer(sys.stdout, sys.stderr)
    return LiveRenderer(Console(highlight=False))


def run_job(make_agent: Callable[[], Any], job: Job, renderer: Renderer) -> int:
    """Drive ``job`` with the agent ``make_agent`` makes; its exit code."""
    from ..drive import drive

    try:
        with edge():
            agent = make_agent()
            make_parent(job.notebook)
            return drive(agent, job, renderer)
    finally:
        renderer.close()


def make_parent(notebook: Any) -> None:
    """Create the folder ``--out`` points into, as the workspace's is created."""
    if notebook is None:
        return
    try:
        Path(notebook).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Failure(f"cannot create the folder for {notebook}: {exc}", EXIT_USAGE) from None
