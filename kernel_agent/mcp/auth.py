"""The MCP server's HTTP door: ``BearerKey``, a pure ASGI middleware, and ``check_listen``.

Over HTTP anyone who reaches the port gets a live kernel, and model code in a kernel with the network
on could reach its own server. So every HTTP request must carry ``Authorization: Bearer KEY`` (compared
in constant time; a 401 otherwise, before the MCP app sees the request), and the server refuses to
listen on an address other than loopback unless told that TLS and access control stand in front.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .._connections import answer_json
from .._net import is_loopback
from ..errors import ConfigError

__all__ = ["KEY_VARIABLE", "BearerKey", "check_listen"]

KEY_VARIABLE = "KERNEL_AGENT_MCP_KEY"  # where the key comes from when no --key-file is given

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BearerKey:
    """Passes an HTTP request on only with ``Authorization: Bearer <key>``; lifespan events always."""

    def __init__(self, app: ASGIApp, key: str) -> None:
        if not key:
            raise ConfigError("the MCP server over HTTP needs a key")
        self.app = app
        self._key = f"Bearer {key}".encode()

    def __repr__(self) -> str:
        return "<BearerKey>"  # never the key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(scope):
            message = {"error": "a valid key is needed: send Authorization: Bearer KEY"}
            await answer_json(send, 401, message, [(b"www-authenticate", b'Bearer realm="kernel-agent mcp"')])
            return
        await self.app(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        sent = next((value for name, value in scope.get("headers", ()) if name == b"authorization"), b"")
        return hmac.compare_digest(sent, self._key)


def check_listen(host: str, allow_remote: bool) -> None:
    """Raises ``ConfigError`` for an address other than loopback, unless ``allow_remote`` says TLS and
    access control are in front."""
    if not allow_remote and not is_loopback(host):
        raise ConfigError(
            f"refusing to serve live kernels on {host} without TLS in front: listen on 127.0.0.1 "
            "behind a TLS proxy, or pass --allow-remote if one already stands in front"
        )
