"""The DeepAnalyze-compatible surface: ``/v1/models`` and ``/v1/chat/completions``.

Owns the translation between OpenAI's chat-completion shapes (as DeepAnalyze's
API server extends them) and the service's runs: a client written for
DeepAnalyze's API, or the ``openai`` SDK, works against ours by changing only
the base URL. A completion is one run: the latest user message is the task;
files come as top-level ``file_ids`` or a user message's ``file_ids``; the
thread as ``thread_id`` (top level, on the latest user message, or the
``X-Thread-Id`` header) continues in that thread's live kernel. The reply's
content is the tagged transcript (``transcript.TagWriter``); ``thread_id``,
``run_id`` and ``generated_files`` ride along. A client that disconnects
mid-stream does not stop the run: it goes on and stays retrievable.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict

from ..errors import ServiceError
from .deps import Owner, public, service_of
from .records import RunRecord
from .service import Service
from .transcript import TagWriter

__all__ = ["compat_routes"]


class ChatRequest(BaseModel):
    """What DeepAnalyze's ``/v1/chat/completions`` takes; other OpenAI fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[dict[str, Any]]
    temperature: float | None = None
    stream: bool = False
    file_ids: list[str] | None = None
    thread_id: str | None = None
    sources: list[str] | None = None  # ours, not DeepAnalyze's: the server's live sources a new thread queries


def compat_routes(app: FastAPI) -> None:
    """Add the OpenAI-compatible routes to ``app``."""
    config = app.state.config

    @app.get("/v1/models")
    async def models(_who: Owner) -> dict[str, Any]:
        """The model this server answers as, in OpenAI's list shape."""
        name = config.model or "kernel-agent"
        return {
            "object": "list",
            "data": [{"id": name, "object": "model", "created": int(time.time()), "owned_by": "kernel-agent"}],
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(
        request: Request, who: Owner, body: ChatRequest, x_thread_id: Annotated[str | None, Header()] = None
    ) -> Any:
        """DeepAnalyze's OpenAI-compatible chat completions: the last user message is the task, `file_ids` the data,
        `thread_id` (in the message, or `X-Thread-Id`) continues a thread; the reply carries `thread_id` and
        `generated_files`. Streams with `stream: true`."""
        service = service_of(request)
        task, file_ids, thread_id = _request_parts(body, x_thread_id)
        run = await service.start_run(who, task, file_ids, thread_id, sources=body.sources)
        protocol = _protocol(service, run)
        reply = _Reply(body.model, run, protocol, str(request.base_url).rstrip("/"))
        if body.stream:
            return StreamingResponse(
                _stream(service, who, reply),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        async for _id, event in service.events(who, run.id):
            reply.feed(event)
        return reply.completion(service.run(who, run.id))


def _request_parts(body: ChatRequest, header_thread: str | None) -> tuple[str, list[str], str | None]:
    """The task, file ids and thread id of a request. Raises ``ServiceError`` 422 without a user message."""
    users = [m for m in body.messages if m.get("role") == "user"]
    if not users:
        raise ServiceError("messages hold no user message: nothing to do", status=422)
    latest = users[-1]
    thread_id = body.thread_id or latest.get("thread_id") or header_thread
    carriers = [latest] if thread_id else users  # a follow-up's earlier files are in its workspace already
    file_ids = list(body.file_ids or []) + [f for m in carriers for f in (m.get("file_ids") or [])]
    return _text(latest.get("content")), list(dict.fromkeys(file_ids)), thread_id


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _protocol(service: Service, run: RunRecord) -> str:
    runtime = service.runtimes.get(run.thread_id)
    return runtime.agent.config.protocol.name if runtime is not None else "tools"


class _Reply:
    """One completion being built from the run's events."""

    def __init__(self, model: str, run: RunRecord, protocol: str, base_url: str) -> None:
        self.base_url = base_url
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.run = run
        self.writer = TagWriter(protocol)
        self.content: list[str] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}

    def feed(self, event: dict[str, Any]) -> str:
        if event["event"] == "round_finished":
            for name, value in event["round"]["usage"].items():
                if name in self.usage:
                    self.usage[name] += value
        piece = self.writer.feed(event)
        self.content.append(piece)
        return piece

    def completion(self, record: RunRecord) -> dict[str, Any]:
        files = _generated(record, self.base_url)
        message = {"role": "assistant", "content": "".join(self.content), "thread_id": record.thread_id, "files": files}
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": self.usage,
            "generated_files": files,
            "thread_id": record.thread_id,
            "run_id": record.id,
            "status": record.status,
        }

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _stream(service: Service, who: str, reply: _Reply) -> AsyncIterator[str]:
    run_id = reply.run.id
    yield reply.chunk({"role": "assistant", "content": "", "thread_id": reply.run.thread_id}, run_id=run_id)
    async for _id, event in service.events(who, run_id):
        piece = reply.feed(event)
        if piece:
            yield reply.chunk({"content": piece})
    record = service.run(who, run_id)
    files = _generated(record, reply.base_url)
    yield reply.chunk(
        {},
        "stop",
        generated_files=files,
        thread_id=record.thread_id,
        run_id=run_id,
        usage=reply.usage,
        status=record.status,
    )
    yield "data: [DONE]\n\n"


def _generated(record: RunRecord, base_url: str) -> list[dict[str, Any]]:
    """The run's generated files as DeepAnalyze lists them: name and (absolute) download URL."""
    return [{"name": f["name"], "url": base_url + f["url"]} for f in public(record)["files"]]
