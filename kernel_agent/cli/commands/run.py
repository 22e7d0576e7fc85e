"""``kernel-agent run``: one task answered in rounds, the notebook written after each."""

from __future__ import annotations

import sys
from typing import Any

import click

from ...agent.settings import Table, option
from ..drive import Job
from ..options import agent_arguments, agent_options, kernel_options, table_options
from .common import ENVIRONMENT, data_row, output_options, renderer, run_job, workspace_row

__all__ = ["RUN", "run"]

RUN = Table(
    data_row("run", "A data file, or a live database [NAME=]postgresql://… (repeatable)"),
    workspace_row("run", "The run's folder (kernel cwd)", shown="./agent-runs/<time>-<task>"),
    option(
        "run",
        "out",
        str,
        None,
        "Where the notebook goes, outside the workspace",
        short="-o",
        metavar="RUN.ipynb",
        optional=True,
        shown_default="WORKSPACE.ipynb, beside it",
    ),
)


@click.command(epilog=ENVIRONMENT)
@click.argument("task")
@table_options(RUN["data"])
@agent_options
@kernel_options
@table_options(RUN["workspace"], RUN["out"])
@output_options
def run(
    task: str, data: tuple[str, ...], workspace: str | None, out: str | None, quiet: bool, as_json: bool, **options: Any
) -> None:
    """Analyse data: the model writes code, a live kernel runs it, round after round, until an answer.

    TASK is the question in plain words ("-" reads it from stdin). The notebook is written after every
    round; Ctrl-C stops the run and keeps it.

    \b
    Exit codes: 0 answer, 1 no answer (max rounds, stuck, model error; the notebook is still written),
    2 usage error (bad option, missing data file, no model configured), 130 Ctrl-C, 143 SIGTERM.
    """
    arguments = agent_arguments(options, task)
    if task == "-":
        task = sys.stdin.read().strip()
    if not task.strip():
        raise click.UsageError("the task is empty")
    shown = renderer(quiet, as_json)
    from ...agent.run.agent import AsyncAgent

    job = Job(task, data, workspace, out)
    sys.exit(run_job(lambda: AsyncAgent(**arguments), job, shown))
