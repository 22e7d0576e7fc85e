"""The names the service answers for: ``HostGuard``, a pure ASGI middleware, and ``served_hosts``.

A page on another site can make a browser send requests to this server under its own name (DNS
rebinding: ``attacker.example`` resolves to 127.0.0.1), or post to it from its own origin. So every
request's ``Host`` must name this server (the loopback names, the address it listens on, and what
``--allowed-host`` adds), else 421 Misdirected Request; and an ``Origin``, which browsers send on
cross-site and on non-GET requests, must be ``http(s)://`` one of those names, else 403. Both hold
with keys, with ``--no-auth`` and ``--demo``. The MCP server over HTTP does the same (its SDK's
``TransportSecuritySettings``: 421 and 403); its defaults allow ``http://localhost:*``, any port, so
``mcp/server.py`` gives it the listening port's origins only. ``/health`` and ``/ready`` answer any
``Host`` (a load balancer's probe names the address it dials, and they say nothing about anyone).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from .._connections import answer_json
from .._net import is_loopback
from .errors import error_body

__all__ = ["HostGuard", "served_hosts"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_PROBES = ("/health", "/ready")


def served_hosts(listen: str, allowed: Iterable[str] = ()) -> tuple[str, ...]:
    """The names a server listening on ``listen`` answers for: the loopback names, ``listen`` itself when it is
    a specific address (``[addr]`` for IPv6), and ``allowed`` (``name`` or ``name:port``; ``*``: any).
    Raises nothing."""
    names = [*LOOPBACK_NAMES]
    if listen not in ("", "0.0.0.0", "::") and not is_loopback(listen):
        names.append(f"[{listen}]" if ":" in listen and not listen.startswith("[") else listen)
    names.extend(name.strip().lower() for name in allowed if name.strip())
    return tuple(dict.fromkeys(name.lower() for name in names))


class HostGuard:
    """Answer only requests whose ``Host`` (and ``Origin``, when sent) name one of ``hosts`` (``served_hosts``)."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or "*" in self.hosts or scope.get("path") in _PROBES:
            await self.app(scope, receive, send)
            return
        headers = {name: value.decode("latin-1") for name, value in scope.get("headers", [])}
        host = headers.get(b"host", "")
        if not self._ours(host):
            await answer_json(
                send, 421, error_body(421, f"this server does not answer for the host {host[:100]!r}; {self._hint()}")
            )
            return
        origin = headers.get(b"origin")
        if origin is not None and not self._our_origin(origin, host, scope.get("scheme", "http")):
            await answer_json(
                send, 403, error_body(403, f"requests from the origin {origin[:100]!r} are refused; {self._hint()}")
            )
            return
        await self.app(scope, receive, send)

    def _ours(self, host: str) -> bool:
        host = host.strip().lower()
        if not host:
            return False
        if host in self.hosts:
            return True
        name, _, port = host.rpartition(":")
        return port.isdigit() and name in self.hosts

    def _our_origin(self, origin: str, host: str, scheme: str) -> bool:
        """Whether ``origin`` is the page's own (scheme, host and port of the ``Host`` the request came by,
        ``scheme`` its own) or a name ``--allowed-host`` gave: ``NAME:PORT`` that port, a plain ``NAME`` its
        scheme's default port (80, 443; never a loopback name or an address, whose other ports are other
        servers). Another port on the same host is another origin: a page there is refused."""
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        if parts.scheme not in _DEFAULT_PORTS or parts.path.strip("/") or parts.hostname is None:
            return False
        name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        port = port or _DEFAULT_PORTS[parts.scheme]
        own_name, own_port = _name_and_port(host)
        if (parts.scheme, name, port) == (scheme, own_name, own_port or _DEFAULT_PORTS.get(scheme)):
            return True
        return f"{name}:{port}" in self.hosts or (
            name in self.hosts
            and port == _DEFAULT_PORTS[parts.scheme]
            and name not in LOOPBACK_NAMES
            and not _is_address(name)
        )

    def _hint(self) -> str:
        return f"it answers for {', '.join(sorted(self.hosts))} (serve --allowed-host NAME adds one)"


def _name_and_port(host: str) -> tuple[str, int | None]:
    """``Host``'s name (lower case, an IPv6 address in brackets) and port (None when it names none)."""
    host = host.strip().lower()
    name, _, port = host.rpartition(":")
    return (name, int(port)) if port.isdigit() and name and not name.endswith(":") else (host, None)


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True
