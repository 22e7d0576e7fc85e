"""Where a kernel lives, by name: the ``kernel_agent.providers`` entry points and ``ProviderSettings``.

An entry point is ``make(settings: ProviderSettings) -> KernelProvider``: given what a session knows of
the kernel it wants, it returns a provider, not yet started (``base.KernelProvider``), or raises
``ConfigError`` (``ExtraMissingError`` for a missing extra). Ours are registered by our pyproject as a
third party's is by theirs (e.g. a kernel in a container)::

    [project.entry-points."kernel_agent.providers"]
    local = "kernel_agent.kernel.providers.local:local_provider"           # a process we start here
    gateway = "kernel_agent.kernel.providers.gateway:gateway_provider"     # on a Kernel/Enterprise Gateway
    attached = "kernel_agent.kernel.providers.attached:attached_provider"  # a running kernel's connection file

``AsyncKernelSession(provider="theirs")`` asks for one by name (default: ``gateway`` when a gateway is
given, else ``local``). A ``KernelPool`` is not a place a kernel lives but kernels started ahead: it
pools any provider (``KernelPool(provider="theirs")``), so it is not registered here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ...errors import ConfigError
from ...plugins import Registry
from .base import KernelProvider, supports_sockets

if TYPE_CHECKING:
    from ..sandbox.limits import Limits
    from .gateway.settings import GatewaySettings

__all__ = [
    "PROVIDERS",
    "PROVIDER_GROUP",
    "PROVIDER_REGISTRY",
    "ProviderFactory",
    "ProviderSettings",
    "make_provider",
    "provider_for",
    "provider_names",
]

PROVIDER_GROUP = "kernel_agent.providers"
PROVIDERS = ("local", "gateway", "attached")  # ours
PROVIDER_REGISTRY: Registry[KernelProvider] = Registry(PROVIDER_GROUP, "kernel provider", KernelProvider, PROVIDERS)


@dataclass(frozen=True)
class ProviderSettings:
    """What a session asks of its kernel; each provider reads what applies to it (as ``AsyncKernelSession``
    documents them). ``workspace`` is the run's folder on this machine (None: a private one);
    ``kernel_name`` None is the provider's default; ``gateway`` a URL or ``GatewaySettings``, with
    ``gateway_token`` its secret (never in the repr); ``kernel_id`` a running gateway kernel to attach
    to (owned when ``adopt``); ``connection_file`` a running local kernel's (``attached``); ``sockets``:
    variable name → a host Unix socket the kernel may connect to (a live data source's broker): the provider
    makes it reachable (bound into the sandbox) and sets the variable to where the kernel finds it, or raises
    ``ConfigError`` when it cannot (a kernel elsewhere, another's kernel); ``template``: a local kernel may be
    forked from a warmed template (False: always started cold)."""

    workspace: Path | None = None
    kernel_name: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    allow_env: tuple[str, ...] = ()
    startup_timeout: float = 60.0
    max_images: int = 50  # outputs.OutputCaps' defaults (not imported here: nbformat is slow to import)
    max_output_bytes: int = 10_000_000
    limits: Limits | None = None
    python: str | None = None
    gateway: str | GatewaySettings | None = None
    gateway_token: str | None = field(default=None, repr=False)
    kernel_id: str | None = None
    adopt: bool = False
    connection_file: str | None = None
    sockets: Mapping[str, Path] = field(default_factory=dict)
    template: bool = True


class ProviderFactory(Protocol):
    """A ``kernel_agent.providers`` entry point."""

    def __call__(self, settings: ProviderSettings, /) -> KernelProvider: ...


def provider_names() -> tuple[str, ...]:
    """Every installed kernel provider's name: ours first."""
    return PROVIDER_REGISTRY.names()


def provider_for(name: str | None, gateway: object) -> str:
    """The provider a session's kernel comes from: ``name`` when given, else ``gateway`` when a gateway is
    (``gateway`` not None), else ``local``."""
    return name or ("gateway" if gateway is not None else "local")


def make_provider(name: str, settings: ProviderSettings) -> KernelProvider:
    """The provider registered as ``name``, made with ``settings`` (not started). Raises ``ConfigError`` for
    an unknown name (listing the choices), a provider that cannot be loaded or made, one that makes
    something else than a ``KernelProvider``, or one given ``sockets`` that does not declare it binds them
    (``base.supports_sockets``); ``ExtraMissingError`` when its extra is not installed."""
    provider = PROVIDER_REGISTRY.make(name, settings)
    if settings.sockets and not supports_sockets(provider):
        raise ConfigError(
            f"the kernel provider {name!r} cannot give its kernel a socket of this machine (it does not declare "
            "supports_sockets), and a live data source (a database --data URI) is queried through one: "
            "use the local provider (--provider local)"
        )
    return provider
