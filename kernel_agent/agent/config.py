"""Agent settings: ``AgentConfig`` and its one precedence rule.

Explicit argument > environment variable > default. The environment
variables are ``KERNEL_AGENT_MODEL``, ``OPENAI_BASE_URL``,
``OPENAI_API_KEY``, ``KERNEL_AGENT_DATA_FORMAT``, ``KERNEL_AGENT_VLLM_EXTRAS``
(``0``/``1``), ``KERNEL_AGENT_REQUEST_TIMEOUT`` (seconds) and
``KERNEL_AGENT_SANDBOX`` (``strict``/``off``). Invalid values
raise ``ConfigError`` here, before any kernel starts or any model is called.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError
from ..kernel.providers.gateway.settings import GatewaySettings
from ..kernel.sandbox.bwrap import SandboxMode
from ..kernel.sandbox.limits import Limits
from .names import DATA_FORMATS, PROTOCOLS, DataFormat, ProtocolName, protocol_for_model, protocol_names

__all__ = ["PROTOCOLS", "AgentConfig", "ProtocolName"]


_ENV = {
    "model": "KERNEL_AGENT_MODEL",
    "base_url": "OPENAI_BASE_URL",
    "api_key": "OPENAI_API_KEY",
    "data_format": "KERNEL_AGENT_DATA_FORMAT",
    "vllm_extras": "KERNEL_AGENT_VLLM_EXTRAS",
    "request_timeout": "KERNEL_AGENT_REQUEST_TIMEOUT",
    "sandbox": "KERNEL_AGENT_SANDBOX",
    "gateway_url": "KERNEL_AGENT_GATEWAY_URL",
    "gateway_token": "KERNEL_AGENT_GATEWAY_TOKEN",
    "gateway_kernel": "KERNEL_AGENT_GATEWAY_KERNEL",
    "python": "KERNEL_AGENT_PYTHON",
    "kernel": "KERNEL_AGENT_KERNEL",
}
_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}

NO_MODEL_HELP = (
    "no model configured: pass --model (or model=...), or set KERNEL_AGENT_MODEL; "
    "point OPENAI_BASE_URL at any OpenAI-compatible server (vLLM, Ollama, OpenAI) "
    "and set OPENAI_API_KEY if it needs one"
)


@dataclass(frozen=True)
class AgentConfig:
    """How an agent runs.

    model, base_url, api_key: the OpenAI-compatible endpoint (``api_key`` is
        never logged, exported or passed to the kernel).
    protocol: ``tools`` (function calling), ``tags`` (tag protocol for any chat
        model) or ``deepanalyze`` (DeepAnalyze-8B's native form); when not given,
        ``deepanalyze`` for a DeepAnalyze model's name, else ``tools``
        (``protocol_reason`` says which rule chose it).
    protocol_reason: which rule chose ``protocol`` (``asked for``, ``the default``, the model's name),
        said in ``run_started`` and the CLI's header.
    max_rounds: model replies before the run stops with ``max_rounds``.
    exec_timeout: seconds per execution (None: no limit).
    temperature: sampling temperature (None: the server's default).
    vision: send figures back to the model as images (``tools`` protocol).
    stuck_after: the same failing code or the same reply this many times in a
        row stops the run with ``stuck``.
    preload: run the setup cell (pd, np, plt, ``data``) before round 1.
    rebuild: after the kernel loses state, re-run the successful cells.
    feedback_chars: bound on the execution text the model gets per round.
    full_feedback_rounds: the latest this-many execution results stay in the
        conversation in full; older ones are clipped to ``old_feedback_chars``
        (and lose their images), so long runs fit the model's context.
    old_feedback_chars: what an older execution result is clipped to, in characters.
    stream: stream replies (text deltas reach the front ends live).
    data_format: how the ``deepanalyze`` protocol lists the data files:
        ``files`` (DeepAnalyze's own ``File N:`` name/size blocks, the shape
        it was trained and served with) or ``rich`` (the same blocks with our
        summary under each: columns, dtypes, separator, encoding, dates).
    vllm_extras: send vLLM's ``add_generation_prompt``, ``stop_token_ids``
        and ``max_new_tokens`` with the ``deepanalyze`` protocol, as
        DeepAnalyze's server does; turn off for servers that reject them.
    max_new_tokens: the ``max_new_tokens`` extra (DeepAnalyze's 32768).
    request_timeout: seconds to wait for the model's reply to start, and
        between two streamed pieces of it (None: the model's default, 600).
    sandbox: ``strict`` runs the kernel in bubblewrap (``SandboxUnavailableError``
        where that is impossible); ``off`` runs it unconfined, on purpose.
    network: None (default): off in the sandbox, so model code reaches no network, this
        machine's services included; True: in the sandbox, a network of its own behind pasta (the outside
        world, never this machine's services; unconfined, the host's network); False: off (needs the sandbox).
    memory_mb: the kernel's memory limit per process (None: the default).
    disk_quota_mb: how much the workspace may grow during the run (checked
        after every round, which then ends the run with ``disk_quota``); it also
        caps each file the code writes (``RLIMIT_FSIZE``). 0 switches both off.
        See ``quota.py`` for what it does and does not bound.
    gateway_url: run kernels on this Jupyter Kernel/Enterprise Gateway
        (``http://host:port``) instead of this machine; the gateway's own
        isolation applies there (our sandbox settings do not).
    gateway_token: the gateway's token (a secret: never logged, exported,
        sent to a kernel or shown in a repr).
    gateway_kernel: the gateway's kernelspec to start (None: its default).
    python: another Python environment's interpreter for local kernels (it needs ipykernel);
        its prefix is shown read-only in the same sandbox (None: the agent's own).
    kernel: the Jupyter kernelspec to run (any installed one, e.g. ``ir`` for R; None: ours, Python);
        with a gateway, the gateway's kernelspec unless ``gateway_kernel`` names one.
    """

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    protocol: ProtocolName | str = "tools"  # ours, or a name registered in kernel_agent.protocols
    protocol_reason: str = "the default"
    max_rounds: int = 30
    exec_timeout: float | None = 120.0
    temperature: float | None = None
    vision: bool = False
    stuck_after: int = 3
    preload: bool = True
    rebuild: bool = True
    feedback_chars: int = 6000
    full_feedback_rounds: int = 8
    old_feedback_chars: int = 800
    stream: bool = True
    data_format: DataFormat = "files"
    vllm_extras: bool = True
    max_new_tokens: int = 32768
    request_timeout: float | None = None
    sandbox: SandboxMode = "strict"
    network: bool | None = None
    memory_mb: int | None = None
    disk_quota_mb: int = 1024
    gateway_url: str | None = None
    gateway_token: str | None = field(default=None, repr=False)
    gateway_kernel: str | None = None
    python: str | None = None
    kernel: str | None = None

    @classmethod
    def resolve(cls, environ: Mapping[str, str] | None = None, **explicit: Any) -> AgentConfig:
        """Build a config from explicit values (None means unset), then the environment.

        Raises ``ConfigError`` for unknown or invalid settings.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(explicit) - known)
        if unknown:
            raise ConfigError(f"unknown agent option(s): {', '.join(unknown)}")
        env = os.environ if environ is None else environ
        values = {name: value for name, value in explicit.items() if value is not None}
        for name, variable in _ENV.items():
            if name not in values and env.get(variable):
                values[name] = _from_env(name, variable, env[variable])
        if "protocol" in values:
            values.setdefault("protocol_reason", "asked for")
        else:
            values["protocol"], values["protocol_reason"] = protocol_for_model(values.get("model"))
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        """Raise ``ConfigError`` naming the first invalid setting."""
        if self.protocol not in protocol_names():
            raise ConfigError(f"unknown protocol {self.protocol!r}; choose one of {', '.join(protocol_names())}")
        if self.max_rounds < 1:
            raise ConfigError(f"max_rounds must be at least 1, not {self.max_rounds}")
        if self.exec_timeout is not None and self.exec_timeout <= 0:
            raise ConfigError(f"exec_timeout must be positive, not {self.exec_timeout}")
        if self.full_feedback_rounds < 1 or self.old_feedback_chars < 100:
            raise ConfigError("full_feedback_rounds must be at least 1 and old_feedback_chars at least 100")
        if self.stuck_after < 2:
            raise ConfigError(f"stuck_after must be at least 2, not {self.stuck_after}")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ConfigError(f"temperature must be between 0 and 2, not {self.temperature}")
        if self.data_format not in DATA_FORMATS:
            raise ConfigError(f"unknown data format {self.data_format!r}; choose one of {', '.join(DATA_FORMATS)}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be at least 1, not {self.max_new_tokens}")
        if self.disk_quota_mb < 0:
            raise ConfigError(f"disk_quota_mb must be 0 (off) or more, not {self.disk_quota_mb}")
        if self.request_timeout is not None and self.request_timeout <= 0:
            raise ConfigError(f"request_timeout must be positive, not {self.request_timeout}")
        self.gateway()  # raises ConfigError for a malformed gateway URL
        if self.python and self.gateway_url:
            raise ConfigError("python picks a local environment; a gateway kernel runs the gateway's: give one")
        self.limits()  # raises ConfigError for a bad sandbox mode, memory or no network without the sandbox

    def gateway(self) -> GatewaySettings | None:
        """Where remote kernels run (None: on this machine). Raises ``ConfigError`` for a bad URL."""
        if not self.gateway_url:
            return None
        return GatewaySettings(self.gateway_url, self.gateway_token, kernel_name=self.gateway_kernel or self.kernel)

    def kernel_options(self) -> dict[str, Any]:
        """``AsyncKernelSession`` keyword arguments (besides its folder) for this config's kernels:
        on the gateway, or local with ``limits()``. Raises ``ConfigError`` as ``gateway``/``limits`` do."""
        gateway = self.gateway()
        if gateway:
            return {"rebuild": self.rebuild, "gateway": gateway}
        chosen = {"python": self.python} if self.python else {}
        if self.kernel:
            chosen["kernel_name"] = self.kernel
        return {"rebuild": self.rebuild, "limits": self.limits(), **chosen}

    def limits(self) -> Limits:
        """The kernel's confinement from ``sandbox``, ``network``, ``memory_mb`` (None: the default)
        and ``disk_quota_mb`` (which caps each file, ``max_file_mb``)."""
        chosen: dict[str, int] = {} if self.memory_mb is None else {"memory_mb": self.memory_mb}
        if self.disk_quota_mb:  # one file may not take more than the whole quota
            chosen["max_file_mb"] = min(self.disk_quota_mb, Limits().max_file_mb or self.disk_quota_mb)
        return Limits(network=self.network, sandbox=self.sandbox, **chosen)


def _from_env(name: str, variable: str, raw: str) -> Any:
    """An environment value as the field's type; ``ConfigError`` naming the variable when it is not one."""
    if name == "vllm_extras":
        if raw.strip().lower() not in _BOOLEANS:
            raise ConfigError(f"{variable} must be 0 or 1 (or true/false), not {raw!r}")
        return _BOOLEANS[raw.strip().lower()]
    if name == "request_timeout":
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"{variable} must be a number of seconds, not {raw!r}") from None
    return raw
