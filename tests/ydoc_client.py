"""A client of a JupyterLab's shared documents (jupyter-collaboration), as a browser tab is one.

``shared_document`` asks the server for the document's session (``PUT /api/collaboration/session``),
joins its room over a websocket with pycrdt's ``Provider`` and yields jupyter-ydoc's ``YNotebook`` or
jupyterlab-chat's ``YChat`` on the synced document: what the client writes reaches the server's
document, and what the server writes (our persona) arrives here.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import websockets
from jupyter_ydoc import YNotebook
from pycrdt import Array, Doc, Map, Provider

_FORMATS = {"notebook": "json", "chat": "text"}


class _Channel:
    """pycrdt's ``Channel`` over a websockets connection."""

    def __init__(self, connection: Any, path: str) -> None:
        self._connection = connection
        self._path = path

    @property
    def path(self) -> str:
        return self._path

    def __aiter__(self) -> _Channel:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.recv()
        except websockets.ConnectionClosed:
            raise StopAsyncIteration from None

    async def send(self, message: bytes) -> None:
        await self._connection.send(message)

    async def recv(self) -> bytes:
        message = await self._connection.recv()
        return message if isinstance(message, bytes) else message.encode()


@asynccontextmanager
async def shared_document(port: int, token: str, path: str, kind: str) -> AsyncIterator[Any]:
    """The synced shared document of ``path``: a ``YNotebook`` (``kind="notebook"``), or for ``kind="chat"`` a
    ``ChatClient`` (not jupyterlab-chat's ``YChat``: it marks the document dirty, which a browser never does,
    and the server then ignores new messages)."""
    file_format = _FORMATS[kind]
    headers = {"Authorization": f"token {token}"}
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as http:
        response = await http.put(f"/api/collaboration/session/{path}", json={"format": file_format, "type": kind})
        response.raise_for_status()
        session = response.json()
    room = f"{file_format}:{kind}:{session['fileId']}"
    url = f"ws://127.0.0.1:{port}/api/collaboration/room/{room}?sessionId={session['sessionId']}"
    async with websockets.connect(url, additional_headers=headers, max_size=None) as connection:
        doc: Doc[Any] = Doc()
        async with Provider(doc, _Channel(connection, room)) as provider:
            await asyncio.wait_for(provider.synced.wait(), 30)
            yield YNotebook(ydoc=doc) if kind == "notebook" else ChatClient(doc)


async def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Wait until ``check()`` is truthy (a document changes when the server's updates arrive); return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)  # polling a document that another process updates


class ChatClient:
    """A chat document as the chat panel edits it: users, messages, the chat's id."""

    def __init__(self, doc: Doc[Any]) -> None:
        self.doc = doc
        self.messages = doc.get("messages", type=Array)
        self.users = doc.get("users", type=Map)
        self.metadata = doc.get("metadata", type=Map)
        self.state = doc.get("state", type=Map)

    def ready_for(self, username: str) -> bool:
        """``username`` has joined and the document is saved: the server routes no message that arrives
        while its chat is dirty (jupyterlab-chat's ``YChat`` takes those for messages being loaded)."""
        return username in (self.users.to_py() or {}) and self.state.get("dirty") is False

    def get_id(self) -> str:
        return str(self.metadata.get("id"))

    def send(self, sender: str, body: str, metadata: dict[str, Any], attachments: tuple[str, ...] = ()) -> None:
        """A new message from ``sender`` (registered as a user first), as the chat input adds it, with
        ``attachments``: file paths as the attach button gives them (relative to the server's root)."""
        ids = [f"attachment-{len(self.messages)}-{k}" for k in range(len(attachments))]
        with self.doc.transaction():
            self.users.update({sender: {"username": sender, "name": sender, "display_name": sender}})
            attachments_map = self.doc.get("attachments", type=Map)
            attachments_map.update({i: {"type": "file", "value": v} for i, v in zip(ids, attachments, strict=True)})
            message = {
                "type": "msg",
                "body": body,
                "id": f"{sender}-{len(self.messages)}",
                "time": time.time(),
                "sender": sender,
                "raw_time": True,
                "mentions": [],
                "metadata": metadata,
            }
            self.messages.append(Map({**message, **({"attachments": ids} if ids else {})}))

    def all(self) -> list[dict[str, Any]]:
        return self.messages.to_py() or []


def notebook_cells(notebook: YNotebook) -> list[dict[str, Any]]:
    cells: list[dict[str, Any]] = json.loads(json.dumps(notebook.get()["cells"]))
    return cells
