"""Rendering a run's event stream in the terminal: ``LiveRenderer``, ``QuietRenderer``, ``JsonRenderer``.

Owns how events look, nothing else: every renderer takes the events the
agent yields (``handle``), plus ``interrupted`` when the run was cancelled,
and writes to a rich ``Console``. The helpers ``output_renderables`` and
``round_status`` are shared with ``show.py`` (the review of a finished
notebook). No agent logic and no exit codes live here (the commands own those).

Kernel and model text reaches the terminal only through ``safe.terminal``: ``printable`` for text meant
to span lines (``shown``, ``markdown``, ``code_block``), ``one_line`` for what is one line among ours (a
file name, a path, a model's name, a stop reason): control sequences, bidi and zero-width characters are
shown, never obeyed, and a name cannot print a line of its own; our own colours are rich styles added
around it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.rule import Rule
from rich.spinner import Spinner
from rich.syntax import Syntax
from rich.text import Text

from .. import events
from ..events import Event
from ..notebook.export import clean_path
from ..records import STOP_WORDS, Artifact, Round, Run, Usage
from ..result import ExecutionResult, png_size, strip_ansi
from ..safe.terminal import INVISIBLE, one_line, printable

__all__ = [
    "JsonRenderer",
    "LiveRenderer",
    "QuietRenderer",
    "Renderer",
    "SCRIPTED_NOTE",
    "code_block",
    "json_line",
    "markdown",
    "output_renderables",
    "round_status",
    "shown",
    "thinking_text",
    "usage_text",
]

SCRIPTED_NOTE = (
    "Scripted replies: no model is configured, so the model's text is played back from replies "
    "shipped with kernel-agent. The code really runs in a live kernel; the numbers and figures are real."
)
_STATUS_STYLE = {
    "ok": "green",
    "answer": "green",
    "error": "red",
    "timeout": "yellow",
    "died": "red",
    "cancelled": "yellow",
}
_STATUS_MARK = {"ok": "✓", "answer": "✓", "error": "✗", "timeout": "⏱", "died": "✗", "cancelled": "⏹", "no-code": "·"}
_TAIL_LINES = 8  # of the model's streamed text, in the live area
_LIVE_OUTPUT_CHARS = 4000  # of a running cell's output kept for the live area (it shows the last lines)


class Renderer(Protocol):
    """What a command drives: one call per event, then ``interrupted`` or nothing, then ``close``."""

    def handle(self, event: Event) -> None: ...

    def interrupted(self, notebook_path: str | None, signal_name: str) -> None: ...

    def close(self) -> None: ...


# -- shared pieces ----------------------------------------------------------------------------------


def shown(text: object) -> str:
    """Kernel or model text (or a value holding it) as text that is safe to print."""
    return printable(str(text))


def markdown(text: str) -> Markdown:
    """The model's markdown, safe to print; links show their target (no hidden terminal hyperlinks)."""
    return Markdown(printable(text), hyperlinks=False)


def usage_text(usage: Usage) -> str:
    """``"1,234 tokens (1,000 prompt + 234 completion, 100 of it reasoning)"``, or ``"tokens not reported"``."""
    if not usage.total_tokens:
        return "tokens not reported"
    thought = f", {usage.reasoning_tokens:,} of it reasoning" if usage.reasoning_tokens else ""
    return (
        f"{usage.total_tokens:,} tokens ({usage.prompt_tokens:,} prompt + {usage.completion_tokens:,} "
        f"completion{thought})"
    )


def thinking_text(thinking: str, *, expanded: bool = True, max_lines: int = 30) -> Text:
    """A reasoning model's hidden reasoning, dimmed: whole (clipped to ``max_lines``) or folded to one line."""
    body = printable(thinking).strip()
    if not expanded:
        first = body.splitlines()[0] if body else ""
        first = first if len(first) <= 80 else first[:79] + "…"
        return Text(f"▸ model reasoning ({len(body):,} characters; --thinking shows it): {first}", style="dim italic")
    return Text.assemble(("▾ model reasoning\n", "dim bold"), (_clip_lines(body, max_lines), "dim italic"))


def round_status(round_: Round) -> Text:
    """One line: mark, status, timings and tokens of a finished round."""
    status = round_.status
    text = Text(
        f"{_STATUS_MARK.get(status, '·')} round {round_.index}: {one_line(status)}",
        style=_STATUS_STYLE.get(status, "dim"),
    )
    parts = [f"model {round_.model_s:.1f} s"]
    if round_.result is not None:
        parts.append(f"code {round_.exec_s:.1f} s")
    if round_.usage.total_tokens:
        parts.append(f"{round_.usage.total_tokens:,} tokens")
    text.append("  " + " · ".join(parts), style="dim")
    if round_.result is not None and round_.result.note:
        text.append(f"\n  {shown(round_.result.note)}", style="yellow")
    return text


def code_block(code: str) -> Syntax:
    """The code of a round, highlighted."""
    return Syntax(printable(code), "python", theme="ansi_dark", line_numbers=False, word_wrap=True)


def output_renderables(outputs: Sequence[dict[str, Any]], *, max_lines: int = 30) -> list[RenderableType]:
    """Terminal renderings of nbformat outputs: text clipped, images as placeholders with their size."""
    shown: list[RenderableType] = []
    image_no = 0
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            style = "yellow" if out.get("name") == "stderr" else ""
            shown.append(Text(_clip_lines(printable(_joined(out.get("text"))), max_lines), style=style))
        elif kind in ("display_data", "execute_result"):
            data = out.get("data", {})
            if "image/png" in data:
                image_no += 1
                shown.append(Text(_image_placeholder(image_no, _joined(data["image/png"])), style="magenta"))
            elif "text/plain" in data:
                shown.append(Text(_clip_lines(printable(_joined(data["text/plain"])), max_lines)))
        elif kind == "error":
            trace = printable("\n".join(strip_ansi(str(line)) for line in out.get("traceback", [])))
            trace = trace or printable(f"{out.get('ename')}: {out.get('evalue')}")
            shown.append(Text(_clip_lines(trace, max_lines), style="red"))
    return shown


def artifacts_text(artifacts: Sequence[Artifact]) -> Text | None:
    """``files: a.png (44.1 KB, created), ...`` or None."""
    if not artifacts:
        return None
    listed = ", ".join(f"{one_line(a.path)} ({_size(a.size)}, {one_line(a.change)})" for a in artifacts[:10])
    more = f" and {len(artifacts) - 10} more" if len(artifacts) > 10 else ""
    return Text(f"files: {listed}{more}", style="cyan")


def _image_placeholder(number: int, b64: str) -> str:
    size = png_size(b64.replace("\n", ""))
    dims = f" {size[0]}x{size[1]}" if size else ""
    return f"[image {number}: png{dims}, {_size(len(b64) * 3 // 4)}]"


def _clip_lines(text: str, max_lines: int) -> str:
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= max_lines:
        return "\n".join(lines)
    head = max_lines // 2
    tail = max_lines - head
    return "\n".join([*lines[:head], f"… {len(lines) - max_lines} lines not shown …", *lines[-tail:]])


def _size(size: int) -> str:
    from ..agent.datafiles.summaries import human_size  # the one rule for sizes (lazy: pandas-free import of the CLI)

    return human_size(size)


def _joined(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


# -- live -------------------------------------------------------------------------------------------


class _Activity:
    """The transient bottom area: a spinner with elapsed time and the tail of the streamed text."""

    def __init__(self) -> None:
        self.label = ""
        self.started = 0.0
        self.text = ""
        self.active = False

    def begin(self, label: str) -> None:
        self.label, self.started, self.text, self.active = label, time.monotonic(), "", True

    def end(self) -> None:
        self.active = False

    def __rich__(self) -> RenderableType:
        if not self.active:
            return Text("")
        elapsed = time.monotonic() - self.started
        spinner = Spinner("dots", Text(f"{self.label} {elapsed:.1f} s", style="cyan"))
        tail = "\n".join(printable(self.text).rstrip().splitlines()[-_TAIL_LINES:])
        return Group(Text(tail, style="dim"), spinner) if tail else spinner


class LiveRenderer:
    """The default rendering: rounds as they happen, with a live spinner on a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._activity = _Activity()
        self._live: Live | None = None
        self._max_rounds = 0
        self._thinking = ""
        if console.is_terminal:
            self._live = Live(self._activity, console=console, transient=True, refresh_per_second=8)
            self._live.start()

    def close(self) -> None:
        """Stop the live area. Idempotent."""
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def handle(self, event: Event) -> None:
        _LIVE[type(event)](self, event)

    def interrupted(self, notebook_path: str | None, signal_name: str) -> None:
        self._activity.end()
        where = (
            f"notebook saved: {one_line(notebook_path)}"
            if notebook_path
            else "the run had not started; nothing was saved"
        )
        self.console.print(Text(shown(f"Interrupted ({signal_name}): {where}"), style="bold yellow"), soft_wrap=True)

    def _on_run_started(self, event: events.RunStarted) -> None:
        why = f" ({event.protocol_reason})" if event.protocol_reason not in ("", "asked for") else ""
        self.console.print(
            Text.assemble(
                ("kernel-agent", "bold"),
                f" · model {one_line(event.model)} · protocol {one_line(event.protocol)}{one_line(why)}",
            )
        )
        self.console.print(Text(f"workspace {one_line(event.workspace)}", style="dim"), soft_wrap=True)
        if event.scripted:
            self.console.print(Panel(Text(SCRIPTED_NOTE), border_style="yellow", title="scripted"))

    def _on_round_started(self, event: events.RoundStarted) -> None:
        self._max_rounds = event.max_rounds
        self.console.print(Rule(f"Round {event.round}/{event.max_rounds}", style="blue"))
        self._activity.begin("model writing")

    def _on_text_delta(self, event: events.TextDelta) -> None:
        self._activity.label = "model writing"
        self._activity.text += event.text

    def _on_code_delta(self, event: events.CodeDelta) -> None:
        # The spinner shows the code's tail as the model writes it; the whole code comes with code_ready.
        self._activity.label = "model writing code"
        self._activity.text = (self._activity.text + event.text)[-_LIVE_OUTPUT_CHARS:]

    def _on_reasoning_delta(self, event: events.ReasoningDelta) -> None:
        if not self._thinking:
            self._activity.label = "model thinking"
        self._thinking += event.text
        self._activity.text += event.text

    def _on_text_reset(self, event: events.TextReset) -> None:
        self._activity.text = ""
        self._thinking = ""
        self.console.print(Text(shown(f"model request failed: {event.reason}"), style="yellow"), soft_wrap=True)

    def _flush_thinking(self) -> None:
        if self._thinking.strip():
            self.console.print(thinking_text(self._thinking))
        self._thinking = ""

    def _on_code_ready(self, event: events.CodeReady) -> None:
        self._activity.end()
        self._flush_thinking()
        if event.reasoning.strip():
            self.console.print(markdown(event.reasoning))
        self.console.print(Panel(code_block(event.code), border_style="dim", padding=(0, 1)))

    def _on_execution_started(self, event: events.ExecutionStarted) -> None:
        limit = f" (limit {event.timeout:g} s)" if event.timeout else ""
        self._activity.begin(f"running code{limit}")

    def _on_execution_output(self, event: events.ExecutionOutput) -> None:
        # The spinner shows the tail of what the code prints while it runs; the whole output follows.
        self._activity.text = (self._activity.text + event.text)[-_LIVE_OUTPUT_CHARS:]

    def _on_execution_finished(self, event: events.ExecutionFinished) -> None:
        self._activity.end()
        result: ExecutionResult = event.result
        for item in output_renderables(result.outputs, max_lines=20):
            self.console.print(item)
        if result.images:
            self.console.print(Text(f"{len(result.images)} figure(s) saved in the notebook", style="magenta"))
        files = artifacts_text(event.artifacts)
        if files is not None:
            self.console.print(files)

    def _on_round_finished(self, event: events.RoundFinished) -> None:
        self._activity.end()
        self._flush_thinking()
        round_: Round = event.round
        if round_.code is None and round_.reasoning.strip():
            self.console.print(markdown(round_.reasoning))
        self.console.print(round_status(round_))

    def _on_answer(self, event: events.AnswerReady) -> None:
        self.console.print(Panel(markdown(event.answer), title="Answer", border_style="green"))

    def _on_notice(self, event: events.Notice) -> None:
        self.console.print(Text(shown(f"note: {event.message}"), style="yellow"))

    def _on_error(self, event: events.RunError) -> None:
        self._activity.end()
        self.console.print(Text(shown(f"error: {event.message}"), style="bold red"))

    def _on_finished(self, event: events.RunFinished) -> None:
        run: Run = event.run
        stop = one_line(STOP_WORDS.get(run.stop_reason or "", str(run.stop_reason)))
        style = "green" if run.answer is not None else "yellow"
        self.console.print(Rule(style=style))
        self.console.print(Text(f"{stop} after {len(run.rounds)} round(s) · {usage_text(run.usage)}", style=style))
        if run.info.scripted:
            self.console.print(Text("The model replies were scripted (see the notebook's header).", style="yellow"))
        if run.notebook_path is not None:
            self.console.print(Text.assemble(("notebook: ", "bold"), one_line(run.notebook_path)), soft_wrap=True)
            clean = clean_path(run.notebook_path)
            self.console.print(Text.assemble(("clean view: ", "bold"), one_line(clean)), soft_wrap=True)


_LIVE: dict[type[Event], Callable[[LiveRenderer, Any], None]] = {  # what draws each event, by its class
    events.RunStarted: LiveRenderer._on_run_started,
    events.RoundStarted: LiveRenderer._on_round_started,
    events.TextDelta: LiveRenderer._on_text_delta,
    events.ReasoningDelta: LiveRenderer._on_reasoning_delta,
    events.TextReset: LiveRenderer._on_text_reset,
    events.CodeDelta: LiveRenderer._on_code_delta,
    events.CodeReady: LiveRenderer._on_code_ready,
    events.ExecutionStarted: LiveRenderer._on_execution_started,
    events.ExecutionOutput: LiveRenderer._on_execution_output,
    events.ExecutionFinished: LiveRenderer._on_execution_finished,
    events.RoundFinished: LiveRenderer._on_round_finished,
    events.AnswerReady: LiveRenderer._on_answer,
    events.Notice: LiveRenderer._on_notice,
    events.RunError: LiveRenderer._on_error,
    events.RunFinished: LiveRenderer._on_finished,
}


# -- quiet and json ---------------------------------------------------------------------------------


class QuietRenderer:
    """``--quiet``: only the answer and the notebook path on ``out``; why there is no answer on ``err``."""

    def __init__(self, out: Any, err: Any) -> None:
        self.out = out
        self.err = err

    def handle(self, event: Event) -> None:
        match event:
            case events.RunError():
                self.err.write(shown(f"error: {event.message}") + "\n")
            case events.Notice() if "unconfined" in event.message:  # quiet, not silent
                self.err.write(shown(f"warning: {event.message}") + "\n")
            case events.RunFinished():
                self._finished(event.run)

    def _finished(self, run: Run) -> None:
        if run.answer is not None:
            self.out.write(shown(run.answer.rstrip("\n")) + "\n")
        else:
            self.err.write(f"no answer: {one_line(STOP_WORDS.get(run.stop_reason or '', run.stop_reason))}\n")
        if run.notebook_path is not None:
            self.out.write(one_line(run.notebook_path) + "\n")

    def interrupted(self, notebook_path: str | None, signal_name: str) -> None:
        self.err.write(f"interrupted ({signal_name})\n")
        if notebook_path:
            self.out.write(f"{one_line(notebook_path)}\n")

    def close(self) -> None:
        self.out.flush()


_C1 = re.compile(rf"[\x7f-\x9f{INVISIBLE}]")


def json_line(payload: dict[str, Any]) -> str:
    """One JSON line; DEL, C1 controls, bidi and zero-width characters escaped too (JSON escapes only C0),
    so it is safe to print."""
    return _C1.sub(lambda m: json.dumps(m.group())[1:-1], json.dumps(payload, ensure_ascii=False)) + "\n"


class JsonRenderer:
    """``--json``: one JSON object per line (``event.to_dict()``), flushed as it happens."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def handle(self, event: Event) -> None:
        self._write(event.to_dict())

    def interrupted(self, notebook_path: str | None, signal_name: str) -> None:
        self._write({"event": "interrupted", "signal": signal_name, "notebook_path": notebook_path})

    def close(self) -> None:
        pass

    def _write(self, payload: dict[str, Any]) -> None:
        self.stream.write(json_line(payload))
        self.stream.flush()
