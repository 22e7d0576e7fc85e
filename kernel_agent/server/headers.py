"""Every response says how it may be shown: ``ShownAs``, a pure ASGI middleware.

The header values are ``safe.http``'s; this only decides which response gets which. The web page
(``/`` and its own scripts and styles) gets the page's CSP; everything else (the API's JSON, the
run's report, notebooks, generated files, uploads) is a document made of run content: a CSP that
forbids scripts and external loads, in a sandbox of its own origin. Every response is ``nosniff``.
A route that set its own CSP keeps it; ``Content-Disposition`` is the routes' (``safe.http``).
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..safe.http import PAGE_CSP, document_headers

__all__ = ["ShownAs"]

_API_PREFIXES = ("/v1/", "/api/", "/health", "/ready", "/metrics", "/openapi.json")
_FRAMEWORK_PAGES = ("/docs", "/redoc")  # FastAPI's own API pages: its scripts, none of the run's content


def is_page(path: str) -> bool:
    """Whether ``path`` is the web page or one of its own files (served from ``static/``)."""
    return not path.startswith(_API_PREFIXES + _FRAMEWORK_PAGES)


class ShownAs:
    """Add the CSP for the page or for a document, and ``nosniff``, to every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        wanted = document_headers()
        if path.startswith(_FRAMEWORK_PAGES):
            del wanted["Content-Security-Policy"]
        elif is_page(path):
            wanted["Content-Security-Policy"] = PAGE_CSP

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in wanted.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
