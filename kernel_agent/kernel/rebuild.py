"""What a rebuild re-runs and what it loses: ``names_of``, ``RebuildCell``, ``RebuildPlan`` (its report is ``result.RebuildReport``).

Owns the bookkeeping of restoring a kernel's state by re-running earlier
cells (after a crash, and when a run is resumed): which cells run again,
which are skipped because they read a name that is gone, which failed, and
which names are missing at the end. Pure and static (``ast`` per cell, the
same conservative reading as the clean view's ``deps``); the caller executes.
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


@dataclass(frozen=True)
class RebuildCell:
    """One earlier cell: its code, a label (a round number; 0 is the setup cell) and how it ended."""

    code: str
    label: int
    status: str = "ok"  # ok / error / timeout / died / cancelled, as recorded


@dataclass
class RebuildPlan:
    """Walk the earlier cells in order: ``next_cells`` yields what to run, ``record`` takes each outcome."""

    cells: tuple[RebuildCell, ...]
    _lost: dict[str, int] = field(default_factory=dict)  # name -> label of the cell that left it
    _rerun: list[int] = field(default_factory=list)
    _failed: list[tuple[int, str]] = field(default_factory=list)
    _skipped: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    _not_rerun: list[tuple[int, str]] = field(default_factory=list)

    def should_run(self, cell: RebuildCell) -> bool:
        """Whether to execute ``cell`` now; a cell not to run is accounted for here."""
        loads, binds, touched = names_of(cell.code)
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
        _, binds, touched = names_of(cell.code)
        if ok:
            self._rerun.append(cell.label)
            for name in binds:
                self._lost.pop(name, None)
        else:
            self._failed.append((cell.label, error or "error"))
            self._lose(binds | touched, cell.label)

    def report(self) -> RebuildReport:
        return RebuildReport(tuple(self._rerun), tuple(self._failed), tuple(self._skipped), tuple(self._not_rerun),
                             tuple(sorted(self._lost)))

    def _lose(self, names: Set[str], label: int) -> None:
        for name in names:
            self._lost.setdefault(name, label)


@lru_cache(maxsize=1024)
def names_of(code: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(names read before being set in the cell, names (re)bound, names mutated in place).

    Cached by code text: the notebook export asks again for every earlier cell after each round,
    which re-parsing made quadratic over a run; frozen, so no caller can spoil the cache."""
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
                base = node.value
                while isinstance(base, (ast.Attribute, ast.Subscript)):
                    base = base.value
                if isinstance(base, ast.Name):
                    touched.add(base.id)
        rebinds |= bound
    return frozenset(loads), frozenset(rebinds), frozenset(touched)
