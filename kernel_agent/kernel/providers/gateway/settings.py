"""Where a gateway is: ``GatewaySettings`` and its one precedence rule.

Explicit argument > environment variable (``KERNEL_AGENT_GATEWAY_URL``,
``KERNEL_AGENT_GATEWAY_TOKEN``) > no gateway. The token is a secret: it is
kept out of reprs, never sent to a kernel, and travels only in the
``Authorization`` header (never in a URL, which ends up in logs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from ....errors import ConfigError

__all__ = ["GATEWAY_TOKEN_ENV", "GATEWAY_URL_ENV", "GatewaySettings"]

GATEWAY_URL_ENV = "KERNEL_AGENT_GATEWAY_URL"
GATEWAY_TOKEN_ENV = "KERNEL_AGENT_GATEWAY_TOKEN"


@dataclass(frozen=True)
class GatewaySettings:
    """A gateway: its base URL (``http(s)://host:port[/base]``), token and the kernelspec to start.

    ``kernel_name`` None starts the gateway's default kernel. ``request_timeout``
    bounds each REST call; ``startup_timeout`` the wait for a new kernel.
    Raises ``ConfigError`` for a URL that is not http(s).
    """

    url: str
    token: str | None = field(default=None, repr=False)
    kernel_name: str | None = None
    request_timeout: float = 30.0
    startup_timeout: float = 60.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"the gateway URL must look like http://host:port, not {self.url!r}")
        object.__setattr__(self, "url", urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", "")))

    @classmethod
    def resolve(
        cls,
        url: str | None = None,
        token: str | None = None,
        environ: Mapping[str, str] | None = None,
        **options: object,
    ) -> GatewaySettings | None:
        """Settings from explicit values, then the environment; None when no gateway is named."""
        env = os.environ if environ is None else environ
        url = url or env.get(GATEWAY_URL_ENV) or None
        if url is None:
            return None
        token = token or env.get(GATEWAY_TOKEN_ENV) or None
        return cls(url, token, **options)  # type: ignore[arg-type]  # the caller's GatewaySettings fields

    @property
    def websocket_url(self) -> str:
        """The base URL with ``ws``/``wss`` for the channels."""
        return "ws" + self.url[4:] if self.url.startswith("http") else self.url

    def headers(self) -> dict[str, str]:
        """The request headers that carry the token (none without one)."""
        return {"Authorization": f"token {self.token}"} if self.token else {}
