"""What a rebuild re-runs and what it loses: ``names_of``, ``RebuildCell``, ``RebuildPlan`` (its report is
``result.RebuildReport``).

Owns the bookkeeping of restoring a kernel's state by re-running earlier
cells (after a crash, and when a run is resumed): which cells run again,
which are skipped because they read a name that is gone, which failed, and
which names are missing at the end. Pure and static (``ast`` per cell, the
same conservative reading as the clean view's ``deps``; for a kernel in another
language, its assignments read off each line: ``x <- ...``, ``df$y <- ...``);
the caller executes.
Cells that timed out, died or errored are never re-run (re-running a loop
that hung is not ours to decide): the names they bound are reported lost.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Set
from dataclasses import dataclass, field
from functools import lru_cache

from ..result import RebuildReport

__all__ = ["RebuildCell", "RebuildPlan", "names_of"]

_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_MAGIC_LINE = re.compile(r"^([ \t]*)[%!].*$", re.MULTILINE)
# Other languages (R and the like): names with dots, strings and comments left out, assignments per line.
_NAME = r"[A-Za-z.][\w.]*"
_WORD = re.compile(_NAME)
_NOISE = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`[^`\n]*`|#[^\n]*')
_ASSIGN = re.compile(rf"^[ \t]*({_NAME})[ \t]*(?:<<?-|=(?!=))(.*)$", re.M)
_MODIFY = re.compile(rf"^[ \t]*({_NAME})[ \t]*[$@\[][^\n]*?(?:<<?-|(?<![=!<>])=(?!=))", re.M)
_RIGHT = re.compile(rf"->>?[ \t]*({_NAME})")


@dataclass(frozen=True)
class RebuildCell:
    """One earlier cell: its code, a label (a round number; 0 is the setup cell) and how it ended."""

    code: str
    label: int
    status: str = "ok"  # ok / error / timeout / died / cancelled, as recorded


@dataclass
class RebuildPlan:
    """Walk the earlier cells in order: ``should_run`` says whether to run each, ``record`` takes its outcome."""

    cells: tuple[RebuildCell, ...]
    language: str = "python"  # the kernel's (language_info's name): how a cell's names are read
    _lost: dict[str, int] = field(default_factory=dict)  # name -> label of the cell that left it
    _rerun: list[int] = field(default_factory=list)
    _failed: list[tuple[int, str]] = field(default_factory=list)
    _skipped: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    _not_rerun: list[tuple[int, str]] = field(default_factory=list)

    def should_run(self, cell: RebuildCell) -> bool:
        """Whether to execute ``cell`` now; a cell not to run is accounted for here."""
        loads, binds, touched = names_of(cell.code, self.language)
        if cell.status != "ok":
            self._not_rerun.append((cell.label, cell.status))
            self._lose(binds | touched, cell.label)
            return False
        gone = sorted(loads & self._lost.keys())
        if gone:
            self._skipped.append((cell.label, tuple(gone)))
            self._lose(binds | touched, cell.label)
            return False
        return True

    def record(self, cell: RebuildCell, ok: bool, error: str = "") -> None:
        """The outcome of a cell ``should_run`` allowed."""
        _, binds, touched = names_of(cell.code, self.language)
        if ok:
            self._rerun.append(cell.label)
            for name in binds:
                self._lost.pop(name, None)
        else:
            self._failed.append((cell.label, error or "error"))
            self._lose(binds | touched, cell.label)

    def report(self) -> RebuildReport:
        return RebuildReport(
            tuple(self._rerun),
            tuple(self._failed),
            tuple(self._skipped),
            tuple(self._not_rerun),
            tuple(sorted(self._lost)),
        )

    def _lose(self, names: Set[str], label: int) -> None:
        for name in names:
            self._lost.setdefault(name, label)


@lru_cache(maxsize=1024)
def names_of(code: str, language: str = "python") -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(names read before being set in the cell, names (re)bound, names mutated in place).

    Cached by code text: the notebook export asks again for every earlier cell after each round,
    which re-parsing made quadratic over a run; frozen, so no caller can spoil the cache."""
    if language.lower() != "python":
        return _other_names(code)
    try:
        tree = ast.parse(_MAGIC_LINE.sub(r"\1pass", code))
    except SyntaxError:
        every = frozenset(_IDENTIFIER.findall(code))
        return every, frozenset(), every  # unparsable: assume it reads and changes everything it names
    loads: set[str] = set()
    rebinds: set[str] = set()
    touched: set[str] = set()
    for statement in tree.body:
        bound: set[str] = set()
        for node in ast.walk(statement):
            if isinstance(node, ast.Name):
                if isinstance(node.ctx, ast.Load):
                    if node.id not in rebinds:
                        loads.add(node.id)
                else:
                    bound.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
                touched.update(_changed_name(node))
        rebinds |= bound
    return frozenset(loads), frozenset(rebinds), frozenset(touched)


def _changed_name(target: ast.Attribute | ast.Subscript) -> tuple[str, ...]:
    """The name an assignment to ``target`` changes in place (``df`` of ``df.a[0] = 1``); none for ``f().a``."""
    base = target.value
    while isinstance(base, (ast.Attribute, ast.Subscript)):
        base = base.value
    return (base.id,) if isinstance(base, ast.Name) else ()


def _other_names(code: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """``names_of`` for a language we do not parse: the names each line assigns (``x <- 1``, ``x = 1``,
    ``1 -> x``), those it changes in place (``df$y <- 2``, ``m[1] <- 0``), and every other name it
    mentions as read (conservative: a function's name counts as read, which loses nothing)."""
    text = _NOISE.sub(" ", code)
    binds: set[str] = set(_RIGHT.findall(text))
    fresh: set[str] = set()
    for match in _ASSIGN.finditer(text):
        name, value = match.group(1), match.group(2)
        binds.add(name)
        if name not in _WORD.findall(text[: match.start(1)]) and name not in _WORD.findall(value):
            fresh.add(name)  # set here before any read of it
    touched = set(_MODIFY.findall(text))
    loads = set(_WORD.findall(text)) - fresh
    return frozenset(loads), frozenset(binds), frozenset(touched)
