"""The front end of ``kernel-agent plan``: drive a plan run and render its events.

Owns rendering plan events (a scripted plan's panel first, a tree of the DAG with
each node's state, redrawn live with rich on a terminal, else the tree once and one
line per node event as it happens, then the findings and the files written; or one
JSON event per line) and the plan command's exit code:
0 when every node completed, 1 when some failed or were skipped. Options and
error translation stay in its command (``commands/plan.py``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.panel import Panel
from rich.text import Text
from rich.tree import Tree

from ..events import NodeFinished, NodeStarted, Notice, PlanFinished, PlanReady
from ..safe.terminal import one_line, printable
from .render import SCRIPTED_NOTE, markdown

__all__ = ["drive_plan"]

_STYLE = {"pending": "dim", "running": "yellow", "done": "green", "failed": "red", "skipped": "magenta"}


def _tree(ready: PlanReady, states: dict[str, str], notes: dict[str, str]) -> Tree:
    tree = Tree(Text.assemble(("Plan", "bold"), f" ({', '.join(map(one_line, ready.directions)) or 'no directions'})"))
    for node in ready.nodes:
        state = states[node["id"]]
        after = f" ← {', '.join(map(one_line, node['depends_on']))}" if node["depends_on"] else ""
        note = f" · {one_line(notes[node['id']])}" if node["id"] in notes else ""
        line = Text(f"{one_line(state):8}", style=_STYLE.get(state, "dim"))
        line.append(f" {one_line(node['id'])}: {one_line(node['title'])} ")
        line.append(f"({one_line(node['kind'])}{after}){note}", style="dim")
        tree.add(line)
    return tree


def drive_plan(events: Iterable[Any], *, as_json: bool, quiet: bool) -> int:
    """Consume the plan's events, rendering them; return the exit code."""
    if as_json:
        return _json(events)
    console = Console(highlight=False, stderr=quiet)
    states: dict[str, str] = {}
    notes: dict[str, str] = {}
    live: Live | None = None
    ready: PlanReady | None = None
    code = 1
    try:
        for event in events:
            if isinstance(event, Notice):
                console.print(Text(printable(f"note: {event.message}"), style="yellow"))
            elif isinstance(event, PlanReady):
                ready, states = event, {n["id"]: n["status"] for n in event.nodes}
                notes.update({n["id"]: f"{n['attempts']} attempt(s)" for n in event.nodes if n.get("attempts")})
                live = _show_ready(console, ready, states, notes)
            elif isinstance(event, (NodeStarted, NodeFinished)) and ready is not None:
                _update(event, states, notes)
                if live is not None:
                    live.update(_tree(ready, states, notes), refresh=True)
                else:
                    console.print(_node_line(event.node_id, states, notes), markup=False)
            elif isinstance(event, PlanFinished):
                if live is not None:
                    live.stop()
                    live = None
                if event.answer:
                    console.print(Panel(markdown(event.answer), title="Findings", border_style="green"))
                code = _finish(event)
    finally:
        if live is not None:
            live.stop()
    return code


def _show_ready(console: Console, ready: PlanReady, states: dict[str, str], notes: dict[str, str]) -> Live | None:
    """The plan's tree, live on a terminal (returned, started); printed once elsewhere (None)."""
    if ready.scripted:
        console.print(Panel(Text(SCRIPTED_NOTE), border_style="yellow", title="scripted"))
    if not console.is_terminal:  # a pipe or a file: a live display would print only when it stops
        console.print(_tree(ready, states, notes))
        return None
    live = Live(_tree(ready, states, notes), console=console, auto_refresh=False)
    live.start()
    return live


def _node_line(node_id: str, states: dict[str, str], notes: dict[str, str]) -> str:
    """A node's state as one line, for output that is not a terminal."""
    note = f" · {notes[node_id]}" if node_id in notes else ""
    return one_line(f"{states[node_id]:8} {node_id}{note}")


def _update(event: NodeStarted | NodeFinished, states: dict[str, str], notes: dict[str, str]) -> None:
    if isinstance(event, NodeStarted):
        states[event.node_id] = "running"
        if event.attempt > 1:
            notes[event.node_id] = f"fix attempt {event.attempt - 1}"
    else:
        states[event.node_id] = event.status
        extra = [f"{event.figures} figure(s)"] if event.figures else []
        notes[event.node_id] = (
            "; ".join(extra + ([event.reason] if event.reason else [])) or f"{event.attempts} attempt(s)"
        )


def _finish(event: PlanFinished) -> int:
    counts = event.counts
    sys.stdout.write(
        f"{counts['done']}/{counts['total']} completed, {counts['failed']} failed, "
        + f"{counts['skipped']} skipped\nnotebook: {one_line(event.notebook)}\nreport: {one_line(event.report)}\n"
        + (f"html: {one_line(event.html)}\n" if event.html else "")
    )
    return 0 if counts["done"] == counts["total"] else 1


def _json(events: Iterable[Any]) -> int:
    code = 1
    for event in events:
        sys.stdout.write(json.dumps(event.to_dict()) + "\n")  # ASCII: every control character escaped
        sys.stdout.flush()
        if isinstance(event, PlanFinished):
            code = 0 if event.counts["done"] == event.counts["total"] else 1
    return code
