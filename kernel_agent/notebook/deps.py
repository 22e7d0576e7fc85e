"""Which failed cells the clean view must keep: ``needed_failures``.

Owns a small, static and conservative data-flow check over the code of a
run's rounds, so that dropping failed attempts cannot break the clean
notebook. Pure: code in, cell positions out. Does not build cells
(``notebook.py`` does).
"""

from __future__ import annotations

import ast
import re

from ..kernel.result import ExecutionResult
from ..run import Round

__all__ = ["needed_failures"]

_SYNTAX_ERRORS = frozenset({"SyntaxError", "IndentationError", "TabError"})
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_MAGIC_LINE = re.compile(r"^([ \t]*)[%!].*$", re.MULTILINE)


def needed_failures(rounds: tuple[Round, ...]) -> dict[int, set[str]]:
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
        found = _scan_failures(rounds, set(needed))
        if found == needed:
            return needed
        needed = found


def _scan_failures(rounds: tuple[Round, ...], kept_failures: set[int]) -> dict[int, set[str]]:
    live: dict[str, int] = {}  # name -> position of the dropped failed cell that last set it
    needed: dict[int, set[str]] = {}
    for pos, rnd in enumerate(rounds):
        if rnd.code is None or rnd.result is None:
            continue
        loads, rebinds, touched = _names(rnd.code)
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


def _names(code: str) -> tuple[set[str], set[str], set[str]]:
    """(names read before being set in the cell, names (re)bound, names mutated in place)."""
    try:
        tree = ast.parse(_MAGIC_LINE.sub(r"\1pass", code))
    except SyntaxError:
        every = set(_IDENTIFIER.findall(code))
        return every, set(), every  # unparsable: assume it reads and changes everything it names
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
    return loads, rebinds, touched
