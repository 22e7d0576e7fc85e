"""The ``%%agent`` magic's flags for the agent settings, made from the settings table (``agent/settings.py``).

``setting_arguments`` adds one argparse argument per flagged row of ``SETTINGS`` (its flag, type, choices and
help with its environment variable and default) whose destination is the setting's keyword, so
``setting_values`` hands the values to ``AsyncAgent`` as they are (None: not given, the environment or the
default decides). ``formatter`` keeps the help from listing a registry's choices when the magic is loaded
(IPython formats it then); they are read when a value is checked, and an invalid one's error lists them.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from IPython.core.magic_arguments import MagicHelpFormatter, argument

from ..agent.settings import SETTINGS, Setting

__all__ = ["Choices", "HelpFormatter", "setting_arguments", "setting_values"]

F = TypeVar("F", bound=Callable[..., Any])

_NOTES = {
    "api_key": "it stays in the cell's source: prefer --api-key-file",
    "gateway_url": f"the token comes from {SETTINGS['gateway_token'].env} only (never type it into a cell)",
}


class Choices:
    """A setting's allowed values for argparse, read from its callable each time they are checked."""

    def __init__(self, names: Callable[[], tuple[str, ...]]) -> None:
        self._names = names

    def __contains__(self, value: object) -> bool:
        return value in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())


class HelpFormatter(MagicHelpFormatter):
    """IPython's formatter, without reading ``Choices`` to expand a help text (that happens at import)."""

    def _expand_help(self, action: argparse.Action) -> str:
        if isinstance(action.choices, Choices):
            action = copy.copy(action)
            action.choices = None
        return str(super()._expand_help(action))


def _argument(row: Setting) -> argument:
    assert row.flag is not None, row.name
    flags = (row.flag, row.short) if row.short else (row.flag,)
    given: dict[str, Any] = {"dest": row.name, "default": None}
    given["help"] = row.described(_NOTES.get(row.name, "")).replace("%", "%%")
    if row.type is bool and row.negatable:
        given["action"] = argparse.BooleanOptionalAction
    elif row.type is bool:
        given.update(action="store_const", const=True)
    else:
        given.update(type=row.type, metavar=row.metavar)
        if row.choices is not None:
            given["choices"] = Choices(row.choices)
    return argument(*flags, **given)


def setting_arguments(function: F) -> F:
    """Decorate a magic with one argument per flagged setting, in the table's order."""
    for row in reversed([row for row in SETTINGS.values() if row.flag]):
        function = _argument(row)(function)
    return function


def setting_values(args: argparse.Namespace) -> dict[str, Any]:
    """The flagged settings' values by keyword (None: not given)."""
    return {row.name: getattr(args, row.name) for row in SETTINGS.values() if row.flag}
