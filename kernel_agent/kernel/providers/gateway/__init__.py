"""Kernels on a Jupyter Kernel Gateway or Enterprise Gateway (the Jupyter Server REST + websocket API).

``settings.py`` holds where the gateway is and its token (a secret);
``rest.py`` the REST calls (start, interrupt, restart, delete a kernel);
``channels.py`` the websocket that carries the kernel's messages;
``provider.py`` puts them together as a ``KernelProvider``;
``nodelay.py`` is for the gateway's operator (a websocket connection class
that sets TCP_NODELAY on the server's side). Nothing here imports the layers
above the kernel layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....errors import ConfigError, ExtraMissingError
from .settings import GatewaySettings

if TYPE_CHECKING:
    from ..registry import ProviderSettings
    from .provider import GatewayProvider

__all__ = ["gateway_provider"]


def gateway_provider(settings: ProviderSettings) -> GatewayProvider:
    """The ``gateway`` entry point of ``kernel_agent.providers``: a kernel on the gateway the settings name
    (``kernel_id``: a running one, owned when ``adopt``). Raises ``ConfigError`` without a gateway or for a
    malformed URL, ``ExtraMissingError`` without the ``gateway`` extra (websockets)."""
    if settings.sockets:
        raise ConfigError(
            "a live data source (a database --data URI) cannot be used with a kernel on a gateway yet: "
            "its queries go through a socket on this machine; use the local provider"
        )
    if settings.gateway is None:
        raise ConfigError("the gateway kernel provider needs a gateway URL (--gateway or KERNEL_AGENT_GATEWAY_URL)")
    try:
        from .provider import GatewayProvider
    except ModuleNotFoundError as exc:
        missing = ExtraMissingError.of(exc, "gateway")
        if missing is None:
            raise
        raise missing from None

    gateway = (
        settings.gateway
        if isinstance(settings.gateway, GatewaySettings)
        else GatewaySettings(
            settings.gateway,
            settings.gateway_token,
            kernel_name=settings.kernel_name,
            startup_timeout=settings.startup_timeout,
        )
    )
    return GatewayProvider(
        gateway,
        kernel_id=settings.kernel_id,
        env=dict(settings.env),
        adopt=settings.adopt,
        max_output_bytes=settings.max_output_bytes,
    )
