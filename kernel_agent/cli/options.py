"""The agent settings' command-line options, made from the settings table (``agent/settings.py``).

``agent_options`` and ``kernel_options`` decorate a command with one click option per flagged row of
``SETTINGS`` (its flag, type, bounds, choices and help with its environment variable and default); the
option's parameter is the setting's keyword, so ``agent_arguments`` hands the values to ``AsyncAgent`` /
``AgentConfig.resolve`` as they are (None: not given, the environment or the default decides). Owns the
command line's own ways to give a secret, which are not settings: ``--api-key-file``, ``--api-key-stdin``
and ``--gateway-token-file``. Choices are read when an option is used or shown, never at import.

``table_options`` makes the options of another table (the service's, the MCP server's, a command's own), whose
defaults and environment variables click applies. Every option made here is a ``SettingOption``, which knows
its row: the docs' configuration page lists each command's options from them (``tools/docs_reference.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from ..agent.settings import SETTINGS, Setting
from ..errors import ConfigError
from ..redact import read_secret
from .edge import edge
from .logs import hide_in_logs

__all__ = [
    "KERNEL_SETTINGS",
    "SettingOption",
    "agent_arguments",
    "agent_options",
    "kernel_arguments",
    "kernel_options",
    "secret_flags",
    "setting_option",
    "table_options",
    "timeout_option",
]

F = TypeVar("F", bound=Callable[..., Any])

# Where a kernel runs and how it is confined: every command that starts a kernel takes these (replay and mcp
# too); the other flagged settings are the agent's (run, resume, plan, demo, serve, eval).
KERNEL_SETTINGS = (
    "sandbox",
    "network",
    "kernel",
    "python",
    "template",
    "provider",
    "gateway_url",
    "gateway_token",
    "gateway_kernel",
    "memory_mb",
)
# The command line's own ways to give a secret setting: from a file or stdin, never typed as an argument.
_SECRETS: dict[str, tuple[tuple[str, dict[str, Any]], ...]] = {
    "api_key": (
        ("--api-key-file", {"metavar": "FILE", "help": "Read the API key from FILE (one line; '-' reads stdin)."}),
        ("--api-key-stdin", {"is_flag": True, "help": "Read the API key from standard input (one line)."}),
    ),
    "gateway_token": (
        (
            "--gateway-token-file",
            {
                "type": click.Path(exists=True, dir_okay=False),
                "metavar": "FILE",
                "help": "Read the gateway's token from FILE (keeps it off the command line) [env: "
                f"{SETTINGS['gateway_token'].env} holds the token itself].",
            },
        ),
    ),
}
_NOTES = {"api_key": "visible to other users in `ps`: prefer --api-key-file or --api-key-stdin"}


class Registered(click.Choice[str]):
    """A choice among the names a callable gives (a registry's entry points), read when the option is used or
    shown, not when the CLI is imported."""

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        self._names = names
        super().__init__(())

    @property  # type: ignore[override]
    def choices(self) -> Sequence[str]:
        return tuple(self._names())

    @choices.setter
    def choices(self, _value: Sequence[str]) -> None:  # click's __init__ sets them: they are the registry's
        pass


class SettingOption(click.Option):
    """A click option made from a settings row (``setting``): the docs list a command's options by their rows."""

    def __init__(self, *args: Any, setting: Setting, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def get_help_extra(self, ctx: click.Context) -> Any:
        """Click's, with the default as the row words it (``shown_default``; a number as ``1800``, not ``1800.0``)."""
        extra = super().get_help_extra(ctx)
        row = self.setting
        if self.show_default and (row.shown_default or ("default" in extra and row.type is float)):
            extra["default"] = row.default_text()
        return extra


def _click_type(row: Setting) -> Any:
    if row.choices is not None:
        return Registered(row.choices)
    if row.type is int:
        return click.IntRange(min=_whole(row.minimum), max=_whole(row.maximum), min_open=row.positive)
    if row.type is float:
        return click.FloatRange(min=row.minimum, max=row.maximum, min_open=row.positive)
    return None


def _whole(bound: float | None) -> int | None:
    return None if bound is None else int(bound)


def setting_option(row: Setting, *, given: bool = False) -> Callable[[F], F]:
    """The click option of one flagged row, whose parameter is the setting's keyword. Unless ``given``, its
    value is None when not given (the agent's rows: ``AgentConfig`` reads the environment, then the default)
    and its help says the environment variable and the default; ``given``: click gives the row's environment
    variable, else its default, and shows them as it does."""
    assert row.flag is not None, row.name
    made: dict[str, Any] = {"cls": SettingOption, "setting": row}
    if given:
        made.update(
            help=row.help.rstrip(".") + ".",
            default=row.default,
            show_default=bool(row.default_text()),
            envvar=row.env,
            show_envvar=row.env is not None,
            multiple=row.multiple,
        )
    else:
        made.update(help=row.described(_NOTES.get(row.name, "")), default=None)
    if row.type is bool and row.negatable:
        return click.option(f"{row.flag}/--no-{row.flag[2:]}", row.name, **made)
    declared = (row.flag, *row.aliases, *([row.short] if row.short else []))
    if row.type is bool:  # a switch: on, or not given (None; a command's own: off)
        return click.option(*declared, row.name, is_flag=True, flag_value=True, **made)
    metavar = None if row.choices else row.metavar  # click lists the choices in its place
    return click.option(*declared, row.name, type=_click_type(row), metavar=metavar, **made)


def secret_flags(name: str) -> tuple[str, ...]:
    """The command line's own options that give the secret setting ``name`` from a file or stdin."""
    return tuple(flag for flag, _ in _SECRETS.get(name, ()))


def _options(rows: Sequence[Setting], function: F, *, given: bool = False) -> F:
    decorators = []
    for row in rows:
        decorators += [setting_option(row, given=given)] if row.flag else []
        decorators += [
            click.option(flag, cls=SettingOption, setting=row, **attributes)
            for flag, attributes in _SECRETS.get(row.name, ())
        ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


def table_options(*rows: Setting) -> Callable[[F], F]:
    """Decorate a command with the options of ``rows`` (another table's than the agent's), in order; click
    gives each its environment variable, else its default."""

    def decorate(function: F) -> F:
        return _options(rows, function, given=True)

    return decorate


def agent_options(function: F) -> F:
    """The agent's flagged settings (model, protocol, budgets), in the table's order."""
    return _options([r for r in SETTINGS.values() if r.flag and r.name not in KERNEL_SETTINGS], function)


def timeout_option(function: F) -> F:
    """``--timeout``, the agent's ``exec_timeout`` row, for the commands that run code without the agent
    (``replay``, ``mcp``): one flag, help and default for seconds per execution everywhere."""
    return setting_option(SETTINGS["exec_timeout"])(function)


def kernel_options(function: F) -> F:
    """Where the kernel runs and how it is confined (``KERNEL_SETTINGS``), with ``--gateway-token-file``."""
    return _options([r for r in SETTINGS.values() if r.name in KERNEL_SETTINGS], function)


def kernel_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """The ``kernel_options`` values by setting keyword (None: environment or default), the gateway's token
    read from its file."""
    token_file = options.get("gateway_token_file")
    values = {name: options.get(name) for name in KERNEL_SETTINGS if SETTINGS[name].flag}
    return {**values, "gateway_token": _read_token(token_file) if token_file else None}


def agent_arguments(options: dict[str, Any], task: str | None = None) -> dict[str, Any]:
    """``AsyncAgent`` keyword arguments from ``agent_options`` and ``kernel_options`` (None: environment or
    default); the API key read as ``--api-key-file``/``--api-key-stdin`` say (``task`` "-": stdin is the task's)."""
    values = {r.name: options.get(r.name) for r in SETTINGS.values() if r.flag and r.name not in KERNEL_SETTINGS}
    return {**values, "api_key": _api_key(options, task), **kernel_arguments(options)}


def _read_token(path: str) -> str:
    """The token in ``path`` (surrounding whitespace dropped). Raises ``ConfigError`` for an empty file."""
    token = Path(path).read_text(encoding="utf-8").strip()
    if not token:
        raise ConfigError(f"the gateway token file {path} is empty")
    return token


def _api_key(options: dict[str, Any], task: str | None = None) -> str | None:
    """The key from --api-key, --api-key-file or --api-key-stdin (at most one; None: the environment).

    Also puts the key (or ``OPENAI_API_KEY``) on the log handler's redaction list.
    """
    given = [name for name in ("api_key", "api_key_file", "api_key_stdin") if options.get(name)]
    if len(given) > 1:
        raise click.UsageError("give the API key one way: --api-key, --api-key-file or --api-key-stdin")
    source = "-" if options.get("api_key_stdin") else options.get("api_key_file")
    if source == "-" and task == "-":
        raise click.UsageError("the task and the API key cannot both be read from stdin")
    key = options.get("api_key")
    if source is not None:
        with edge():
            key = read_secret(source)
    hide_in_logs(key or os.environ.get("OPENAI_API_KEY"))
    return key
