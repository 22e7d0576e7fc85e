"""The events' JSON, byte for byte: every event class with representative values (records, tuples, paths,
infinities, empty and non-empty optional fields) written by ``to_dict`` and ``json.dumps`` as the golden file
``tests/golden/events.jsonl`` holds it (written by the pydantic twins' encoder the fast path replaced)."""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from pathlib import Path

from kernel_agent import events
from kernel_agent.records import RecordedSource, Round, Run, RunInfo, Turn, Usage
from kernel_agent.result import Artifact, ErrorInfo, ExecutionResult

GOLDEN = Path(__file__).parent / "golden" / "events.jsonl"

_PNG = {
    "output_type": "display_data",
    "data": {"image/png": "iVBORw0K\nGgo=", "text/plain": "<Figure>"},
    "metadata": {},
}
_OUTPUTS: tuple[dict[str, typing.Any], ...] = (
    {"output_type": "stream", "name": "stdout", "text": "mean 4.2\n"},
    {"output_type": "stream", "name": "stderr", "text": "warning: ü\n"},
    _PNG,
    {"output_type": "execute_result", "execution_count": 3, "data": {"text/plain": "42"}, "metadata": {}},
)


def _results() -> list[ExecutionResult]:
    return [
        ExecutionResult(status="ok"),
        ExecutionResult(status="ok", outputs=_OUTPUTS, execution_count=3, duration_s=1.23456, note="rebuilt"),
        ExecutionResult(
            status="error",
            outputs=(_PNG, _PNG),
            duration_s=0.0004,
            error=ErrorInfo("ValueError", "bad <value>", ("Traceback", "ValueError: bad")),
            state_lost=True,
            lost_names=("df",),
        ),
        ExecutionResult(status="timeout", duration_s=math.inf),
    ]


def _rounds() -> list[Round]:
    ok, rich, error, timeout = _results()
    return [
        Round(1, "just text"),
        Round(2, "an answer", answer="42", usage=Usage(10, 20, 30)),
        Round(
            3,
            "```python\nprint(1)\n```",
            reasoning="why",
            code="print(1)",
            result=rich,
            artifacts=(Artifact("out/a.png", 1234), Artifact("b.csv", 0, "modified")),
            usage=Usage(1, 2, 3, 7),
            model_s=2.34567,
            exec_s=0.00049,
            started_at="2026-01-01T00:00:00Z",
            problem="unbalanced tags",
            reasoning_content="thinking…",
        ),
        Round(4, "r", code="1/0", result=error),
        Round(5, "r", code="while True: pass", result=timeout, model_s=math.inf),
        Round(6, "r", code="", result=ok, answer=""),
    ]


def _runs() -> list[Run]:
    rounds = tuple(_rounds())
    info = RunInfo("the task", model="m", sources=(RecordedSource("shop", "postgresql"),))
    return [
        Run(RunInfo("t")),
        Run(
            info,
            rounds=rounds,
            answer="42",
            stop_reason="answer",
            usage=Usage(5, 6, 11, 1),
            notebook_path=Path("/tmp/runs/a b.ipynb"),
            turns=(Turn("the task"),),
        ),
        Run(
            info, rounds=rounds[:1], stop_reason="llm_error", error="model unreachable", notebook_path=Path("rel.ipynb")
        ),
    ]


def samples() -> list[typing.Any]:
    """Representative events of every class in ``events``: each field's default and other values."""
    results, rounds = _results(), _rounds()
    return [
        events.RunStarted("task", "model", "tags", "/w", None),
        events.RunStarted("task\nline 2", "m", "tools", "/w s", "/w/n.ipynb", True, "bwrap", "asked for", "q?"),
        events.RoundStarted(1, 20),
        events.TextDelta(1, "hello"),
        events.TextDelta(2, ""),
        events.TextDelta(3, "é \u2028 \x00 </script>"),
        events.ReasoningDelta(1, "hmm"),
        events.TextReset(2, "HTTP 500"),
        events.CodeDelta(1, "import pandas"),
        events.CodeReady(1, "print(1)"),
        events.CodeReady(2, "x = 1", "first set x"),
        events.ExecutionStarted(1, 120.0),
        events.ExecutionStarted(1, None),
        events.ExecutionStarted(1, math.inf),
        events.ExecutionOutput(1, "line\r\n", 0.5),
        events.ExecutionOutput(2, "x", 1e-9, skipped_chars=10, figures=2),
        events.ExecutionOutput(2, "x", math.nan),
        *(events.ExecutionFinished(1, result) for result in results),
        events.ExecutionFinished(3, results[1], (Artifact("a.png", 1), Artifact("b", 2, "modified"))),
        *(events.RoundFinished(round_) for round_ in rounds),
        events.AnswerReady(4, "the answer is 42"),
        events.Notice("retrying"),
        events.Notice("repaired", 3),
        events.RunError("model unreachable", "ModelError"),
        events.RunError("disk full", "QuotaError", 2),
        *(events.RunFinished(run) for run in _runs()),
        events.PlanReady((), ()),
        events.PlanReady(
            ("look at sales",),
            ({"id": "a", "title": "A", "kind": "code", "depends_on": [], "status": "pending", "attempts": 0},),
            scripted=True,
        ),
        events.NodeStarted("a", "Load"),
        events.NodeStarted("a", "Load", 2),
        events.NodeFinished("a", "done", 1, 0),
        events.NodeFinished("b", "failed", 3, 2, "stopped by max_task_rounds"),
        events.PlanFinished({"done": 2, "failed": 0}, "/p/plan.ipynb", "/p/plan.html"),
        events.PlanFinished({}, "n", "r", "<html></html>", "findings"),
    ]


def _wire(event: typing.Any) -> str:
    return json.dumps(event.to_dict())


def test_every_event_class_has_a_sample() -> None:
    classes = {
        value
        for name in events.__all__
        if dataclasses.is_dataclass(value := getattr(events, name)) and isinstance(value, type)
    }
    assert len(classes) == 19
    assert {type(event) for event in samples()} == classes


def test_every_events_json_is_the_golden_one() -> None:
    golden = GOLDEN.read_text(encoding="utf-8").split("\n")[:-1]
    assert [_wire(event) for event in samples()] == golden


def _json_types(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(key, str) and _json_types(item) for key, item in value.items())
    if isinstance(value, list):
        return all(_json_types(item) for item in value)
    return value is None or isinstance(value, str | int | float | bool)


def test_to_dict_holds_only_json_values_and_each_class_writes_alike_twice() -> None:
    """No tuple, path or record left in the dict (a front end may hand it to any JSON encoder); a class's second
    event is written as its first (the per-class plan is built once)."""
    for event in samples():
        first, second = event.to_dict(), event.to_dict()
        assert _json_types(first), first
        assert json.dumps(first) == json.dumps(second)


if __name__ == "__main__":  # writes the golden file again (only when the wire shapes are meant to change)
    GOLDEN.write_text("".join(_wire(event) + "\n" for event in samples()), encoding="utf-8")
