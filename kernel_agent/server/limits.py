"""A request body limit enforced before anything reads the body: ``BodyLimit``, a pure ASGI middleware.

FastAPI parses a multipart upload (spooling it to disk) before the route runs,
so a limit checked in the route comes after the whole body has been received.
This middleware refuses a body whose ``Content-Length`` is over the limit with
413 before reading a byte of it, and cuts off a body sent without a length
(chunked) as soon as it passes the limit: the app then sees a disconnect and
the client gets the 413.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._connections import answer_json
from .errors import error_body

__all__ = ["BodyLimit", "MULTIPART_SLACK"]

MULTIPART_SLACK = 1 << 20  # room for the multipart boundaries and the other form fields around a file


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413 (OpenAI's error body naming the limit)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(send)
            return
        received = 0
        refused = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    if not started:
                        await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused:
                return  # we answered 413 already; what the app says after the cut-off is dropped
            started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except ClientDisconnect:
            if not refused:
                raise

    async def _refuse(self, send: Send) -> None:
        message = f"the request body is larger than the {self.limit}-byte limit"
        await answer_json(send, 413, error_body(413, message), [(b"connection", b"close")])


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
