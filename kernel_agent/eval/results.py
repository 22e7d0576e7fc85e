"""An eval run's results: one ``results.jsonl`` line per finished question, summaries and comparisons.

Owns the result line (``outcome`` and the fields below), the file it lives in (appended one line at a
time, fsynced, so a killed run keeps every finished question and at most loses a torn last line, which
``read_results`` drops), ``summarize`` (the official metrics overall, per level and per concept, with
counts, and the failure kinds) and ``compare`` (two runs: flipped questions and metric differences).

A line: ``id``, ``level``, ``concepts``, ``outcome``, ``scored``, ``correct`` / ``expected`` /
``parsed`` / ``why`` (by sub-answer name), ``raw_answer``, ``rounds``, ``tokens``, ``seconds``,
``model_seconds``, ``code_seconds``, ``start_seconds`` (until its first round could begin: a kernel from
the pool, the data copied, the setup cell), ``stop_reason``, ``errors`` (what went wrong on the way),
``error`` (what ended it, for a failure of the machinery), ``notebook`` (relative to the run folder).

Outcomes: the model's (scored) ``correct``, ``wrong``, ``no_answer``, ``format`` (an answer without
``@name[value]``); the machinery's (never scored, never a wrong answer) ``timeout`` (the model's reply
did not come in time), ``model_error``, ``kernel_error``, ``missing_data``, ``harness_error``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .scoring import Metrics, metrics

__all__ = [
    "FAILURE_KINDS",
    "MACHINERY",
    "RESULTS",
    "SCORED",
    "Outcome",
    "Comparison",
    "Summary",
    "append_result",
    "compare",
    "read_results",
    "summarize",
]

RESULTS = "results.jsonl"
Outcome = Literal[
    "correct", "wrong", "no_answer", "format", "timeout", "model_error", "kernel_error", "missing_data", "harness_error"
]
SCORED: tuple[Outcome, ...] = ("correct", "wrong", "no_answer", "format")
MACHINERY: tuple[Outcome, ...] = ("timeout", "model_error", "kernel_error", "missing_data", "harness_error")
FAILURE_KINDS: tuple[Outcome, ...] = (*SCORED[1:], *MACHINERY)


def read_results(folder: str | Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The result lines in ``folder``'s results file, the last one of each question (none when it has
    none), without a torn last line
    (a run killed mid-write, or one still writing). ``repair`` (the run resuming, which alone writes
    there) also cuts that line from the file, so the next append starts a clean line."""
    path = Path(folder) / RESULTS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    rows, kept = [], 0
    for line in text.splitlines(keepends=True):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if not line.endswith("\n") or not isinstance(row, dict):
            break
        rows.append(row)
        kept += len(line.encode("utf-8"))
    if repair and kept != len(text.encode("utf-8")):
        with path.open("r+b") as file:
            file.truncate(kept)
    latest = {row["id"]: row for row in rows}  # a question run again (``--retry-failed``): its last line counts
    return [row for row in rows if latest[row["id"]] is row]


def append_result(folder: str | Path, row: dict[str, Any]) -> None:
    """Append one result line and fsync it: once this returns, the question counts as done."""
    line = json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
    with (Path(folder) / RESULTS).open("a", encoding="utf-8") as file:
        file.write(line)
        file.flush()
        os.fsync(file.fileno())


@dataclass(frozen=True)
class Summary:
    """``overall`` metrics of the scored questions, ``by_level``/``by_concept`` the same per group,
    ``outcomes`` the count of every outcome, ``total`` the questions with a result."""

    total: int
    overall: Metrics
    by_level: dict[str, Metrics]
    by_concept: dict[str, Metrics]
    outcomes: dict[str, int]

    @property
    def unscored(self) -> int:
        return sum(self.outcomes.get(kind, 0) for kind in MACHINERY)

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "overall": self.overall.to_dict(),
            "by_level": {k: v.to_dict() for k, v in self.by_level.items()},
            "by_concept": {k: v.to_dict() for k, v in self.by_concept.items()},
            "outcomes": self.outcomes,
        }


def summarize(rows: Iterable[dict[str, Any]]) -> Summary:
    """The metrics of the scored results, overall and per level and concept, and every outcome's count."""
    rows = list(rows)
    scored = [row for row in rows if row.get("scored")]
    levels: dict[str, list[dict[str, bool]]] = {}
    concepts: dict[str, list[dict[str, bool]]] = {}
    for row in scored:
        levels.setdefault(row.get("level") or "(none)", []).append(row["correct"])
        for concept in row.get("concepts") or ["(none)"]:
            concepts.setdefault(concept, []).append(row["correct"])
    outcomes: dict[str, int] = {kind: 0 for kind in (*SCORED, *MACHINERY)}
    for row in rows:
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + 1
    return Summary(
        total=len(rows),
        overall=metrics(row["correct"] for row in scored),
        by_level={k: metrics(v) for k, v in sorted(levels.items())},
        by_concept={k: metrics(v) for k, v in sorted(concepts.items())},
        outcomes=outcomes,
    )


@dataclass(frozen=True)
class Comparison:
    """Run B against run A: questions that went ``fixed`` (wrong in A, right in B) or ``broke``, those
    whose outcome changed otherwise, those only one run has, and the three metrics' differences (B - A)."""

    fixed: tuple[str, ...]
    broke: tuple[str, ...]
    changed: tuple[tuple[str, str, str], ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    a: Metrics
    b: Metrics

    def pairs(self) -> dict[str, tuple[float, float]]:
        """Each official metric in A and in B (over the questions both scored)."""
        return {
            "accuracy_by_question": (self.a.by_question, self.b.by_question),
            "accuracy_by_sub_answer": (self.a.by_sub_answer, self.b.by_sub_answer),
            "accuracy_proportional_by_sub_answer": (self.a.proportional, self.b.proportional),
        }

    def differences(self) -> dict[str, float]:
        """Each official metric's change, B - A, rounded to 4 places as the official script rounds."""
        return {name: round(b - a, 4) for name, (a, b) in self.pairs().items()}


def compare(a_rows: Iterable[dict[str, Any]], b_rows: Iterable[dict[str, Any]]) -> Comparison:
    """Compare two runs' results question by question; metrics over the questions both scored."""
    a = {row["id"]: row for row in a_rows}
    b = {row["id"]: row for row in b_rows}
    both = [qid for qid in a if qid in b]
    fixed = tuple(q for q in both if a[q]["outcome"] != "correct" and b[q]["outcome"] == "correct")
    broke = tuple(q for q in both if a[q]["outcome"] == "correct" and b[q]["outcome"] != "correct")
    changed = tuple(
        (q, a[q]["outcome"], b[q]["outcome"])
        for q in both
        if a[q]["outcome"] != b[q]["outcome"] and q not in fixed and q not in broke
    )
    common = [q for q in both if a[q].get("scored") and b[q].get("scored")]
    return Comparison(
        fixed=fixed,
        broke=broke,
        changed=changed,
        only_a=tuple(q for q in a if q not in b),
        only_b=tuple(q for q in b if q not in a),
        a=metrics(a[q]["correct"] for q in common),
        b=metrics(b[q]["correct"] for q in common),
    )
