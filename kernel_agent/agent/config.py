"""Agent settings: ``AgentConfig``, its three parts and its one precedence rule.

``AgentConfig`` holds ``model`` (``ModelConfig``: which model answers and how it is asked), ``protocol``
(``ProtocolConfig``: how the conversation goes) and ``kernel`` (``KernelConfig``: where the code runs and
how it is confined). Every field is a row of ``settings.SETTINGS``, which gives its default, its environment
variable and its checks; the docs' configuration reference lists them. ``AgentConfig.resolve`` takes the
rows' flat keywords (``max_rounds=``, ``exec_timeout=``...) with one precedence: explicit argument >
environment variable > default. Invalid values raise ``ConfigError`` here, before any kernel starts or any
model is called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from ..kernel.interface import KernelsAhead, kernels_ahead_of
from ..kernel.providers.gateway.settings import GatewaySettings
from ..kernel.providers.registry import provider_for
from ..kernel.sandbox.bwrap import SandboxMode
from ..kernel.sandbox.limits import Limits
from .names import PROTOCOLS, DataFormat, ProtocolName, protocol_for_model
from .settings import SETTINGS, Part

__all__ = ["PROTOCOLS", "AgentConfig", "KernelConfig", "ModelConfig", "ProtocolConfig", "ProtocolName"]

NO_MODEL_HELP = (
    "no model configured: pass --model (or model=...), or set KERNEL_AGENT_MODEL; "
    "point OPENAI_BASE_URL at any OpenAI-compatible server (vLLM, Ollama, OpenAI) "
    "and set OPENAI_API_KEY if it needs one"
)
_DERIVED: dict[str, tuple[Part, str]] = {
    "protocol_reason": ("protocol", "reason")
}  # keywords that are no setting: set by resolve


def _setting(name: str) -> Any:
    """The dataclass field of the setting ``name``: its default from the table, a secret kept out of the repr."""
    row = SETTINGS[name]
    return field(default=row.default, repr=not row.secret, metadata={"setting": name})


@dataclass(frozen=True)
class ModelConfig:
    """Which model answers and how it is asked; the ``model`` rows of ``SETTINGS`` (``api_key`` is never
    logged, exported, passed to the kernel or shown in a repr)."""

    name: str | None = _setting("model")
    base_url: str | None = _setting("base_url")
    api_key: str | None = _setting("api_key")
    request_timeout: float | None = _setting("request_timeout")
    temperature: float | None = _setting("temperature")
    top_p: float | None = _setting("top_p")
    stream: bool = _setting("stream")


@dataclass(frozen=True)
class ProtocolConfig:
    """How the conversation with the model goes; the ``protocol`` rows of ``SETTINGS``. ``reason`` is no
    setting: which rule chose ``name`` (``asked for``, ``the default``, the model's name), said in
    ``run_started`` and the CLI's header."""

    name: ProtocolName | str = _setting("protocol")  # ours, or a name registered in kernel_agent.protocols
    max_rounds: int = _setting("max_rounds")
    vision: bool = _setting("vision")
    data_format: DataFormat = _setting("data_format")
    vllm_extras: bool = _setting("vllm_extras")
    max_new_tokens: int = _setting("max_new_tokens")
    stuck_after: int = _setting("stuck_after")
    feedback_chars: int = _setting("feedback_chars")
    full_feedback_rounds: int = _setting("full_feedback_rounds")
    old_feedback_chars: int = _setting("old_feedback_chars")
    reason: str = "the default"


@dataclass(frozen=True)
class KernelConfig:
    """Where the code runs and how it is confined; the ``kernel`` rows of ``SETTINGS`` (``gateway_token`` is a
    secret, as ``api_key`` is). ``name`` is the kernelspec (None: ours, Python)."""

    exec_timeout: float | None = _setting("exec_timeout")
    disk_quota_mb: int = _setting("disk_quota_mb")
    preload: bool = _setting("preload")
    rebuild: bool = _setting("rebuild")
    sandbox: SandboxMode = _setting("sandbox")
    network: bool | None = _setting("network")
    name: str | None = _setting("kernel")
    python: str | None = _setting("python")
    template: bool = _setting("template")
    provider: str | None = _setting("provider")
    gateway_url: str | None = _setting("gateway_url")
    gateway_token: str | None = _setting("gateway_token")
    gateway_kernel: str | None = _setting("gateway_kernel")
    memory_mb: int | None = _setting("memory_mb")

    def validate(self) -> None:
        """Raise ``ConfigError`` for settings that do not go together, a bad gateway URL or bad limits."""
        self.gateway()
        if self.python and self.gateway_url:
            raise ConfigError("python picks a local environment; a gateway kernel runs the gateway's: give one")
        if self.gateway_url and self.provider in ("local", "attached"):
            raise ConfigError(f"the {self.provider} provider runs no kernel on a gateway: drop the gateway URL")
        self.limits()

    def provider_name(self) -> str:
        """The kernel provider these kernels come from: ``provider``, else ``gateway`` with a gateway URL,
        else ``local`` (``providers.registry.provider_for``)."""
        return provider_for(self.provider, self.gateway_url)

    def gateway(self) -> GatewaySettings | None:
        """Where remote kernels run (None: on this machine). Raises ``ConfigError`` for a bad URL."""
        if not self.gateway_url:
            return None
        return GatewaySettings(self.gateway_url, self.gateway_token, kernel_name=self.gateway_kernel or self.name)

    def ahead(self, **options: Any) -> KernelsAhead | None:
        """What these kernels are before one starts (``KernelsAhead``), with ``options`` (more
        ``AsyncKernelSession`` arguments) over the settings: None on a gateway, another provider's, or for
        another kernelspec."""
        if self.provider_name() != "local":
            return None
        return kernels_ahead_of({"kernel_name": self.name, "python": self.python, **options})

    def session_options(self) -> dict[str, Any]:
        """``AsyncKernelSession`` keyword arguments (besides its folder) for these kernels: on the gateway, or
        with ``limits()`` (local, or the named provider's). Raises ``ConfigError`` as ``gateway``/``limits`` do."""
        named: dict[str, Any] = {"provider": self.provider} if self.provider else {}
        gateway = self.gateway()
        if gateway:
            return {"rebuild": self.rebuild, "gateway": gateway, **named}
        chosen: dict[str, Any] = {"python": self.python} if self.python else {}
        if self.name:
            chosen["kernel_name"] = self.name
        if not self.template:  # a session forks from the template unless told not to
            chosen["template"] = False
        return {"rebuild": self.rebuild, "limits": self.limits(), **chosen, **named}

    def limits(self) -> Limits:
        """The kernel's confinement from ``sandbox``, ``network``, ``memory_mb`` (None: the default)
        and ``disk_quota_mb`` (which caps each file, ``max_file_mb``)."""
        chosen: dict[str, int] = {} if self.memory_mb is None else {"memory_mb": self.memory_mb}
        if self.disk_quota_mb:  # one file may not take more than the whole quota
            chosen["max_file_mb"] = min(self.disk_quota_mb, Limits().max_file_mb or self.disk_quota_mb)
        return Limits(network=self.network, sandbox=self.sandbox, **chosen)


@dataclass(frozen=True)
class AgentConfig:
    """How an agent runs: ``model``, ``protocol`` and ``kernel`` settings (see the module)."""

    model: ModelConfig = field(default_factory=ModelConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    kernel: KernelConfig = field(default_factory=KernelConfig)

    @classmethod
    def resolve(cls, environ: Mapping[str, str] | None = None, **explicit: Any) -> AgentConfig:
        """Build a config from explicit values by their keywords (None means unset), then the environment
        (``environ``, default ``os.environ``), then the defaults. Raises ``ConfigError`` for unknown or
        invalid settings."""
        unknown = sorted(set(explicit) - set(SETTINGS) - set(_DERIVED))
        if unknown:
            raise ConfigError(f"unknown agent option(s): {', '.join(unknown)}")
        env = os.environ if environ is None else environ
        values = {name: value for name, value in explicit.items() if value is not None}
        for row in SETTINGS.values():
            if row.name not in values and row.env and env.get(row.env):
                values[row.name] = row.parse(env[row.env], row.env)
        if "protocol" in values:
            values.setdefault("protocol_reason", "asked for")
        else:
            values["protocol"], values["protocol_reason"] = protocol_for_model(values.get("model"))
        config = cls.from_keywords(values)
        config.validate()
        return config

    @classmethod
    def from_keywords(cls, values: Mapping[str, Any]) -> AgentConfig:
        """A config from settings by their keywords, the others at their defaults (nothing is checked)."""
        parts: dict[str, dict[str, Any]] = {"model": {}, "protocol": {}, "kernel": {}}
        for name, value in values.items():
            part, attribute = _DERIVED[name] if name in _DERIVED else (SETTINGS[name].part, SETTINGS[name].field)
            parts[part][attribute] = value
        return cls(ModelConfig(**parts["model"]), ProtocolConfig(**parts["protocol"]), KernelConfig(**parts["kernel"]))

    def keywords(self) -> dict[str, Any]:
        """Every setting by its keyword: what ``from_keywords`` takes back."""
        return {row.name: getattr(getattr(self, row.part), row.field) for row in SETTINGS.values()}

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the first invalid setting."""
        for row in SETTINGS.values():
            row.check(getattr(getattr(self, row.part), row.field))
        self.kernel.validate()


def settings_in(values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings among ``values`` (a signature's ``locals()``, which has every row's keyword) by keyword."""
    return {name: values[name] for name in SETTINGS}


def setting_fields() -> dict[str, str]:
    """Each ``AgentConfig`` part's setting fields by keyword: ``{"max_rounds": "protocol.max_rounds", ...}``,
    read from the dataclasses themselves (``tests/test_settings.py`` holds them equal to the table)."""
    defaults = AgentConfig()
    found: dict[str, str] = {}
    for part in fields(defaults):
        for f in fields(getattr(defaults, part.name)):
            if "setting" in f.metadata:
                found[f.metadata["setting"]] = f"{part.name}.{f.name}"
    return found
