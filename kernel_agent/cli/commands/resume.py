"""``kernel-agent resume``: an earlier run continued with a follow-up question."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from ...agent.settings import SETTINGS, Table, option
from ..drive import Job
from ..edge import edge
from ..options import agent_arguments, agent_options, kernel_options, table_options
from .common import ENVIRONMENT, data_row, output_options, renderer, run_job, workspace_row

__all__ = ["RESUME", "resume"]

RESUME = Table(
    data_row(
        "resume",
        "A data file for the run (repeatable); replaces a recorded one of the same name; "
        "or a live database NAME=postgresql://… the run queried, given again",
    ),
    workspace_row("resume", "The folder to continue in, with the data files", shown="a new folder beside RUN.ipynb"),
    option(
        "resume",
        "out",
        str,
        None,
        "Write the continued run here",
        short="-o",
        metavar="NEW.ipynb",
        optional=True,
        shown_default="append to RUN.ipynb",
    ),
)


@click.command(epilog=ENVIRONMENT)
@click.argument("notebook", metavar="RUN.ipynb")
@click.argument("task")
@agent_options
@kernel_options
@table_options(*RESUME.values())
@output_options
def resume(
    notebook: str,
    task: str,
    data: tuple[str, ...],
    workspace: str | None,
    out: str | None,
    quiet: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Continue an earlier run with a follow-up question.

    A fresh kernel re-runs the notebook's setup cell and every cell that succeeded, so the earlier
    variables are back; the model is told what was done, answers TASK, and the new rounds are
    appended to the notebook. The protocol and model default to the run's own. Exit codes as for run.

    The notebook's paths are a claim, never an order: the kernel works in --workspace or a new folder
    beside the notebook, and the recorded data files are read from there, from beside the notebook or
    from its recorded workspace when that is a folder under the notebook's own (never an absolute path).
    """
    from ...agent.run.agent import AsyncAgent
    from ...notebook.load import load_resumable

    arguments = agent_arguments(options, task)
    shown = renderer(quiet, as_json)
    with edge():
        recorded = load_resumable(notebook).info
    arguments["protocol"] = arguments["protocol"] or recorded.protocol or None
    if not arguments["model"] and not os.environ.get(SETTINGS["model"].env or "") and not recorded.scripted:
        arguments["model"] = recorded.model or None
    job = Job(task, data, workspace, out, resume_from=notebook)
    sys.exit(run_job(lambda: AsyncAgent(**arguments), job, shown))
