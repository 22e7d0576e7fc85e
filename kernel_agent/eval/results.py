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
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import WorkspaceFileError
from ..kernel.door import Door, write_record
from .scoring import Metrics, metrics

__all__ = [
    "FAILURE_KINDS",
    "MACHINERY",
    "MAX_RESULTS_BYTES",
    "OUTCOMES",
    "RESULTS",
    "SCORED",
    "Outcome",
    "Comparison",
    "Summary",
    "append_result",
    "compare",
    "id_order",
    "read_results",
    "refused",
    "summarize",
]

RESULTS = "results.jsonl"
Outcome = Literal[
    "correct", "wrong", "no_answer", "format", "timeout", "model_error", "kernel_error", "missing_data", "harness_error"
]
SCORED: tuple[Outcome, ...] = ("correct", "wrong", "no_answer", "format")
MACHINERY: tuple[Outcome, ...] = ("timeout", "model_error", "kernel_error", "missing_data", "harness_error")
FAILURE_KINDS: tuple[Outcome, ...] = (*SCORED[1:], *MACHINERY)
OUTCOMES: tuple[Outcome, ...] = (*SCORED, *MACHINERY)
MAX_RESULTS_BYTES = 256 << 20  # 257 DABench questions write ~1 MB; more is not a results file of ours


def read_results(folder: str | Path, *, repair: bool = False) -> list[dict[str, Any]]:
    """The result lines in ``folder``'s results file, the last one of each question (none when it has
    none), without a torn last line (a run killed mid-write, or one still writing: the bytes after the last
    newline). ``repair`` (the run
    resuming, which alone writes there) also cuts that line from the file, so the next append starts a
    clean line: the kept lines are written anew and renamed over it (``write_record``), never truncated
    in place.

    The file may be someone else's (a shared or unpacked run folder): it is read through the door (a link,
    FIFO or device refused at once, never followed or waited on), and each line is data: one without an
    ``id`` string, a known ``outcome``, a ``scored`` flag and ``correct`` flags is left out, and every other
    field is kept only with the type we write (``_cleaned``). Raises ``WorkspaceFileError`` (a
    ``ConfigError``) naming the file when it is refused or over ``MAX_RESULTS_BYTES``."""
    path = Path(folder) / RESULTS
    try:
        data = Door(folder).read(RESULTS, MAX_RESULTS_BYTES)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise refused(path, exc) from exc
    except WorkspaceFileError as exc:
        raise refused(path, exc) from None
    rows, kept = [], 0
    while (end := data.find(b"\n", kept)) >= 0:  # lines end at \n only: json.dumps escapes the rest
        line, kept = data[kept:end], end + 1
        try:
            row = _cleaned(json.loads(line))
        except ValueError:  # a whole line that is not JSON (or UTF-8) is not a result; only a torn tail is cut
            continue
        if row is not None:
            rows.append(row)
    if repair and kept != len(data):
        try:
            write_record(path, data[:kept], durable=True, make_dirs=False)
        except (OSError, WorkspaceFileError) as exc:
            raise refused(path, exc) from exc
    latest = {row["id"]: row for row in rows}  # a question run again (``--retry-failed``): its last line counts
    return [row for row in rows if latest[row["id"]] is row]


def append_result(folder: str | Path, row: dict[str, Any]) -> None:
    """Append one result line and fsync it: once this returns, the question counts as done. Through the
    door (``Door.append``): never through a link, never blocking on a FIFO. Raises ``WorkspaceFileError``
    naming the file when it is refused."""
    line = json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"
    try:
        Door(folder).append(RESULTS, line.encode("utf-8"), durable=True)
    except (OSError, WorkspaceFileError) as exc:
        raise refused(Path(folder) / RESULTS, exc) from exc


def refused(path: Path, exc: BaseException) -> WorkspaceFileError:
    """The words for a file of an eval folder the door would not use (or could not): what and why."""
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return WorkspaceFileError(
        f"cannot use {path}: {why}; an eval run's files are used only as regular files reached without a link: "
        "give another folder",
        path=str(path),
    )


_TEXT_FIELDS = ("level", "stop_reason", "error", "raw_answer")
_NUMBER_FIELDS = ("seconds", "model_seconds", "code_seconds", "start_seconds")
_MAPPINGS = ("expected", "parsed", "why")


def _cleaned(row: object) -> dict[str, Any] | None:
    """A result line read back, kept only in the shape we write it: None for one that is not a result
    line at all; a field of another type is dropped for its default (a report or summary never trips on it)."""
    if not isinstance(row, dict):
        return None
    qid, outcome, scored, correct = row.get("id"), row.get("outcome"), row.get("scored"), row.get("correct")
    if not (isinstance(qid, str) and qid and outcome in OUTCOMES and isinstance(scored, bool)):
        return None
    if not (isinstance(correct, dict) and all(isinstance(v, bool) for v in correct.values())):
        return None
    clean: dict[str, Any] = {**row, "correct": {str(k): v for k, v in correct.items()}}
    for name in _TEXT_FIELDS:
        clean[name] = row.get(name) if isinstance(row.get(name), str) else None
    clean["level"] = clean["level"] or ""
    for name in _NUMBER_FIELDS:
        value = row.get(name)
        clean[name] = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0
    rounds = row.get("rounds")
    clean["rounds"] = rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else 0
    for name in _MAPPINGS:
        value = row.get(name)
        clean[name] = {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
    clean["concepts"], clean["errors"] = _strings(row.get("concepts")), _strings(row.get("errors"))
    clean["tokens"] = row.get("tokens") if isinstance(row.get("tokens"), dict) else {}
    clean["notebook"] = row.get("notebook") if isinstance(row.get("notebook"), str) else ""
    return clean


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


_RUN = re.compile(r"(\d+)")
_LONGEST_NUMBER = 64  # digits compared as a number; a longer run is compared as text (int() refuses 4,301+)


def id_order(qid: object) -> tuple[tuple[int, int, str], ...]:
    """A natural sort key for a question id, whatever the suite calls it: runs of decimal digits compare
    as numbers (``9`` before ``10``), the rest (``²``, a 5,000-digit run, words) as text. Never raises."""
    parts = []
    for piece in _RUN.split(str(qid)):
        if not piece:
            continue
        if piece.isdecimal() and len(piece) <= _LONGEST_NUMBER:
            parts.append((0, int(piece), piece))
        else:
            parts.append((1, 0, piece))
    return tuple(parts)


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

    @property
    def all_failed(self) -> bool:
        """True when there were questions and the machinery failed every one (none could be scored)."""
        return self.total > 0 and self.unscored == self.total

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
    whose outcome changed otherwise, those only one run has, and the three metrics' differences (B - A)
    over the ``shared`` questions (those both runs scored). ``a_own`` and ``b_own`` are each run's metrics
    over all it scored: with nothing ``shared`` there is nothing to compare, and they are what each run says."""

    fixed: tuple[str, ...]
    broke: tuple[str, ...]
    changed: tuple[tuple[str, str, str], ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    a: Metrics
    b: Metrics
    shared: tuple[str, ...] = ()
    a_own: Metrics | None = None
    b_own: Metrics | None = None

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
    """Compare two runs' results question by question; metrics over the questions both scored (and each
    run's own, over all it scored)."""
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
        shared=tuple(common),
        a_own=metrics(row["correct"] for row in a.values() if row.get("scored")),
        b_own=metrics(row["correct"] for row in b.values() if row.get("scored")),
    )
