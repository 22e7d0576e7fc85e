"""How a run looks in a notebook cell: ``CellView`` turns the event stream into cell outputs.

Owns the cell's layout (a status line that says "starting…" at once, then the
run header; per round the streamed reply updated in place into its markdown
reasoning, the code highlighted in a framed, labelled box, a status line, the real outputs; the answer;
the link to the notebook). Problems look like problems: failed code, stderr,
model errors and interruptions use Jupyter's stderr rendering, which
notebook front ends draw on a red background. It does not run anything
(``cell.py``) or share variables (``share.py``).
"""

from __future__ import annotations

import html
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from IPython.display import display

from .. import events
from ..events import Event
from ..kernel.partial import OutputChunk, OutputTail
from ..notebook.recorded import METADATA_KEY, NOTICE_KEY, RUN_NOTEBOOK_KEY
from ..records import Run
from ..result import ExecutionResult, strip_ansi
from ..safe.html import Shown, contained, safe_bundle, shown_code_box, shown_html, shown_markdown

__all__ = ["CellView"]

_STREAM_EVERY_S = 0.25  # how often the streamed reply is redrawn
_STDERR = "application/vnd.jupyter.stderr"  # Jupyter front ends render it as stderr (red background)
_TRACEBACK_SHOWN = 12  # traceback lines shown before the rest is folded away
_ANSWER_HEADING = re.compile(r"\A\s*#{1,6}\s*(final\s+)?answer\s*:?\s*#*\s*\n", re.IGNORECASE)


def _markdown(text: str) -> Shown:
    """Markdown (ours around the model's or the kernel's words) as clean HTML: JupyterLab trusts the
    outputs of a cell the user ran, so nothing is handed to it as markdown or HTML uncleaned."""
    return shown_markdown(text)


def _plain(text: str) -> Shown:
    return Shown({"text/plain": text})


def _problem(text: str) -> Shown:
    return Shown({_STDERR: text, "text/plain": text})


def _show(shown: Shown, *, display_id: bool = False) -> Any:
    """The one way this view puts anything in the cell: a ``Shown`` (made safe by ``safe.html``), in a box
    it cannot paint outside of (JupyterLab's page and its styles are around it)."""
    shown = contained(shown)
    return display(shown.data, raw=True, metadata=shown.metadata or None, display_id=display_id)


def _redraw(handle: Any, shown: Shown) -> None:
    """Replace what ``handle`` (a ``_show`` with a display id) shows, contained as ``_show`` does."""
    shown = contained(shown)
    handle.update(shown.data, raw=True, metadata=shown.metadata or None)


class CellView:
    """Renders a run's events as cell outputs: reasoning as markdown, code highlighted, real outputs."""

    def __init__(self) -> None:
        self._reply: Any = None
        self._status: Any = None
        self._running = OutputTail(1500)  # the running code's output so far, shown under *running…*
        self._header: Any = None
        self._text = ""
        self._thinking = ""
        self._drawn = 0.0
        self._round = 0  # the round whose code runs (or ran last)

    def starting(self) -> None:
        """Say at once that something happens (imports and the kernel start take seconds)."""
        self._header = _show(_markdown("*kernel-agent: starting…*"), display_id=True)

    def starting_kernel(self, warm: bool = False) -> None:
        """Say whether the agent's own kernel starts now or was started ahead (``warm``)."""
        text = "taking the warm kernel started ahead…" if warm else "starting the agent's own kernel…"
        _redraw(self._header, _markdown(f"*kernel-agent: {text}*"))

    def failed(self) -> None:
        """The invocation failed before the run started: drop the "starting…" line."""
        if self._header is not None:
            _redraw(self._header, _plain(""))

    def handle(self, event: Event) -> None:
        _SHOWN[type(event)](self, event)

    def interrupted(self, notebook_path: str | None, run: Run | None = None) -> None:
        """The user stopped the run: the running round's output so far stays in the cell, as the
        saved notebook keeps it (``run``, as saved, when it had started)."""
        self._clear_placeholder()
        if self._status is not None:
            _redraw(self._status, _problem("✗ interrupted"))
            self._status = None
            kept = run.rounds[-1] if run is not None and run.rounds else None
            if kept is not None and kept.index == self._round and kept.result is not None:
                for output in kept.result.outputs:
                    if output.get("ename") != "KeyboardInterrupt":  # the user's own ■: the status says it
                        _display_output(output)
            elif self._running.text:  # the notebook could not be read back: the text shown so far
                _show(_plain(self._running.text))
        where = f"the notebook is saved: `{notebook_path}`" if notebook_path else "nothing was saved"
        _show(_markdown(f"**Interrupted:** {where}."))

    def replayed(self, note: str, outputs: Sequence[Shown]) -> None:
        """A replay's ``%%agent`` cell (``replayed.py``): the ``note`` saying so, marked as the notice a replay's
        check looks for (``recorded.NOTICE_KEY``), then the recorded outputs as made safe."""
        shown = shown_markdown(f"*{note}*")
        _show(Shown(shown.data, {METADATA_KEY: {NOTICE_KEY: True}}))
        for output in outputs:
            _show(output)

    def _clear_placeholder(self) -> None:
        """The "…" shown while the model is asked goes once it is clear no reply text is coming."""
        if self._reply is not None and not self._text.strip():
            _redraw(self._reply, _plain(""))
        self._reply = None

    def _on_run_started(self, event: events.RunStarted) -> None:
        line = (
            f"**kernel-agent** · model `{event.model}` · protocol `{event.protocol}` · "
            f"own kernel in `{event.workspace}`"
        )
        if event.scripted:
            line += (
                "\n\n**Scripted replies:** the model's text is played back from replies shipped with kernel-agent; "
                "the code really runs."
            )
        if self._header is not None:
            _redraw(self._header, _markdown(line))
        else:
            _show(_markdown(line))

    def _on_round_started(self, event: events.RoundStarted) -> None:
        _show(_markdown(f"#### Round {event.round}/{event.max_rounds}"))
        self._text, self._drawn = "", time.monotonic()
        self._reply = _show(_plain("…"), display_id=True)

    def _on_text_delta(self, event: events.TextDelta) -> None:
        self._text += event.text
        if self._reply is not None and time.monotonic() - self._drawn >= _STREAM_EVERY_S:
            _redraw(self._reply, _plain(self._text))
            self._drawn = time.monotonic()

    def _on_reasoning_delta(self, event: events.ReasoningDelta) -> None:
        self._thinking += event.text
        if self._reply is not None and not self._text and time.monotonic() - self._drawn >= _STREAM_EVERY_S:
            _redraw(self._reply, _plain(f"(thinking) {self._thinking[-2000:]}"))
            self._drawn = time.monotonic()

    def _show_thinking(self) -> None:
        thinking, self._thinking = self._thinking.strip(), ""
        if thinking:
            body = html.escape(thinking)
            folded = (
                f"<details><summary>Model reasoning ({len(thinking):,} characters)</summary><pre>{body}</pre></details>"
            )
            _show(shown_html(folded, thinking))

    def _on_text_reset(self, event: events.TextReset) -> None:
        self._text = ""
        self._thinking = ""
        if self._reply is not None:
            _redraw(self._reply, _plain("…"))
        _show(_markdown(f"> **model request failed, retrying:** {event.reason}"))

    def _on_code_delta(self, event: events.CodeDelta) -> None:
        """The code shows whole, highlighted, once ready (``_on_code_ready``)."""

    def _on_code_ready(self, event: events.CodeReady) -> None:
        self._show_thinking()
        if self._reply is not None:
            _redraw(self._reply, _markdown(event.reasoning) if event.reasoning.strip() else _plain(""))
            self._reply = None
        _show(shown_code_box(event.code, f"code the agent runs · round {event.round}"))

    def _on_execution_started(self, event: events.ExecutionStarted) -> None:
        self._status = _show(_markdown("*running…*"), display_id=True)
        self._running = OutputTail(1500)
        self._round = event.round

    def _on_execution_output(self, event: events.ExecutionOutput) -> None:
        self._running(OutputChunk(event.text, event.elapsed_s, event.skipped_chars, event.figures))
        if self._status is not None:
            _redraw(self._status, _plain(f"running… output so far:\n{self._running.text}"))

    def _on_execution_finished(self, event: events.ExecutionFinished) -> None:
        result: ExecutionResult = event.result
        _redraw(self._status, _status_line(result))
        self._status = None
        for output in result.outputs:
            _display_output(output)
        if event.artifacts:
            files = ", ".join(f"`{a.path}`" for a in event.artifacts)
            _show(_markdown(f"*files written: {files}*"))

    def _on_round_finished(self, event: events.RoundFinished) -> None:
        self._show_thinking()
        round_ = event.round
        if round_.code is None and self._reply is not None:
            _redraw(self._reply, _markdown(round_.reasoning) if round_.reasoning.strip() else _plain(""))
            self._reply = None

    def _on_answer(self, event: events.AnswerReady) -> None:
        _show(_markdown(f"### Answer\n\n{_ANSWER_HEADING.sub('', event.answer, count=1)}"))

    def _on_notice(self, event: events.Notice) -> None:
        _show(_markdown(f"> **note:** {event.message}"))

    def _on_error(self, event: events.RunError) -> None:
        self._clear_placeholder()
        _show(_problem(f"Error: {event.message}"))

    def _on_finished(self, event: events.RunFinished) -> None:
        self._clear_placeholder()
        run: Run = event.run
        if run.answer is None:
            _show(_markdown(f"**No answer:** the run stopped ({run.stop_reason})."))
        if run.notebook_path is not None:
            _show(_link(run.notebook_path, f"{len(run.rounds)} rounds"))


_SHOWN: dict[type[Event], Callable[[CellView, Any], None]] = {  # what draws each event, by its class
    events.RunStarted: CellView._on_run_started,
    events.RoundStarted: CellView._on_round_started,
    events.TextDelta: CellView._on_text_delta,
    events.ReasoningDelta: CellView._on_reasoning_delta,
    events.TextReset: CellView._on_text_reset,
    events.CodeDelta: CellView._on_code_delta,
    events.CodeReady: CellView._on_code_ready,
    events.ExecutionStarted: CellView._on_execution_started,
    events.ExecutionOutput: CellView._on_execution_output,
    events.ExecutionFinished: CellView._on_execution_finished,
    events.RoundFinished: CellView._on_round_finished,
    events.AnswerReady: CellView._on_answer,
    events.Notice: CellView._on_notice,
    events.RunError: CellView._on_error,
    events.RunFinished: CellView._on_finished,
}


def _status_line(result: ExecutionResult) -> Shown:
    timing = f"{result.duration_s:.1f} s"
    if result.ok:
        return _markdown(f"*ok · {timing}*")
    detail = [f"✗ {result.status} · {timing}"]
    if result.error is not None:
        detail.append(f"{result.error.ename}: {result.error.evalue}")
    if result.note:
        detail.append(result.note)
    return _problem(" · ".join(detail))


def _display_output(output: dict[str, Any]) -> None:
    kind = output.get("output_type")
    if kind == "stream":
        text = _joined(output.get("text"))
        _show(_problem(text) if output.get("name") == "stderr" else _plain(text))
    elif kind in ("display_data", "execute_result"):
        _show(safe_bundle(output.get("data", {}), output.get("metadata")))
    elif kind == "error":
        _show(_traceback(output))


def _traceback(output: dict[str, Any]) -> Shown:
    """The traceback's last lines (where the error is), the rest folded away in the HTML view."""
    lines = "\n".join(strip_ansi(str(line)) for line in output.get("traceback", [])).splitlines()
    head = f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"
    if len(lines) <= _TRACEBACK_SHOWN:
        shown = html.escape("\n".join(lines))
        return shown_html(f"<pre>{shown}</pre>", "\n".join(lines))
    hidden, tail = lines[:-_TRACEBACK_SHOWN], lines[-_TRACEBACK_SHOWN:]
    page = (
        f"<details><summary>{html.escape(head)} — full traceback ({len(lines)} lines)</summary>"
        f"<pre>{html.escape(chr(10).join(hidden))}</pre></details><pre>{html.escape(chr(10).join(tail))}</pre>"
    )
    return shown_html(page, "\n".join(lines))


def _link(path: Path, detail: str) -> Shown:
    """A link the notebook UI resolves relative to the user's notebook when it can."""
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(Path(path).resolve())
    href = Path(shown).as_posix()
    page = f'Notebook ({detail}): <a href="{html.escape(href)}" target="_blank">{html.escape(shown)}</a>'
    link = shown_html(page, f"Notebook ({detail}): {shown}")
    # Which notebook holds this run: what a replay of the user's notebook shows in ``_agent_run`` (``recorded.py``)
    return Shown(link.data, {METADATA_KEY: {RUN_NOTEBOOK_KEY: href}})


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")
