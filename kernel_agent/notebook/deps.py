"""Which failed cells the clean view must keep: ``needed_failures``.

Owns a small, static and conservative data-flow check over the code of a
run's rounds, so that dropping failed attempts cannot break the clean
notebook. Pure: code in, cell positions out. Does not build cells
(``export.py`` does).
"""

from __future__ import annotations

from ..kernel.rebuild import RebuildCell, RebuildPlan
from ..kernel.rebuild import names_of as _names
from ..records import Round
from ..result import ExecutionResult

__all__ = ["needed_failures", "unreplayed_dependencies", "unreplayed_sources"]

_SYNTAX_ERRORS = frozenset({"SyntaxError", "IndentationError", "TabError"})


def needed_failures(rounds: tuple[Round, ...], language: str = "python") -> dict[int, set[str]]:
    """Failed cells (by position) whose partial effects later kept cells use, with those names.

    A cell that raised may have bound or mutated names before the error
    (``df = load(); df.plot(kind="bad")``); dropping it would break the
    clean notebook. Static and conservative: names are found with ``ast``
    per top-level statement; syntax errors ran nothing; timeouts and deaths
    are never re-run. Mutation through method calls (``df.drop(inplace=True)``)
    is not seen.
    """
    needed: dict[int, set[str]] = {}
    while True:  # a kept failure may itself read names an earlier failure set; grows monotonically
        found = _scan_failures(rounds, set(needed), language)
        if found == needed:
            return needed
        needed = found


def _scan_failures(rounds: tuple[Round, ...], kept_failures: set[int], language: str) -> dict[int, set[str]]:
    live: dict[str, int] = {}  # name -> position of the dropped failed cell that last set it
    needed: dict[int, set[str]] = {}
    for pos, rnd in enumerate(rounds):
        if rnd.code is None or rnd.result is None:
            continue
        loads, rebinds, touched = _names(rnd.code, language)
        if rnd.result.status == "ok" or pos in kept_failures:
            for name in loads & live.keys():
                needed.setdefault(live[name], set()).add(name)
        if rnd.result.status == "ok":
            for name in rebinds:
                live.pop(name, None)
        elif rnd.result.status == "error" and not _is_syntax_error(rnd.result):
            for name in rebinds | touched:
                live[name] = pos
    return needed


def _is_syntax_error(result: ExecutionResult) -> bool:
    if result.error is not None:
        return result.error.ename in _SYNTAX_ERRORS
    return any(out.get("ename") in _SYNTAX_ERRORS for out in result.outputs if out.get("output_type") == "error")


UNREPLAYED = frozenset({"timeout", "died", "cancelled"})  # guarded in the export: a replay does not run them


def unreplayed_dependencies(rounds: tuple[Round, ...], language: str = "python") -> dict[int, tuple[str, ...]]:
    """Rounds (by index) that read names only a cell the replay skips had set, with those names.

    A replay (and Run All) skips timed-out, crashed and stopped cells, so a later cell that used
    what such a cell left (``i`` from an interrupted loop) cannot give its recorded output; nor can
    cells that in turn read what those cells set. Static, like ``needed_failures``.
    """
    cells = [
        RebuildCell(rnd.code, rnd.index, rnd.result.status if rnd.result.status in UNREPLAYED else "ok")
        for rnd in rounds
        if rnd.code and rnd.result is not None
    ]
    plan = RebuildPlan(tuple(cells), language)
    for cell in cells:
        if plan.should_run(cell):
            plan.record(cell, True)
    return dict(plan.report().skipped)


def unreplayed_sources(rounds: tuple[Round, ...], language: str = "python") -> dict[int, set[str]]:
    """Skipped rounds (by index) whose names ``unreplayed_dependencies`` found read later, with those names."""
    readers = unreplayed_dependencies(rounds, language)
    sources: dict[int, set[str]] = {}
    for reader, names in readers.items():
        for name in names:
            setters = [
                rnd.index
                for rnd in rounds
                if rnd.index < reader
                and rnd.code
                and rnd.result is not None
                and rnd.result.status in UNREPLAYED
                and name in _bound(rnd.code, language)
            ]
            if setters:
                sources.setdefault(setters[-1], set()).add(name)
    return sources


def _bound(code: str, language: str) -> frozenset[str]:
    _, rebinds, touched = _names(code, language)
    return rebinds | touched
