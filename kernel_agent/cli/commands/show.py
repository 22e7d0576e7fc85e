"""``kernel-agent show``: a run (or a plan run) reviewed in the terminal, or rendered as HTML."""

from __future__ import annotations

import click

from ...agent.settings import Table, option
from ..edge import edge
from ..options import table_options

__all__ = ["SHOW", "show"]

SHOW = Table(
    option(
        "show",
        "html",
        str,
        None,
        "Render the notebook as HTML (nbconvert) for the browser instead",
        metavar="OUT.html",
        optional=True,
    ),
    option(
        "show", "thinking", bool, False, "Expand reasoning models' hidden reasoning (folded to one line by default)"
    ),
    option(
        "show",
        "transcript",
        bool,
        False,
        "Print the run as DeepAnalyze's tagged transcript (<Analyze>, <Code>, <Execute>, <Answer>) instead",
    ),
)


@click.command()
@click.argument("notebook", metavar="RUN.ipynb")
@table_options(*SHOW.values())
def show(notebook: str, html: str | None, thinking: bool, transcript: bool) -> None:
    """Review a run in the terminal: reasoning, code, outputs, status and timing per round, the answer."""
    from rich.console import Console
    from rich.text import Text

    from ...notebook.load import load_run
    from ...notebook.plan_view import load_plan
    from ...safe.terminal import one_line, printable
    from ..show import export_html, show_plan, show_run

    console = Console(highlight=False)
    with edge():
        if html is not None:
            target = export_html(notebook, html)
            console.print(Text(f"wrote {one_line(target)}"), soft_wrap=True)
            return
        loaded = load_run(notebook)
        plan = None if transcript else load_plan(notebook)
    if plan is not None:
        show_plan(console, plan)
        return
    if transcript:
        from ...agent.protocols.transcript import transcript as tagged

        click.echo(printable(tagged(loaded.run)), nl=False)
        return
    show_run(console, loaded, thinking=thinking)
