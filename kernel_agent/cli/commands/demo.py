"""``kernel-agent demo``: a complete analysis of the bundled sales data, scripted when no model is configured."""

from __future__ import annotations

import sys
from typing import Any

import click

from ...agent.settings import Table, option
from ..drive import EXIT_INTERRUPTED, EXIT_TERMINATED
from ..options import agent_arguments, agent_options, kernel_options, table_options
from .common import ENVIRONMENT, output_options, renderer, run_job, workspace_row

__all__ = ["DEMO", "demo"]

DEMO = Table(
    option("demo", "scripted", bool, False, "Play the bundled scripted replies even when a model is configured"),
    option("demo", "out", str, "notebooks/demo-run.ipynb", "Where the notebook goes", short="-o", metavar="RUN.ipynb"),
    workspace_row("demo", "The run's folder", default="notebooks/demo-run"),
)


@click.command(epilog=ENVIRONMENT)
@agent_options
@kernel_options
@table_options(*DEMO.values())
@output_options
def demo(scripted: bool, out: str, workspace: str, quiet: bool, as_json: bool, **options: Any) -> None:
    """A complete analysis of the bundled sales dataset, exported as a notebook with figures.

    With a model configured (flags or environment) the demo uses it. Without one it plays replies
    written for this dataset and shipped with kernel-agent, and says so on screen and in the notebook:
    the code still really runs in a live kernel, so every number and figure is real.
    """
    from rich.text import Text

    from ..demo import demo_agent, demo_job, epilogue
    from ..render import LiveRenderer

    shown = renderer(quiet, as_json)
    live = shown if isinstance(shown, LiveRenderer) else None
    made: list[Any] = []

    def make_agent() -> Any:
        made.append(
            demo_agent(agent_arguments(options), scripted=scripted, typing=bool(live and live.console.is_terminal))
        )
        if live is not None and made[0].chat_model.scripted:
            why = "--scripted" if scripted else "No model configured"
            live.console.print(Text(f"{why}: playing the scripted demo replies.", style="yellow"))
        return made[0]

    code = run_job(make_agent, demo_job(workspace, out), shown)
    if live is not None and code not in (EXIT_INTERRUPTED, EXIT_TERMINATED):  # stopped: the line above said all
        live.console.print(epilogue(out, scripted=made[0].chat_model.scripted), soft_wrap=True)
    sys.exit(code)
