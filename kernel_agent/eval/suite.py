"""Benchmark suites: ``load_suite`` reads one into ``Question`` values and, apart, their ``Label`` values.

Owns the two layouts a suite may have and nothing of running or scoring it:

- **InfiAgent-DABench**, as published: a folder holding ``da-dev-questions.jsonl`` (``id``, ``question``,
  ``constraints``, ``format``, ``file_name``, ``level``, ``concepts``), ``da-dev-labels.jsonl`` (``id``,
  ``common_answers``: ``[[name, value], ...]``) and the tables folder ``da-dev-tables/``. Found by those
  names; its answers compare as its own script does (``dabench`` rule).
- **Our generic JSONL**: one file, one question a line::

      {"id": "q1", "task": "...", "data": ["tables/a.csv"], "level": "easy", "concepts": ["Means"],
       "sources": ["shop"],
       "answers": [{"name": "mean_a", "value": "2.50", "rule": "numeric", "precision": "label"},
                   {"name": "kind", "value": "Zebra", "rule": "case-insensitive"}]}

  ``task`` is given to the agent as written (it says the answer format: ``@name[value]``); ``data`` paths
  are relative paths of plain names under the file's folder (never the file itself; a database file is a
  data file like any other); ``sources`` names live data sources, by name only: whoever runs the suite
  gives each name its connection (``eval --data shop=postgresql://...``), since a suite is a stranger's
  text and a connection it named would be one it chose (a URI in a suite is refused); ``rule`` is ``exact``
  (the default), ``case-insensitive``, or ``numeric`` with ``tolerance`` (absolute, default 1e-6) or
  ``precision: "label"`` (the answer rounded to the label's decimals).

A ``Question`` holds only what the agent may see; the labels are a separate mapping, so nothing that
builds a task, a workspace or a request can reach them by accident.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ..errors import ConfigError, WorkspaceFileError
from ..kernel.door import Door, read_record
from ..notebook.claims import plain, plain_name

__all__ = ["DABENCH_FILES", "Label", "Question", "Rule", "Suite", "load_suite"]

DABENCH_FILES = ("da-dev-questions.jsonl", "da-dev-labels.jsonl", "da-dev-tables")
Rule = Literal["dabench", "exact", "case-insensitive", "numeric"]
MAX_SUITE_BYTES = 256 << 20  # DABench's questions and labels are ~300 kB
_RULES = ("exact", "case-insensitive", "numeric")
_SOURCE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")  # an identifier, as sources/spec.py names a source


@dataclass(frozen=True)
class Question:
    """One question as the agent gets it: ``task`` (the full text), its data files (absolute paths, each
    a plain relative path under ``Suite.data_folder``: ``Suite.data_claim``), the names of the live data
    sources it queries (their connections are the runner's, never the suite's), and the grouping the
    report uses. ``id`` is the suite's own, as a string."""

    id: str
    task: str
    data: tuple[Path, ...] = ()
    level: str = ""
    concepts: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


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
    """A loaded suite: its questions in order, their labels by question id, its layout, and the folder its
    data files are claimed under (DABench's tables folder, the generic file's own folder)."""

    name: str
    layout: Literal["dabench", "jsonl"]
    questions: tuple[Question, ...]
    labels: dict[str, tuple[Label, ...]]
    data_folder: Path = Path(".")
    records: tuple[Path, ...] = ()  # the suite's own files (questions, labels): never a question's data

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

    def data_claim(self, path: Path) -> str:
        """A question's data file as the plain relative path it was claimed by, under ``data_folder``."""
        return path.relative_to(self.data_folder).as_posix()


def load_suite(path: str | Path) -> Suite:
    """The suite at ``path``: a DABench folder (found by its files' names) or a generic ``.jsonl`` file.

    The suite is someone else's text: its files are read through the door (a link in the folder, a FIFO
    or a device refused, never followed or waited on), and its data paths are claims
    (``notebook/claims.py``'s rule): a DABench ``file_name`` is a plain file name in ``da-dev-tables/``,
    a generic ``data`` path a relative path of plain, unhidden names under the file's folder, never the
    suite's own file, and a generic ``sources`` entry a plain name, never a connection URI. A question
    whose data file is missing is kept (the run records it as such).
    Raises ``ConfigError`` for a path that is neither, a line that is not valid JSON, a question without
    labels, a data path that is not such a claim, or a URI anywhere a suite names data (nothing is read
    for it, nothing runs).
    """
    root = Path(path)
    if root.is_dir():
        kinds = [Door(root).entry_kind(name) for name in DABENCH_FILES[:2]]
        if all(kind is not None for kind in kinds):
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
        qid = str(row["id"])
        names = [row["file_name"]] if row.get("file_name") else []
        _check_claims(root / DABENCH_FILES[0], qid, names, plain_name)
        questions.append(
            Question(
                id=qid,
                task=dabench_task(row),
                data=tuple(tables / name for name in names),
                level=str(row.get("level") or ""),
                concepts=tuple(str(c) for c in concepts),
            )
        )
    labels = {
        str(row["id"]): tuple(Label(str(name), str(value), "dabench") for name, value in row["common_answers"])
        for row in _lines(root / DABENCH_FILES[1])
    }
    records = (root / DABENCH_FILES[0], root / DABENCH_FILES[1])
    return _checked(root.name, "dabench", questions, labels, tables, records)


def _generic(file: Path) -> Suite:
    questions, labels = [], {}
    for row in _lines(file):
        qid = str(row.get("id", ""))
        if not qid or not str(row.get("task") or "").strip():
            raise ConfigError(f"{file}: every line needs an id and a task ({row!r:.80})")
        claims = row.get("data") or []
        if not isinstance(claims, list):
            raise ConfigError(f"{file}: question {qid}: data must be a list of paths")
        _refuse_connections(file, qid, claims)
        _check_claims(file, qid, claims, plain)
        if file.name in (PurePosixPath(claim).as_posix() for claim in claims):
            raise ConfigError(f"{file}: question {qid} names the suite file itself as its data (it holds the labels)")
        questions.append(
            Question(
                id=qid,
                task=str(row["task"]).strip(),
                data=tuple(file.parent / PurePosixPath(p) for p in claims),
                level=str(row.get("level") or ""),
                concepts=tuple(str(c) for c in row.get("concepts") or ()),
                sources=_source_names(file, qid, row.get("sources") or []),
            )
        )
        labels[qid] = tuple(_label(file, qid, answer) for answer in row.get("answers") or ())
    return _checked(file.stem, "jsonl", questions, labels, file.parent, (file,))


def _check_claims(file: Path, qid: str, claims: list[Any], allowed: Callable[[str], bool]) -> None:
    """Refuse the suite when a question's data path is not a plain claim (``notebook/claims.py``): an
    absolute path, ``..``, a hidden name, or (DABench) a sub-folder would let a suite read any host file,
    its own labels included, into a workspace and the data summary."""
    refused = [claim for claim in claims if not (isinstance(claim, str) and allowed(claim))]
    if refused:
        kind = "a plain file name in da-dev-tables/" if allowed is plain_name else "a relative path of plain names"
        shown = ", ".join(repr(claim) for claim in refused)
        raise ConfigError(
            f"{file}: question {qid} claims the data file {shown}: not {kind} (no absolute or '..' path, no "
            "hidden name); a suite's data paths are read only under its own folder, so nothing was run"
        )


def _source_names(file: Path, qid: str, names: object) -> tuple[str, ...]:
    """A question's live sources: plain names (``shop``), each resolved by whoever runs the suite."""
    if not isinstance(names, list):
        raise ConfigError(f"{file}: question {qid}: sources must be a list of names")
    _refuse_connections(file, qid, names)
    bad = [name for name in names if not (isinstance(name, str) and _SOURCE_NAME.fullmatch(name))]
    if bad:
        shown = ", ".join(repr(name) for name in bad)
        raise ConfigError(
            f"{file}: question {qid}: the source {shown} is not a name "
            "(letters, digits and _, not starting with a digit; e.g. shop)"
        )
    return tuple(dict.fromkeys(names))


def _refuse_connections(file: Path, qid: str, values: list[Any]) -> None:
    """Refuse a suite that names a connection (``postgresql://...``): a suite is a stranger's text, and a
    connection it chose would be made with the runner's own credentials (``~/.pgpass``) to its host."""
    from ..sources.spec import is_source

    uris = [value for value in values if isinstance(value, str) and ("://" in value or is_source(value))]
    if uris:
        raise ConfigError(
            f"{file}: question {qid} names a connection (not shown: it may hold a password): a suite names a live "
            'source by name only ("sources": ["shop"]) and whoever runs it gives the connection '
            "(kernel-agent eval SUITE --data shop=postgresql://USER@HOST/DB); nothing was run"
        )


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
    name: str,
    layout: Literal["dabench", "jsonl"],
    questions: list[Question],
    labels: dict[str, tuple[Label, ...]],
    data_folder: Path,
    records: tuple[Path, ...],
) -> Suite:
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"suite {name}: question ids repeat")
    unlabelled = [q for q in ids if not labels.get(q)]
    if unlabelled:
        raise ConfigError(f"suite {name}: no answers for question {', '.join(unlabelled[:5])}")
    return Suite(name, layout, tuple(questions), labels, data_folder, records)


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        data = read_record(path, MAX_SUITE_BYTES)
    except (OSError, WorkspaceFileError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}:{number}: not a JSON object")
        yield row
