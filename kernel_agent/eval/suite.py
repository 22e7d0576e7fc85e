"""Benchmark suites: ``load_suite`` reads one into ``Question`` values and, apart, their ``Label`` values.

Owns the two layouts a suite may have and nothing of running or scoring it:

- **InfiAgent-DABench**, as published: a folder holding ``da-dev-questions.jsonl`` (``id``, ``question``,
  ``constraints``, ``format``, ``file_name``, ``level``, ``concepts``), ``da-dev-labels.jsonl`` (``id``,
  ``common_answers``: ``[[name, value], ...]``) and the tables folder ``da-dev-tables/``. Found by those
  names; its answers compare as its own script does (``dabench`` rule).
- **Our generic JSONL**: one file, one question a line::

      {"id": "q1", "task": "...", "data": ["tables/a.csv"], "level": "easy", "concepts": ["Means"],
       "answers": [{"name": "mean_a", "value": "2.50", "rule": "numeric", "precision": "label"},
                   {"name": "kind", "value": "Zebra", "rule": "case-insensitive"}]}

  ``task`` is given to the agent as written (it says the answer format: ``@name[value]``); ``data`` paths
  are relative to the file's folder; ``rule`` is ``exact`` (the default), ``case-insensitive``, or
  ``numeric`` with ``tolerance`` (absolute, default 1e-6) or ``precision: "label"`` (the answer rounded
  to the label's decimals).

A ``Question`` holds only what the agent may see; the labels are a separate mapping, so nothing that
builds a task, a workspace or a request can reach them by accident.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import ConfigError

__all__ = ["DABENCH_FILES", "Label", "Question", "Rule", "Suite", "load_suite"]

DABENCH_FILES = ("da-dev-questions.jsonl", "da-dev-labels.jsonl", "da-dev-tables")
Rule = Literal["dabench", "exact", "case-insensitive", "numeric"]
_RULES = ("exact", "case-insensitive", "numeric")


@dataclass(frozen=True)
class Question:
    """One question as the agent gets it: ``task`` (the full text), its data files (absolute paths), and
    the grouping the report uses. ``id`` is the suite's own, as a string."""

    id: str
    task: str
    data: tuple[Path, ...] = ()
    level: str = ""
    concepts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Label:
    """One expected sub-answer and how an answer is compared with it."""

    name: str
    value: str
    rule: Rule = "exact"
    tolerance: float | None = None
    precision: Literal["label"] | None = None


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its questions in order, their labels by question id, and its layout."""

    name: str
    layout: Literal["dabench", "jsonl"]
    questions: tuple[Question, ...]
    labels: dict[str, tuple[Label, ...]]

    def select(self, ids: tuple[str, ...] = (), limit: int | None = None) -> tuple[Question, ...]:
        """The questions to run: those named in ``ids`` (in suite order), then the first ``limit``.
        Raises ``ConfigError`` for an id the suite does not have."""
        chosen = self.questions
        if ids:
            known = {q.id for q in chosen}
            missing = [i for i in ids if i not in known]
            if missing:
                raise ConfigError(f"the suite has no question {', '.join(missing)}")
            chosen = tuple(q for q in chosen if q.id in set(ids))
        return chosen[:limit] if limit is not None else chosen


def load_suite(path: str | Path) -> Suite:
    """The suite at ``path``: a DABench folder (found by its files' names) or a generic ``.jsonl`` file.

    A question whose data file is missing is kept (the run records it as such). Raises ``ConfigError``
    for a path that is neither, a line that is not valid JSON, or a question without labels.
    """
    root = Path(path)
    if root.is_dir():
        if all((root / name).exists() for name in DABENCH_FILES[:2]):
            return _dabench(root)
        raise ConfigError(f"{root} is a folder without {DABENCH_FILES[0]} and {DABENCH_FILES[1]} (InfiAgent-DABench)")
    if root.is_file():
        return _generic(root)
    raise ConfigError(f"no suite at {root}: give a DABench folder or a .jsonl file")


def dabench_task(row: dict[str, Any]) -> str:
    """A DABench question as the agent reads it: the question, its constraints and its answer format,
    each under its own heading, as the suite writes them."""
    parts = [str(row["question"]).strip()]
    if str(row.get("constraints") or "").strip():
        parts.append("Constraints: " + str(row["constraints"]).strip())
    if str(row.get("format") or "").strip():
        parts.append(
            "Answer format: "
            + str(row["format"]).strip()
            + "\nGive the final answer in exactly this @name[value] form."
        )
    return "\n\n".join(parts)


def _dabench(root: Path) -> Suite:
    tables = root / DABENCH_FILES[2]
    questions = []
    for row in _lines(root / DABENCH_FILES[0]):
        concepts = row.get("concepts") or ()
        questions.append(
            Question(
                id=str(row["id"]),
                task=dabench_task(row),
                data=(tables / str(row["file_name"]),) if row.get("file_name") else (),
                level=str(row.get("level") or ""),
                concepts=tuple(str(c) for c in concepts),
            )
        )
    labels = {
        str(row["id"]): tuple(Label(str(name), str(value), "dabench") for name, value in row["common_answers"])
        for row in _lines(root / DABENCH_FILES[1])
    }
    return _checked(root.name, "dabench", questions, labels)


def _generic(file: Path) -> Suite:
    questions, labels = [], {}
    for row in _lines(file):
        qid = str(row.get("id", ""))
        if not qid or not str(row.get("task") or "").strip():
            raise ConfigError(f"{file}: every line needs an id and a task ({row!r:.80})")
        questions.append(
            Question(
                id=qid,
                task=str(row["task"]).strip(),
                data=tuple(file.parent / str(p) for p in row.get("data") or ()),
                level=str(row.get("level") or ""),
                concepts=tuple(str(c) for c in row.get("concepts") or ()),
            )
        )
        labels[qid] = tuple(_label(file, qid, answer) for answer in row.get("answers") or ())
    return _checked(file.stem, "jsonl", questions, labels)


def _label(file: Path, qid: str, answer: dict[str, Any]) -> Label:
    rule = answer.get("rule", "exact")
    if rule not in _RULES:
        raise ConfigError(f"{file}: question {qid}: rule {rule!r} is not one of {', '.join(_RULES)}")
    precision = answer.get("precision")
    if precision not in (None, "label"):
        raise ConfigError(f'{file}: question {qid}: precision must be "label" when given')
    tolerance = answer.get("tolerance")
    return Label(
        str(answer["name"]),
        str(answer["value"]),
        rule,
        float(tolerance) if tolerance is not None else None,
        precision,
    )


def _checked(
    name: str, layout: Literal["dabench", "jsonl"], questions: list[Question], labels: dict[str, tuple[Label, ...]]
) -> Suite:
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"suite {name}: question ids repeat")
    unlabelled = [q for q in ids if not labels.get(q)]
    if unlabelled:
        raise ConfigError(f"suite {name}: no answers for question {', '.join(unlabelled[:5])}")
    return Suite(name, layout, tuple(questions), labels)


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{number}: not a JSON object")
        yield row
