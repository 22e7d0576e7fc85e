"""Reviewing finished runs in the terminal: ``show_run``, ``show_replay``, ``export_html``.

Owns the terminal layout of a notebook read back with ``load_run`` (header,
then per round: status and timing, reasoning, highlighted code, outputs with
images as placeholders, then the answer), of a ``ReplayReport``, and the
``--html`` export (``notebook.html``). Reading and replaying notebooks is the
library's job (``notebook/load.py``, ``notebook/replay.py``); this module only draws.
"""

from __future__ import annotations

from rich.console import Console, RenderableType
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from ..notebook.html import export_html
from ..notebook.kinds import Kind, kind_of, step_word, turn_word
from ..notebook.load import LoadedRun
from ..notebook.plan_view import PlanTask, PlanView
from ..notebook.replay import ReplayReport
from ..notebook.report import hard_breaks
from ..records import STOP_WORDS, Round, Run, Turn
from ..safe.terminal import one_line
from .render import (
    artifacts_text,
    code_block,
    markdown,
    output_renderables,
    round_status,
    shown,
    thinking_text,
    usage_text,
)

__all__ = ["answer_markdown", "export_html", "show_plan", "show_replay", "show_run"]

_CHECK_STYLE = {
    "match": "green",
    "executed": "green",
    "recorded": "cyan",
    "expected": "yellow",
    "mismatch": "red",
    "error": "bold red",
    "skipped": "dim",
}


def show_run(console: Console, loaded: LoadedRun, *, max_lines: int = 40, thinking: bool = False) -> None:
    """Print a run read from its notebook: header, the answer (or why there is none), then every round.

    A resumed run (or a service thread) shows each follow-up question where its turn starts, each turn
    with its answer; an MCP session shows the client's executions and how the session ended. A
    reasoning model's hidden reasoning is folded to one dim line unless ``thinking``.
    """
    run = loaded.run
    kind = kind_of(run) if loaded.view else "foreign"
    _header(console, loaded, kind)
    if kind != "mcp":  # what a reader came for first, as the HTML report does (a session ends with how it ended)
        if run.answer is not None:
            console.print(Panel(answer_markdown(run.answer), title="Answer", border_style="green"))
        else:
            console.print(Text(shown(_no_answer(run.stop_reason, run.error)), style="yellow"))
    for number, turn in enumerate(run.turns, start=1):  # earlier turns of a resumed run: each with its answer
        _turn_question(console, number, turn)
        for round_ in run.rounds:
            if turn.first_round <= round_.index <= turn.last_round:
                _round(console, round_, max_lines, thinking, kind)
        _turn_answer(console, turn)
    current = run.current_turn()
    if run.turns:
        _turn_question(console, len(run.turns) + 1, current)
    for round_ in run.rounds:
        if round_.index >= current.first_round:
            _round(console, round_, max_lines, thinking, kind)
    if kind == "mcp":
        _session_end(console, run)
        return
    console.print(Rule(style="green" if run.answer is not None else "yellow"))
    console.print(Text(f"{len(run.rounds)} round(s) · {usage_text(run.usage)}", style="dim"))


def _no_answer(stop_reason: str | None, error: str | None = None) -> str:
    why = STOP_WORDS.get(stop_reason, stop_reason) if stop_reason else "the run had not finished when it was saved"
    return f"No answer ({one_line(why)})" + (f": {error}" if error else "")


def _turn_question(console: Console, number: int, turn: Turn) -> None:
    if number > 1:
        console.print(Rule(turn_word(number), style="magenta"))
        console.print(markdown(turn.task))
        line = f"model {one_line(turn.model or 'not recorded')} · protocol {one_line(turn.protocol or 'not recorded')}"
        console.print(Text(line + f" · endpoint {one_line(turn.endpoint or 'not recorded')}", style="dim"))


def _turn_answer(console: Console, turn: Turn) -> None:
    if turn.answer is not None:
        console.print(Panel(answer_markdown(turn.answer), title="Answer", border_style="green"))
    else:
        console.print(Text(shown(_no_answer(turn.stop_reason, turn.error)), style="yellow"))


def _header(console: Console, loaded: LoadedRun, kind: Kind) -> None:
    info = loaded.info
    console.print(Rule(Text(one_line(loaded.path or "run"), style="bold"), style="blue"))
    first = loaded.run.all_turns()[0]  # follow-up questions are shown where their turn starts
    console.print(markdown(f"**{'Session' if kind == 'mcp' else 'Task'}:** {first.task.strip() or '(not recorded)'}"))
    console.print(Text(" · ".join(_details(loaded, kind, first)), style="dim"), soft_wrap=True)
    if info.scripted:
        console.print(Text("The model replies in this run were scripted (played back from a file).", style="yellow"))


def _details(loaded: LoadedRun, kind: Kind, first: Turn) -> list[str]:
    """The header's line: who wrote the code (the first turn's model and protocol: a follow-up may use
    others, shown where it starts; an MCP session's client), the data, the view (each part one line)."""
    info = loaded.info
    if kind == "mcp":
        details = [f"MCP session · client {one_line(info.model or 'not recorded')}"]
    else:
        details = [
            f"model {one_line(first.model or info.model or 'not recorded')}",
            f"protocol {one_line(first.protocol or info.protocol or 'not recorded')}",
        ]
    details.append(f"data {', '.join(one_line(name) for name in info.data_files) or 'none'}")
    if kind == "resumed":
        details.append(f"{len(loaded.run.turns)} follow-up question(s)")
    if loaded.view:
        details.append(f"{one_line(loaded.view)} view")
    return details


def _session_end(console: Console, run: Run) -> None:
    """An MCP session's close: the line it ended with (kept where a run keeps its answer), or that it was
    still open when the notebook was written; no tokens (no model of ours took part)."""
    ended = run.answer is not None
    console.print(Rule(style="green" if ended else "yellow"))
    if ended:
        console.print(Text(shown(run.answer or ""), style="green"))
        return
    still = f"The session was still open when this notebook was written ({len(run.rounds)} code execution(s))."
    console.print(Text(still, style="yellow"))


def _round(console: Console, round_: Round, max_lines: int, thinking: bool, kind: Kind = "run") -> None:
    console.print(Rule(f"{step_word(kind)} {round_.index}", style="blue"))
    console.print(_execution_status(round_) if kind == "mcp" else round_status(round_))
    if round_.reasoning_content.strip():
        console.print(thinking_text(round_.reasoning_content, expanded=thinking, max_lines=10_000))
    if round_.problem:
        console.print(Text(shown(f"protocol problem: {round_.problem}"), style="yellow"))
    if round_.reasoning.strip():
        console.print(markdown(round_.reasoning))
    if round_.code is not None:
        console.print(Panel(code_block(round_.code), border_style="dim", padding=(0, 1)))
    if round_.result is not None:
        for item in output_renderables(round_.result.outputs, max_lines=max_lines):
            console.print(item)
    files = artifacts_text(round_.artifacts)
    if files is not None:
        console.print(files)


def _execution_status(round_: Round) -> Text:
    """An MCP execution's line: mark, status and the code's time (no model took part)."""
    status = round_.result.status if round_.result is not None else "not run"
    mark, style = {"ok": ("✓", "green"), "error": ("✗", "red")}.get(status, ("!", "yellow"))
    text = Text(f"{mark} execution {round_.index}: {one_line(status)}", style=style)
    text.append(f"  code {round_.exec_s:.1f} s", style="dim")
    if round_.result is not None and round_.result.note:
        text.append(f"\n  {shown(round_.result.note)}", style="yellow")
    return text


def answer_markdown(answer: str) -> RenderableType:
    """An answer as Markdown with the line breaks the model meant (``@mean_age[0.4610]`` and
    ``@mean_sex[0.5052]`` on lines of their own stay so) and its wrapped prose re-wrapped to the terminal
    (``notebook.report.hard_breaks``)."""
    return markdown(hard_breaks(answer.strip()))


def show_plan(console: Console, plan: PlanView, *, max_lines: int = 40) -> None:
    """Print a plan run read from its notebook: header (model, protocol, times), each task under its own
    heading with its status, time and tokens, code and outputs, then the plan's answer (its conclusion)."""
    console.print(Rule(Text(one_line(plan.path), style="bold"), style="blue"))
    console.print(markdown(f"**Task:** {plan.task.strip() or '(not recorded)'}"))
    details = [
        "plan",
        f"model {one_line(plan.model or 'not recorded')}",
        f"protocol {one_line(plan.protocol or 'not recorded')}",
        f"data {', '.join(one_line(name) for name in plan.data_files) or 'none'}",
    ]
    console.print(Text(" · ".join(details), style="dim"), soft_wrap=True)
    if plan.started_at:
        finished = f" · finished {one_line(plan.finished_at)}" if plan.finished_at else ""
        span = f"started {one_line(plan.started_at)}{finished}"
        console.print(Text(span, style="dim"), soft_wrap=True)
    if plan.scripted:
        console.print(Text("The model replies in this run were scripted (played back from a file).", style="yellow"))
    total = len(plan.tasks)
    for task in plan.tasks:
        _plan_task(console, task, total, max_lines)
    done = plan.counts.get("done", sum(t.status == "done" for t in plan.tasks))
    whole = plan.counts.get("total", total)
    console.print(Rule(style="green" if plan.answer is not None else "yellow"))
    if plan.answer is not None:
        console.print(Panel(answer_markdown(plan.answer), title="Answer", border_style="green"))
    else:
        console.print(Text("No conclusion (the plan has no finished text task)", style="yellow"))
    console.print(Text(f"{done}/{whole} task(s) completed · {usage_text(plan.usage)}", style="dim"))


def _plan_task(console: Console, task: PlanTask, total: int, max_lines: int) -> None:
    console.print(Rule(Text(f"Task {task.number}/{total}: {one_line(task.id)} · {one_line(task.title)}"), style="blue"))
    mark = {"done": ("✓", "green"), "failed": ("✗", "red"), "skipped": ("–", "yellow")}.get(task.status, ("·", "dim"))
    line = Text(f"{mark[0]} {one_line(task.status or 'status not recorded')}", style=mark[1])
    parts = [f"{task.seconds:.1f} s" if task.seconds else "time not recorded"]
    if task.usage.total_tokens:
        parts.append(f"{task.usage.total_tokens:,} tokens")
    line.append("  " + " · ".join(parts), style="dim")
    console.print(line)
    if task.details:
        console.print(markdown(task.details))
    for code, outputs in task.cells:
        console.print(Panel(code_block(code), border_style="dim", padding=(0, 1)))
        for item in output_renderables(outputs, max_lines=max_lines):
            console.print(item)
    if task.text.strip():
        console.print(answer_markdown(task.text))
    if task.analysis:
        console.print(markdown(f"*Analysis:* {task.analysis}"))


def show_replay(console: Console, report: ReplayReport) -> None:
    """Print a replay report: one summary line, then one line per code cell, coloured by status."""
    summary = ", ".join(f"{n} {status}" for status, n in report.counts().items()) or "no code cells"
    verdict = Text("ok" if report.ok else "FAILED", style="bold green" if report.ok else "bold red")
    console.print(
        Text.assemble(f"replay of {one_line(report.path)}: ", verdict, f" ({summary}) in {report.duration_s:.1f} s"),
        soft_wrap=True,
    )
    for cell in report.cells:
        line = Text(f"  cell {cell.index:>3}  {one_line(cell.where):<9} ")
        line.append(f"{one_line(cell.status):<8}", style=_CHECK_STYLE.get(cell.status, ""))
        if cell.detail:
            line.append(shown(f"  {cell.detail}"), style="dim")
        console.print(line, soft_wrap=True)
