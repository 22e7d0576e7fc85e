"""The agent's settings, declared once: ``SETTINGS``, one ``Setting`` row per setting.

A row says everything about one setting: its keyword (``AgentConfig.resolve(max_rounds=...)``,
``AsyncAgent(max_rounds=...)``), where it lives in ``AgentConfig`` (``config.protocol.max_rounds``), its
command-line flag, environment variable, type, default, help and choices. Made from this table: the
fields, environment reading and checks of ``AgentConfig`` (``config.py``), the command line's options
(``cli/options.py``), the ``%%agent`` magic's (``magic/cell.py``) and the docs' configuration reference
(``tools/docs_reference.py``); ``tests/test_settings.py`` holds each to it.

Choices are callables, read when a value is checked or shown, never at import: ``protocol`` offers
every protocol registered in ``kernel_agent.protocols`` (``names.protocol_names``), ``provider`` every
kernel provider in ``kernel_agent.providers``. This module owns the table and the reading of one value
(``Setting.parse``, ``Setting.check``); settings that depend on each other are checked by ``AgentConfig``.
It imports only ``names`` and the providers' registry, so a front end builds its options at import
without loading the agent or a kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..errors import ConfigError
from ..kernel.interface import EXEC_TIMEOUT_S
from ..kernel.providers.registry import PROVIDER_GROUP, provider_names
from .names import DATA_FORMATS, PROTOCOL_GROUP, protocol_names

__all__ = ["PLAN", "SETTINGS", "Part", "Setting", "Table", "option"]

Part = Literal["model", "protocol", "kernel"]  # the agent's rows' parts; another table's rows name their command
_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
_TYPE_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _sandbox_modes() -> tuple[str, ...]:
    from ..kernel.sandbox.bwrap import SANDBOX_MODES

    return SANDBOX_MODES


@dataclass(frozen=True)
class Setting:
    """One setting. ``name`` is its keyword; ``part`` and ``field`` place it in ``AgentConfig``
    (``config.<part>.<field>``). ``flag`` (with ``short``) is the command line's and the magic's option
    (None: a keyword only); a ``bool`` flag only turns the setting on unless ``negatable`` (``--x/--no-x``).
    ``env`` is the environment variable (explicit value > it > ``default``). ``optional``: None is a
    value (it means what ``shown_default`` says). ``choices`` lists the allowed values when called;
    ``registry`` names the entry-point group they come from. ``minimum`` (exclusive when ``positive``)
    and ``maximum`` bound a number. ``secret``: never shown in a repr, a log or the docs' defaults.
    ``shown_default`` replaces the default in help where the value alone does not say what it means.
    ``aliases`` are older spellings of the flag; ``multiple``: the option repeats, its value a tuple of ``type``."""

    name: str
    part: str
    field: str
    type: type
    default: Any
    help: str
    flag: str | None = None
    short: str | None = None
    env: str | None = None
    metavar: str | None = None
    choices: Callable[[], tuple[str, ...]] | None = None
    registry: str | None = None
    minimum: float | None = None
    positive: bool = False
    maximum: float | None = None
    optional: bool = False
    negatable: bool = False
    secret: bool = False
    shown_default: str | None = None
    aliases: tuple[str, ...] = ()
    multiple: bool = False

    @property
    def attribute(self) -> str:
        """Where it lives in an ``AgentConfig``: ``protocol.max_rounds``."""
        return f"{self.part}.{self.field}"

    def default_text(self) -> str:
        """The default as help shows it ("" when there is nothing to say)."""
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None or self.default == ():
            return ""
        if self.type is bool:
            return "on" if self.default else "off"
        if isinstance(self.default, float):
            return f"{self.default:g}"
        return str(self.default)

    def described(self, note: str = "") -> str:
        """The help with its environment variable and default: ``Text [env: X; default: 30].``"""
        tail = [f"env: {self.env}"] if self.env else []
        tail += [f"default: {self.default_text()}"] if self.default_text() else []
        text = self.help.rstrip(".") + (f"; {note}" if note else "")
        return text + (f" [{'; '.join(tail)}]." if tail else ".")

    def parse(self, raw: str, source: str) -> Any:
        """``raw`` (an environment variable's text, ``source`` its name) as this setting's type.
        Raises ``ConfigError`` naming ``source`` when it is not one."""
        if self.type is bool:
            if raw.strip().lower() not in _BOOLEANS:
                raise ConfigError(f"{source} must be 0 or 1 (or true/false), not {raw!r}")
            return _BOOLEANS[raw.strip().lower()]
        if self.type in (int, float):
            try:
                return self.type(raw)
            except ValueError:
                raise ConfigError(f"{source} must be {_TYPE_WORDS[self.type]}, not {raw!r}") from None
        return raw

    def check(self, value: Any) -> None:
        """Raise ``ConfigError`` unless ``value`` is allowed: the type, the choices, the bounds."""
        if value is None:
            if self.optional:
                return
            raise ConfigError(f"{self.name} must be set (it has no 'unset')")
        if self.multiple:
            if not isinstance(value, tuple):
                raise ConfigError(f"{self.name} must be a tuple, not {value!r}")
            for each in value:
                self._check_one(each)
            return
        self._check_one(value)

    def _check_one(self, value: Any) -> None:
        if not _is_a(value, self.type):
            raise ConfigError(f"{self.name} must be {_TYPE_WORDS[self.type]}, not {value!r}")
        if self.choices is not None and value not in self.choices():
            words = self.name.replace("_", " ")
            raise ConfigError(f"unknown {words} {value!r}; choose one of {', '.join(self.choices())}")
        self._check_bounds(value)

    def _check_bounds(self, value: float) -> None:
        low, high = self.minimum, self.maximum
        if low is not None and high is not None and not low <= value <= high:
            raise ConfigError(f"{self.name} must be between {low:g} and {high:g}, not {value}")
        if low is not None and self.positive and value <= low:
            raise ConfigError(f"{self.name} must be positive, not {value}")
        if low is not None and value < low:
            raise ConfigError(f"{self.name} must be at least {low:g}, not {value}")


def _is_a(value: Any, kind: type) -> bool:
    if isinstance(value, bool) or kind is bool:  # True is an int to Python, not to a setting
        return kind is bool and isinstance(value, bool)
    return isinstance(value, (int, float)) if kind is float else isinstance(value, kind)


def option(part: str, name: str, kind: type, default: Any, help: str, **more: Any) -> Setting:
    """A row of the command (or service) ``part``'s own table: its config field is its name, its flag
    ``--name-with-dashes`` unless ``flag=`` says otherwise."""
    flag = more.pop("flag", "--" + name.replace("_", "-"))
    return Setting(name, part, name, kind, default, help, flag=flag, **more)


class Table(Mapping[str, Setting]):
    """The rows by name, in the order front ends list them."""

    def __init__(self, *rows: Setting) -> None:
        self._rows = {row.name: row for row in rows}
        if len(self._rows) != len(rows):
            raise ValueError("two settings share a name")

    def __getitem__(self, name: str) -> Setting:
        return self._rows[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def of(self, part: str) -> tuple[Setting, ...]:
        """The rows of one part (of ``AgentConfig``, or a command's), in order."""
        return tuple(row for row in self._rows.values() if row.part == part)

    def check(self, values: Mapping[str, Any]) -> None:
        """Raise ``ConfigError`` unless each of ``values`` (by row name) is allowed by its row."""
        for name, value in values.items():
            self[name].check(value)


# fmt: off
SETTINGS = Table(
    # -- the model: which one answers, and how it is asked --------------------------------------------
    Setting(
        "model", "model", "name", str, None, "Model name, e.g. gpt-4o-mini or a vLLM/Ollama model's",
        flag="--model", short="-m", env="KERNEL_AGENT_MODEL", metavar="NAME", optional=True,
    ),
    Setting(
        "base_url", "model", "base_url", str, None, "OpenAI-compatible endpoint, usually ending in /v1",
        flag="--base-url", env="OPENAI_BASE_URL", metavar="URL", optional=True,
    ),
    Setting(
        "api_key", "model", "api_key", str, None,
        "API key for the endpoint (a secret: never logged, exported or passed to the kernel)",
        flag="--api-key", env="OPENAI_API_KEY", metavar="KEY", optional=True, secret=True,
    ),
    # -- the protocol: how the conversation with the model goes ---------------------------------------
    Setting(
        "protocol", "protocol", "name", str, "tools",
        "How the model writes code: tools (function calling), tags (any chat model), deepanalyze "
        "(DeepAnalyze-8B's own form), or another installed protocol",
        flag="--protocol", metavar="NAME", choices=protocol_names, registry=PROTOCOL_GROUP,
        shown_default="deepanalyze for a DeepAnalyze model's name, else tools",
    ),
    Setting(
        "max_rounds", "protocol", "max_rounds", int, 30, "Model replies before the run stops with max_rounds",
        flag="--max-rounds", metavar="N", minimum=1,
    ),
    Setting(
        "exec_timeout", "kernel", "exec_timeout", float, EXEC_TIMEOUT_S,
        "Seconds each code execution may take",
        flag="--timeout", metavar="S", minimum=0, positive=True, optional=True,
    ),
    Setting(
        "vision", "protocol", "vision", bool, False, "Send figures back to the model as images (tools protocol)",
        flag="--vision",
    ),
    Setting(
        "request_timeout", "model", "request_timeout", float, None,
        "Seconds to wait for the model's reply to start, or for its next streamed piece",
        flag="--request-timeout", env="KERNEL_AGENT_REQUEST_TIMEOUT", metavar="S", minimum=0, positive=True,
        optional=True, shown_default="the model's own, 600 for an OpenAI-compatible one",
    ),
    Setting(
        "data_format", "protocol", "data_format", str, "files",
        "deepanalyze protocol: list the data files as DeepAnalyze does (files: name and size blocks, the "
        "shape it was trained with) or with our summary under each (rich: columns, dtypes, separator, "
        "encoding, dates)",
        flag="--data-format", env="KERNEL_AGENT_DATA_FORMAT", metavar="FORMAT", choices=lambda: DATA_FORMATS,
    ),
    Setting(
        "vllm_extras", "protocol", "vllm_extras", bool, True,
        "deepanalyze protocol: send vLLM's add_generation_prompt, stop_token_ids and max_new_tokens, as "
        "DeepAnalyze's server does; turn off for servers that reject them",
        flag="--vllm-extras", env="KERNEL_AGENT_VLLM_EXTRAS", negatable=True,
    ),
    Setting(
        "disk_quota_mb", "kernel", "disk_quota_mb", int, 1024,
        "How much the workspace may grow during the run, in MB (checked after every round, which then ends the "
        "run with disk_quota); each file the code writes is capped at it too; 0: off",
        flag="--disk-quota", metavar="MB", minimum=0,
    ),
    Setting(
        "max_new_tokens", "protocol", "max_new_tokens", int, 32768,
        "deepanalyze protocol: the max_new_tokens vLLM extra", flag="--max-new-tokens", metavar="N", minimum=1,
    ),
    Setting(
        "temperature", "model", "temperature", float, None,
        "Sampling temperature sent with every request (DeepAnalyze's own server sends 0.4)",
        flag="--temperature", env="KERNEL_AGENT_TEMPERATURE", metavar="T",
        minimum=0, maximum=2, optional=True, shown_default="the server's",
    ),
    Setting(
        "top_p", "model", "top_p", float, None, "Nucleus sampling: top_p sent with every request",
        flag="--top-p", env="KERNEL_AGENT_TOP_P", metavar="P",
        minimum=0, positive=True, maximum=1, optional=True, shown_default="the server's",
    ),
    Setting("stream", "model", "stream", bool, True, "Stream replies (text reaches the front ends as it is written)"),
    Setting(
        "stuck_after", "protocol", "stuck_after", int, 3,
        "The same failing code or the same reply this many times in a row stops the run with stuck", minimum=2,
    ),
    Setting(
        "feedback_chars", "protocol", "feedback_chars", int, 6000,
        "Bound on the execution text the model gets per round, in characters", minimum=1,
    ),
    Setting(
        "full_feedback_rounds", "protocol", "full_feedback_rounds", int, 8,
        "The latest this-many execution results stay in the conversation in full; older ones are clipped to "
        "old_feedback_chars (and lose their images), so long runs fit the model's context", minimum=1,
    ),
    Setting(
        "old_feedback_chars", "protocol", "old_feedback_chars", int, 800,
        "What an older execution result is clipped to, in characters", minimum=100,
    ),
    # -- the kernel: where the code runs, and how it is confined --------------------------------------
    Setting(
        "preload", "kernel", "preload", bool, True, "Run the setup cell (pd, np, plt, data) before round 1",
    ),
    Setting(
        "rebuild", "kernel", "rebuild", bool, True, "After the kernel loses its state, re-run the successful cells",
    ),
    Setting(
        "sandbox", "kernel", "sandbox", str, "strict",
        "strict: run the kernel in a bubblewrap sandbox (read-only system, only the workspace writable, no view "
        "of other processes), and refuse to start where that is impossible; off: run it unconfined, on purpose "
        "(a warning says so)",
        flag="--sandbox", env="KERNEL_AGENT_SANDBOX", metavar="MODE", choices=_sandbox_modes,
    ),
    Setting(
        "network", "kernel", "network", bool, None,
        "On: the kernel gets a network of its own behind pasta in the sandbox (the outside world, never this "
        "machine's services; unconfined, the host's network); off: none (needs the sandbox)",
        flag="--network", negatable=True, optional=True, shown_default="off in the sandbox",
    ),
    Setting(
        "kernel", "kernel", "name", str, None,
        "Run the analysis in this Jupyter kernel (any installed kernelspec: `jupyter kernelspec list`; e.g. ir "
        "for R), in the same sandbox; with a gateway, the gateway's kernelspec unless gateway_kernel names one",
        flag="--kernel", env="KERNEL_AGENT_KERNEL", metavar="NAME", optional=True,
        shown_default="kernel-agent's Python",
    ),
    Setting(
        "python", "kernel", "python", str, None,
        "Run local kernels in this Python environment (its interpreter, e.g. /opt/conda/envs/x/bin/python, with "
        "ipykernel); its prefix is shown read-only in the same sandbox",
        flag="--python", env="KERNEL_AGENT_PYTHON", metavar="PATH", optional=True, shown_default="the agent's own",
    ),
    Setting(
        "template", "kernel", "template", bool, True,
        "Fork each local kernel from a warmed template with the analysis stack already imported (ready in a "
        "fraction of a second, its imported pages shared with its siblings), in a sandbox of its own; off: start "
        "every kernel cold. Other kernelspecs, --python, --network and a PYTHONPATH of yours start cold anyway, "
        "and so does a kernel the template cannot serve (the confinement line says which)",
        flag="--template", env="KERNEL_AGENT_TEMPLATE", negatable=True,
    ),
    Setting(
        "provider", "kernel", "provider", str, None,
        "Where the kernels live: local (a process here, in the sandbox), gateway (on --gateway), or "
        "another installed kernel provider (`kernel-agent plugins` lists them)",
        flag="--provider", env="KERNEL_AGENT_PROVIDER", metavar="NAME", optional=True, choices=provider_names,
        registry=PROVIDER_GROUP, shown_default="gateway with a gateway URL, else local",
    ),
    Setting(
        "gateway_url", "kernel", "gateway_url", str, None,
        "Run the kernels on this Jupyter Kernel/Enterprise Gateway (http://host:port); its own isolation applies "
        "there, not our sandbox",
        flag="--gateway", env="KERNEL_AGENT_GATEWAY_URL", metavar="URL", optional=True,
    ),
    Setting(
        "gateway_token", "kernel", "gateway_token", str, None,
        "The gateway's token (a secret: never logged, exported, sent to a kernel or shown in a repr)",
        env="KERNEL_AGENT_GATEWAY_TOKEN", optional=True, secret=True,
    ),
    Setting(
        "gateway_kernel", "kernel", "gateway_kernel", str, None, "The gateway's kernelspec to start",
        flag="--gateway-kernel", env="KERNEL_AGENT_GATEWAY_KERNEL", metavar="NAME", optional=True,
        shown_default="the gateway's",
    ),
    Setting(
        "memory_mb", "kernel", "memory_mb", int, None, "Memory limit of each kernel process, in MB",
        flag="--memory", metavar="MB", minimum=1, optional=True, shown_default="3/4 of RAM, at least 4096",
    ),
)
# fmt: on

# Plan mode's budgets: ``PlanOptions``' fields (``agent/plan/runner.py``) and ``kernel-agent plan``'s options.
# fmt: off
PLAN = Table(
    option("plan", "max_depth", int, 3, "Levels of sub-tasks the plan may have", minimum=1),
    option("plan", "node_budget", int, 20, "Most tasks the plan may have", minimum=1),
    option("plan", "max_fix_attempts", int, 5, "Fixes asked for a failing task", minimum=0),
    option(
        "plan", "max_task_rounds", int, 5,
        "Code rounds a task may run (it sees each one's output) before it stops without saying it is done",
        minimum=1,
    ),
)
# fmt: on
