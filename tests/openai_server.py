"""A scripted OpenAI-compatible chat server for tests: real HTTP on 127.0.0.1, stdlib only.

``OpenAIServer`` listens on an ephemeral port in a background thread, answers
``POST /v1/chat/completions`` (and ``/chat/completions``) with the next entry
of its script, and records every request body so a test can assert what the
model was sent. Both ``"stream": true`` (SSE ``chat.completion.chunk`` events
ending in ``data: [DONE]``, plus a usage chunk when
``stream_options.include_usage`` is set) and plain ``chat.completion`` JSON
are served. ``GET /v1/models`` lists one model.

Script entries::

    Reply("text")                                   an assistant message
    Reply("<Code>..", finish_reason="stop", stop_reason="</Code>")   vLLM's extra field
    Reply("", tool_calls=(python_call("print(1)"),))  a tool call (arguments as JSON)
    Reply("partial text", die_after=2)              send 2 SSE chunks (the first is the role
                                                    chunk), then drop the connection
    Reply("42", reasoning="let me think")           a reasoning model: ``reasoning_content`` on the
                                                    message, streamed as ``delta.reasoning_content``
    Reply("slow", pause=2.0)                        wait 2 s before answering (a slow prefill)
    Reply("slow", chunk_size=1, chunk_pause=0.2)    stream, one chunk every 0.2 s (slow generation)
    Reply("stalls", stall_after=2)                  send 2 SSE chunks, then nothing until close()
    Reply("held", hold_after=3, hold=event)         send 3 SSE chunks, then the rest once the test sets
                                                    ``event`` (a ``threading.Event``; close() sets it too)
    HTTPError(500) / HTTPError(429, headers={"retry-after": "0"})
    context_length_error()                          OpenAI's 400 ``context_length_exceeded``
    lambda body: Reply(...)                          computed from (or asserting on) the request

A callable entry that raises is answered with a 500 and its exception is
re-raised from ``close()``, so an assertion inside it fails the test. When the
script runs out the server answers 500 "script ran out" (it never hangs).

Usage, with the ``openai_server`` fixture from ``conftest.py``::

    def test_x(openai_server):
        openai_server.add(Reply("<Answer>42</Answer>"))
        model = OpenAIChatModel("m", base_url=openai_server.base_url)
        ...
        assert openai_server.requests[0]["stop"] == ["</Code>"]

or standalone: ``with OpenAIServer([Reply("hi")]) as server: ...``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["HTTPError", "OpenAIServer", "Reply", "context_length_error", "python_call", "tool_call"]


@dataclass(frozen=True)
class Reply:
    """One assistant reply.

    ``tool_calls`` are dicts from ``tool_call()``/``python_call()``.
    ``finish_reason`` defaults to ``tool_calls`` when there are calls, else
    ``stop``. ``stop_reason`` (vLLM) is sent on the choice when not None.
    ``usage`` is ``(prompt_tokens, completion_tokens)``, ``"auto"`` (a
    character-count estimate) or None (not sent). ``die_after=n`` drops the
    connection after n SSE chunks (streaming) or half the body (non-streaming).
    ``reasoning`` is sent as ``reasoning_content`` (streamed before the text);
    ``reasoning_tokens`` as ``usage.completion_tokens_details.reasoning_tokens``.
    ``pause`` delays the response's start and ``chunk_pause`` each streamed
    chunk, in seconds (``close()`` cuts both short). ``hold_after=n`` with
    ``hold`` sends n SSE chunks, then waits for ``hold`` to be set before the
    rest: a test sees what reached its client while the model is mid-reply.
    """

    content: str | None = ""
    tool_calls: tuple[dict[str, Any], ...] = ()
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    usage: tuple[int, int] | str | None = "auto"
    chunk_size: int = 16
    die_after: int | None = None
    reasoning: str = ""
    reasoning_tokens: int | None = None
    pause: float = 0.0
    chunk_pause: float = 0.0
    stall_after: int | None = None
    hold_after: int | None = None
    hold: threading.Event | None = field(default=None, compare=False)


@dataclass(frozen=True)
class HTTPError:
    """An error response shaped like OpenAI's ``{"error": {...}}``."""

    status: int
    message: str = "scripted server error"
    type: str = "server_error"
    code: str | None = None
    param: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


Entry = Reply | HTTPError | Callable[[dict[str, Any]], Reply | HTTPError]


def tool_call(name: str, arguments: str | dict[str, Any], id: str | None = None) -> dict[str, Any]:
    """A tool call for ``Reply.tool_calls``; dict ``arguments`` are JSON-encoded."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": id, "name": name, "arguments": args}


def python_call(code: str, id: str | None = None) -> dict[str, Any]:
    """A well-formed ``execute_python`` tool call."""
    return tool_call("execute_python", {"code": code}, id)


def context_length_error(limit: int = 8192, requested: int = 9000) -> HTTPError:
    """The 400 OpenAI sends when the messages exceed the context window."""
    return HTTPError(
        400,
        f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
        f"{requested} tokens. Please reduce the length of the messages.",
        type="invalid_request_error",
        code="context_length_exceeded",
        param="messages",
    )


class OpenAIServer:
    """A scripted chat-completions server; see the module docstring.

    ``base_url`` ends in ``/v1``. ``requests`` holds the parsed JSON bodies of
    chat requests in arrival order, ``request_headers`` their headers
    (lower-case names). ``remaining`` counts unplayed script entries.
    ``hung_up`` is set once a client closed its connection while a reply was
    still streaming to it (a write to it failed).
    """

    def __init__(self, script: Iterable[Entry] = (), *, model: str = "scripted-test-model") -> None:
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self.errors: list[BaseException] = []
        self.hung_up = threading.Event()
        self._script: deque[Entry] = deque(script)
        self._lock = threading.Lock()
        self._holds: list[threading.Event] = []  # set on close(), so no held reply outlives the server
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------

    def start(self) -> OpenAIServer:
        """Bind an ephemeral port on 127.0.0.1 and serve in a background thread."""
        if self._httpd is not None:
            return self
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        # A short poll interval makes shutdown() return quickly (the default waits up to 0.5 s).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.01,), name="openai-test-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, drop open connections, join every thread. Idempotent.

        Raises the first exception a callable script entry raised, if any.
        """
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.stopping.set()
            with self._lock:
                for hold in self._holds:
                    hold.set()
            httpd.shutdown()
            httpd.drop_connections()
            httpd.server_close()  # joins the handler threads (daemon_threads is False)
            assert self._thread is not None
            self._thread.join()
        if self.errors:
            first, self.errors = self.errors[0], []
            raise AssertionError(f"a scripted entry raised: {first!r}") from first

    def __enter__(self) -> OpenAIServer:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        self.errors.clear()  # the test already fails; do not mask its exception
        self.close()

    # -- script -----------------------------------------------------------

    def add(self, *entries: Entry) -> OpenAIServer:
        """Append entries to the script (played first in, first out)."""
        with self._lock:
            self._script.extend(entries)
        return self

    def discard(self) -> int:
        """Drop the entries not played yet (a run that ended before it asked for them); return how many."""
        with self._lock:
            dropped = len(self._script)
            self._script.clear()
        return dropped

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("OpenAIServer is not started")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("OpenAIServer is not started")
        return self._httpd.server_address[1]

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    @property
    def last_request(self) -> dict[str, Any]:
        with self._lock:
            return self.requests[-1]

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply | HTTPError:
        with self._lock:
            self.requests.append(body)
            self.request_headers.append(headers)
            entry = self._script.popleft() if self._script else None
            if isinstance(entry, Reply) and entry.hold is not None:
                self._holds.append(entry.hold)
        if entry is None:
            n = len(self.requests)
            return HTTPError(500, f"OpenAIServer: the script ran out (request #{n} has no scripted reply)")
        if callable(entry):
            try:
                entry = entry(body)
            except BaseException as exc:  # handed to the test through close()
                self.errors.append(exc)
                return HTTPError(500, f"OpenAIServer: the scripted callable raised {exc!r}")
        return entry

    def __repr__(self) -> str:
        where = self.base_url if self._httpd else "stopped"
        return f"<OpenAIServer {where} requests={len(self.requests)} remaining={self.remaining}>"


class _Server(ThreadingHTTPServer):
    # Non-daemon handler threads so server_close() joins them: no thread outlives close().
    daemon_threads = False

    def __init__(self, address: tuple[str, int], handler: type, owner: OpenAIServer) -> None:
        self.owner = owner
        self.stopping = threading.Event()  # cuts scripted pauses short on close()
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        # A client that never closes its keep-alive socket would keep a handler thread blocked in recv.
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked transfer: a dropped stream is a detectable error
    timeout = 30
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            model = self.server.owner.model
            self._send_json(200, {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "test"}]})
        else:
            self._send_error(HTTPError(404, f"no route for GET {self.path}", type="not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send_error(HTTPError(404, f"no route for POST {self.path}", type="not_found"))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send_error(HTTPError(400, "request body is not JSON", type="invalid_request_error"))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        entry = self.server.owner._next(body, headers)
        if isinstance(entry, Reply) and entry.pause and self.server.stopping.wait(entry.pause):
            return
        if isinstance(entry, HTTPError):
            self._send_error(entry)
        elif body.get("stream"):
            self._send_stream(entry, body)
        else:
            self._send_completion(entry, body)

    # -- responses --------------------------------------------------------

    def _send_json(self, status: int, payload: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _send_error(self, err: HTTPError) -> None:
        payload = {"error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}}
        self._send_json(err.status, payload, err.headers)

    def _send_completion(self, reply: Reply, body: dict[str, Any]) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": _call_id(call, i),
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for i, call in enumerate(reply.tool_calls)
            ]
        payload = _envelope(body, "chat.completion")
        payload["choices"] = [{"index": 0, "message": message, "logprobs": None, **_finish(reply)}]
        usage = _usage(reply, body)
        if usage is not None:
            payload["usage"] = usage
        if reply.die_after is None:
            self._send_json(200, payload)
            return
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self._drop()

    def _send_stream(self, reply: Reply, body: dict[str, Any]) -> None:
        try:
            self._stream(reply, body)
        except (BrokenPipeError, ConnectionResetError):  # the client hung up mid-reply
            self.server.owner.hung_up.set()
            self.close_connection = True

    def _stream(self, reply: Reply, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for sent, chunk in enumerate(_stream_chunks(reply, body)):
            if reply.die_after is not None and sent >= reply.die_after:
                self._drop()
                return
            if sent and reply.chunk_pause and self.server.stopping.wait(reply.chunk_pause):
                return
            if reply.hold is not None and sent == reply.hold_after:
                reply.hold.wait()  # the test sets it, or close() does
                if self.server.stopping.is_set():
                    return
            if reply.stall_after is not None and sent >= reply.stall_after:
                self.server.stopping.wait(60)  # a server that hangs mid-reply; close() ends the wait
                return
            self._write_chunk(f"data: {json.dumps(chunk)}\n\n")
        self._write_chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        # Close without the terminating chunk / full body: the client sees a broken response.
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _envelope(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return {"id": "chatcmpl-scripted", "object": kind, "created": 1700000000, "model": body.get("model", "")}


def _call_id(call: dict[str, Any], index: int) -> str:
    return call.get("id") or f"call_scripted_{index}"


def _finish(reply: Reply) -> dict[str, Any]:
    finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
    fields: dict[str, Any] = {"finish_reason": finish}
    if reply.stop_reason is not None:
        fields["stop_reason"] = reply.stop_reason
    return fields


def _usage(reply: Reply, body: dict[str, Any]) -> dict[str, Any] | None:
    if reply.usage is None:
        return None
    if isinstance(reply.usage, str):  # "auto"
        prompt = len(json.dumps(body.get("messages", []))) // 4 + 1
        completion = (len(reply.content or "") + sum(len(c["arguments"]) for c in reply.tool_calls)) // 4 + 1
    else:
        prompt, completion = reply.usage
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    return usage


def _stream_chunks(reply: Reply, body: dict[str, Any]) -> Iterable[dict[str, Any]]:
    def chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        out = _envelope(body, "chat.completion.chunk")
        out["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, **extra}]
        return out

    size = max(reply.chunk_size, 1)
    yield chunk({"role": "assistant", "content": ""})
    for start in range(0, len(reply.reasoning), size):
        yield chunk({"reasoning_content": reply.reasoning[start : start + size]})
    text = reply.content or ""
    for start in range(0, len(text), size):
        yield chunk({"content": text[start : start + size]})
    for index, call in enumerate(reply.tool_calls):
        head = {
            "index": index,
            "id": _call_id(call, index),
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        yield chunk({"tool_calls": [head]})
        args = call["arguments"]
        for start in range(0, len(args), size):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": args[start : start + size]}}]})
    yield chunk({}, **_finish(reply))
    usage = _usage(reply, body)
    if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
        tail = _envelope(body, "chat.completion.chunk")
        tail["choices"] = []
        tail["usage"] = usage
        yield tail
