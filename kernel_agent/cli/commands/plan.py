"""``kernel-agent plan``: plan mode, a task DAG run in one live kernel, with a report."""

from __future__ import annotations

import sys
from typing import Any

import click

from ...agent.settings import PLAN, Table, option
from ..edge import edge
from ..options import agent_arguments, agent_options, kernel_options, table_options
from .common import ENVIRONMENT, data_row, make_parent, output_options, workspace_row

__all__ = ["PLAN_OPTIONS", "plan"]

# fmt: off
PLAN_OPTIONS = Table(
    data_row("plan", "A data file for the analysis (repeatable)"),
    *PLAN.values(),  # the budgets: PlanOptions' fields
    option(
        "plan", "resume", str, None,
        "Finish an interrupted plan run: done tasks are kept (their cells re-run), the rest run",
        metavar="PLAN.ipynb", optional=True,
    ),
    workspace_row(
        "plan", "The run's folder (kernel cwd)",
        shown="./agent-runs/<time>-<task>; with --resume, the notebook's folder",
    ),
    option(
        "plan", "out", str, None,
        "Where the notebook goes, outside the workspace; the report and state go beside it", short="-o",
        metavar="PLAN.ipynb", optional=True, shown_default="WORKSPACE.ipynb",
    ),
    option(
        "plan", "demo", bool, False,
        "Plan the bundled task on the bundled sales data (scripted replies when no model is configured) into "
        "notebooks/demo-plan*",
    ),
)
# fmt: on


@click.command(epilog=ENVIRONMENT)
@click.argument("task", required=False)
@table_options(PLAN_OPTIONS["data"])
@agent_options
@kernel_options
@table_options(*[row for row in PLAN_OPTIONS.values() if row.name != "data"])
@output_options
def plan(
    task: str | None,
    data: tuple[str, ...],
    max_depth: int,
    node_budget: int,
    max_fix_attempts: int,
    max_task_rounds: int,
    resume: str | None,
    workspace: str | None,
    out: str | None,
    demo: bool,
    quiet: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Plan mode: the model designs the analysis as a task DAG, each task runs in one live kernel
    (later tasks use earlier tasks' variables), failures get fixes, and a report grows as figures appear.

    \b
    Exit codes: 0 every task completed, 1 some failed or were skipped, 2 usage error.
    """
    if demo and (task is not None or resume is not None or data):
        raise click.UsageError("--demo plans the bundled task on the bundled data: give no TASK, --data or --resume")
    if not demo and (task is None) == (resume is None):
        raise click.UsageError("give a TASK, or --resume PLAN.ipynb (not both)")
    if quiet and as_json:
        raise click.UsageError("--quiet and --json cannot be used together")
    arguments = agent_arguments(options, task)
    if demo:
        from ..demo import demo_plan

        with edge():
            arguments, task, data = demo_plan(arguments)
        workspace, out = workspace or "notebooks/demo-plan", out or "notebooks/demo-plan.ipynb"
        if "chat_model" in arguments and not as_json:  # said before the kernel starts, as `demo` does
            click.secho("No model configured: playing the scripted plan replies.", fg="yellow", err=quiet)
    from ...agent.plan.runner import PlanOptions
    from ...agent.sync import Agent
    from ..plan import drive_plan

    with edge():
        budgets = PlanOptions(
            max_depth=max_depth,
            node_budget=node_budget,
            max_fix_attempts=max_fix_attempts,
            max_task_rounds=max_task_rounds,
        )
        make_parent(out)
        with Agent(**arguments) as agent:
            events = agent.stream_plan(task or "", data, workspace, out, options=budgets, resume=resume)
            sys.exit(drive_plan(events, as_json=as_json, quiet=quiet))
