"""Issue 16's benchmark of partial output: what ``execute(on_output=...)`` costs. ``NAME`` and ``PARTS``.

* ``chatty``: a cell printing 200,000 short lines, through one
  ``KernelSession``, with an ``on_output`` callback against without one,
  alternating on the same kernel. The callback only keeps the chunks, so
  the row measures the throttle, not what a front end does with the text.
  The metric names how many chunks one execution produced (the throttle:
  the first at once, then at most one per 0.5 s, plus the rest at the end).

Both sides must print every line: a fast wrong answer raises.

* ``events``: an event's JSON (``Event.to_dict``, the SSE and ``--json`` path: one event per streamed piece
  of the model's text) through the one adapter (``shapes.event_dict``: a serializer compiled per event class)
  vs the hand-written encoder it replaced (``events._jsonable`` before issue 50, rebuilt here), per
  ``TextDelta`` and per a round's ``RoundFinished``; blocks of events alternating, median of each. Both must
  write the same dict: a fast wrong answer raises. Targets: a ``TextDelta`` no dearer than the old encoder's
  (≤ 1.0×); a round's record ≤ 6× (it is validated into its pydantic wire shape by attribute, as the
  notebook's is: ~8 µs once a round, where the old encoder copied attributes by hand in ~2 µs; the pydantic
  twin validated per event before was 7–10×).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from report import Row, Scale, median, scaled

from kernel_agent.events import RoundFinished, TextDelta
from kernel_agent.kernel.partial import OutputChunk
from kernel_agent.kernel.session_sync import KernelSession
from kernel_agent.records import Round, Run, Usage
from kernel_agent.result import Artifact, ExecutionResult

NAME = "stream"

CHATTY = "for i in range({lines}):\n    print('line', i)"


def chatty(quick: Scale) -> list[Row]:
    """Median seconds of the chatty cell (200,000 lines; 20,000 in a smoke run) with and without ``on_output``,
    alternating."""
    rounds, lines = scaled(quick, (9, 200_000), (3, 200_000), (1, 20_000))
    cell, last_line = CHATTY.format(lines=lines), f"line {lines - 1}\n"
    with_callback: list[float] = []
    without: list[float] = []
    chunk_counts: list[int] = []
    with KernelSession() as session:
        if quick != Scale.SMOKE:
            session.execute(cell)  # warm-up, discarded
        for index in range(rounds):
            for streamed in (True, False) if index % 2 == 0 else (False, True):
                chunks: list[OutputChunk] = []
                started = time.perf_counter()
                result = session.execute(cell, on_output=chunks.append if streamed else None)
                elapsed = time.perf_counter() - started
                if not (result.ok and result.stdout.endswith(last_line)):
                    raise AssertionError(f"the chatty cell went wrong: {result!r}")
                if streamed:
                    if not chunks or not "".join(c.text for c in chunks[-1:]).endswith(last_line):
                        raise AssertionError("the last chunk does not end with the last line")
                    with_callback.append(elapsed)
                    chunk_counts.append(len(chunks))
                else:
                    without.append(elapsed)
    chunks_seen = f"{min(chunk_counts)}–{max(chunk_counts)}"
    return [
        Row(
            f"{lines:,}-line cell, median of {rounds}: execute with on_output ({chunks_seen} chunks) vs without",
            median(with_callback),
            median(without),
            max_ratio=1.05,
        ),
    ]


def _jsonable(value: Any) -> Any:
    """The events' encoder before issue 50 (``events._jsonable``), as it was."""
    if isinstance(value, ExecutionResult):
        return {
            "status": value.status,
            "execution_count": value.execution_count,
            "duration_s": round(value.duration_s, 3),
            "state_lost": value.state_lost,
            "note": value.note,
            "stdout": value.stdout,
            "stderr": value.stderr,
            "result_text": value.result_text,
            "error": None if value.error is None else {"ename": value.error.ename, "evalue": value.error.evalue},
            "images": len(value.images),
        }
    if isinstance(value, Round):
        return {
            "index": value.index,
            "status": value.status,
            "code": value.code,
            "answer": value.answer,
            "usage": value.usage.to_dict(),
            "model_s": round(value.model_s, 3),
            "exec_s": round(value.exec_s, 3),
            "artifacts": [a.to_dict() for a in value.artifacts],
            "problem": value.problem,
            "reasoning_content": value.reasoning_content,
        }
    if isinstance(value, Run):
        return {
            "answer": value.answer,
            "stop_reason": value.stop_reason,
            "error": value.error,
            "rounds": len(value.rounds),
            "usage": value.usage.to_dict(),
            "notebook_path": None if value.notebook_path is None else str(value.notebook_path),
        }
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return value


def _old_to_dict(event: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"event": event.kind}
    for field in dataclasses.fields(event):
        out[field.name] = _jsonable(getattr(event, field.name))
    return out


def _per_event(encode: Callable[[Any], dict[str, Any]], batch: list[Any]) -> float:
    started = time.perf_counter()
    for event in batch:
        encode(event)
    return (time.perf_counter() - started) / len(batch)


def _compare(batch: list[Any], rounds: int) -> tuple[float, float]:
    """Median seconds per event through ``to_dict`` and through the old encoder, alternating blocks."""
    for event in batch[:3]:
        if event.to_dict() != _old_to_dict(event):
            raise AssertionError(f"the two encoders disagree on {event!r:.120}")
    sides: dict[str, Callable[[Any], dict[str, Any]]] = {"ours": type(batch[0]).to_dict, "old": _old_to_dict}
    samples: dict[str, list[float]] = {"ours": [], "old": []}
    for index in range(rounds):
        for side in ("ours", "old") if index % 2 == 0 else ("old", "ours"):
            samples[side].append(_per_event(sides[side], batch))
    return median(samples["ours"]), median(samples["old"])


def events(quick: Scale) -> list[Row]:
    """Median seconds per event's JSON through ``to_dict`` vs the hand-written encoder: 20,000 ``TextDelta``s
    and 2,000 ``RoundFinished``s a block (200 and 20 in a smoke run), 15 blocks of each side alternating."""
    rounds, pieces, records = scaled(quick, (15, 20_000, 2_000), (5, 5_000, 500), (1, 200, 20))
    deltas = [TextDelta(1 + index // 1000, f"piece {index} ") for index in range(pieces)]
    finished = [
        RoundFinished(
            Round(
                index,
                "reply",
                code="print(df.describe())",
                result=ExecutionResult(status="ok", duration_s=0.123456),
                artifacts=(Artifact("summary.csv", 1234),),
                usage=Usage(1200, 300, 1500),
                model_s=2.5,
                exec_s=0.1234,
            )
        )
        for index in range(records)
    ]
    delta_ours, delta_old = _compare(deltas, rounds)
    round_ours, round_old = _compare(finished, rounds)
    return [
        Row(
            "an event's JSON, per TextDelta: to_dict vs the hand-written encoder", delta_ours, delta_old, max_ratio=1.0
        ),
        Row(
            "an event's JSON, per RoundFinished: to_dict vs the hand-written encoder",
            round_ours,
            round_old,
            max_ratio=6.0,
        ),
    ]


PARTS = {"chatty": chatty, "events": events}
