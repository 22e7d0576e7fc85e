"""``OpenAIChatModel``: the ``ChatModel`` for any OpenAI-compatible endpoint.

The only module that imports ``openai``, and it does so on first use, so
re-exporting this class does not make ``import kernel_agent`` load the SDK.
Owns the request (model, temperature, protocol options, ``extra_body``),
the time-outs, retries with exponential backoff, and the mapping of SDK
errors onto ``errors.py``; reading the replies into a ``ModelReply`` is
``replies.py``'s job. What the messages say is
the protocols' job (``agent/protocols/``).

Errors, after ``max_retries`` retries of the transient ones (HTTP 408, 429,
5xx, connect time-outs, refused or broken connections)::

    connection refused / DNS / connect time-out -> ModelUnreachableError
    no reply (or a stream that stalls) within
      ``request_timeout``                       -> ModelTimeoutError (never retried: the
                                                   server is most likely still generating)
    400 "maximum context length ..."            -> ContextLengthError (never retried)
    400/422 naming fields we sent in
      ``extra_body`` (vLLM extras)              -> ModelError naming the option that turns them off
    other HTTP errors, a stream that broke      -> ModelError(status_code=...)

``request_timeout`` bounds the wait for the reply to start and, when
streaming, each gap between two pieces of it: a stream that keeps producing
tokens never times out, however long the whole reply takes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._loop import in_thread
from ..errors import ConfigError, ContextLengthError, ModelError, ModelTimeoutError, ModelUnreachableError
from ..redact import redact
from .chat import ModelReply, Piece, ReasoningPiece, Retry, TextPiece
from .messages import ChatMessage
from .registry import ModelSettings
from .replies import StreamAccumulator, completion_reply

if TYPE_CHECKING:
    import openai

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "EXTRAS_OPTION", "OpenAIChatModel", "endpoint_host", "openai_model"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Long enough for a local 8B model to prefill a long conversation on a busy GPU; a streamed reply
# only needs each piece to come within it.
DEFAULT_REQUEST_TIMEOUT = 600.0
EXTRAS_OPTION = "--no-vllm-extras (vllm_extras=False, KERNEL_AGENT_VLLM_EXTRAS=0)"
_TIMEOUT_OPTION = "--request-timeout (request_timeout=..., KERNEL_AGENT_REQUEST_TIMEOUT)"
_UNKNOWN_FIELD_MARKERS = ("unrecognized", "unknown", "extra", "not permitted", "unexpected", "not allowed")
_CONNECT_TIMEOUTS = frozenset({"ConnectTimeout", "PoolTimeout"})
# Servers without auth still need some key: the SDK refuses to build a client without one.
_NO_KEY = "not-needed"
_MAX_DELAY_S = 30.0
_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "maximum context",
    "context window",
    "context size",
)


def endpoint_host(base_url: str | None) -> str:
    """``host[:port]`` of a base URL, never its credentials, path or query.

    ``None`` means the SDK's default endpoint (``api.openai.com``). Never raises.
    """
    url = base_url or DEFAULT_BASE_URL
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if port else host


def _safe_url(base_url: str | None) -> str:
    url = base_url or DEFAULT_BASE_URL
    parts = urlsplit(url if "://" in url else "http://" + url)
    return f"{parts.scheme}://{endpoint_host(url)}{parts.path}"


def _sdk() -> Any:
    import openai

    return openai


class _BrokenStream(Exception):
    """The server closed a stream before it finished (internal; becomes a ModelError)."""

    def __init__(self, received: int) -> None:
        super().__init__(f"the stream broke off after {received} characters")
        self.received = received


class _StalledStream(Exception):
    """A stream sent nothing for ``request_timeout`` seconds (internal; becomes a ModelTimeoutError)."""

    def __init__(self, received: int) -> None:
        super().__init__(f"the stream stalled after {received} characters")
        self.received = received


class OpenAIChatModel:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    ``api_key=None`` falls back to ``OPENAI_API_KEY`` as the SDK does and then
    to a placeholder, so servers without auth (vLLM, llama.cpp) just work.
    ``backoff`` is the first retry delay in seconds; it doubles per retry,
    with up to 25% jitter, and a server's ``Retry-After`` wins when present.
    ``extra_body`` is merged into every request (vLLM's ``top_k``, ``max_tokens``).
    ``request_timeout`` (default ``DEFAULT_REQUEST_TIMEOUT``) is the longest
    wait for the reply to start or, streaming, for its next piece.
    ``stream=False`` asks for each reply whole (read back as ``streaming``).
    The SDK client is created on first use in the running loop; ``aclose()``
    releases it. Raises ``ConfigError`` for a negative retry count or backoff.
    """

    scripted = False

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stream: bool = True,
        max_retries: int = 3,
        backoff: float = 0.5,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not model:
            raise ConfigError("a model name is required")
        if max_retries < 0 or backoff < 0 or request_timeout <= 0:
            raise ConfigError("max_retries and backoff must be >= 0 and request_timeout > 0")
        self.name = model
        self.base_url = base_url
        self.endpoint = endpoint_host(base_url)
        self.temperature = temperature
        self.top_p = top_p
        self.streaming = stream
        self.max_retries = max_retries
        self.backoff = backoff
        self.request_timeout = request_timeout
        self.extra_body = dict(extra_body or {})
        self._api_key = api_key
        self._client: openai.AsyncOpenAI | None = None
        self._making_client = threading.Lock()  # ``ready`` in a worker thread and a first request may race

    def __repr__(self) -> str:
        return f"<OpenAIChatModel {self.name} @ {self.endpoint}>"

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client. Idempotent; a later ``stream()`` opens a new one."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    async def stream(
        self, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None
    ) -> AsyncIterator[Piece]:
        """Send ``messages`` (plus protocol ``options``) and yield the reply in pieces, then the ``ModelReply``.

        Streaming, each text, reasoning and tool-call argument piece as it arrives (not streaming, only the
        reply); before a transient failure is retried, a ``Retry`` with the reason (what came before it is
        void). Closing the stream early closes the request's connection. Raises ``ModelUnreachableError``,
        ``ModelTimeoutError``, ``ContextLengthError`` or ``ModelError`` as the module docstring says, each
        ``from`` the SDK error.
        """
        if self._client is None:  # the SDK's import and its TLS set-up read many files: not on the loop
            await in_thread(self.ready)
        sdk = _sdk()
        request = self._request(messages, options)
        for attempt in range(self.max_retries + 1):
            try:
                if not self.streaming:
                    yield await self._complete_once(request)
                    return
                async with aclosing(self._streamed(request)) as pieces:
                    async for piece in pieces:
                        yield piece
                return
            except (sdk.OpenAIError, _BrokenStream, _StalledStream, json.JSONDecodeError) as exc:
                transient, error = self._failure(exc, attempts=attempt + 1, extras=request.get("extra_body"))
                error = self._scrubbed(error)
                if not transient or attempt == self.max_retries:
                    raise error from self._safe_cause(exc)
                delay = self._delay(attempt, exc)
            yield Retry(f"{error} (retrying in {delay:.1f} s)")
            await asyncio.sleep(delay)

    # -- secrets ----------------------------------------------------------

    def _key(self) -> str:
        return self._api_key if self._api_key is not None else os.environ.get("OPENAI_API_KEY") or _NO_KEY

    def _scrubbed(self, error: ModelError) -> ModelError:
        """``error`` with the key taken out of its message (a server may echo the key in a 401 body)."""
        text = str(error)
        clean = redact(text, [self._key()])
        if clean != text:
            error.args = (clean, *error.args[1:])
        return error

    def _safe_cause(self, exc: BaseException) -> BaseException | None:
        """``exc`` to chain, or None when it (or its chain) shows the key: a logged
        traceback would print the SDK error's message, body and repr."""
        key, seen = self._key(), 0
        current: BaseException | None = exc
        while current is not None and seen < 10:
            shown = f"{current!s} {current!r} {getattr(current, 'body', '')}"
            if redact(shown, [key]) != shown:
                return None
            current, seen = current.__cause__ or current.__context__, seen + 1
        return exc

    # -- requests ---------------------------------------------------------

    def _request(self, messages: Sequence[ChatMessage], options: dict[str, Any] | None) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.name, "messages": list(messages)}
        extra: dict[str, Any] = {}
        for key, value in (options or {}).items():
            if key == "extra_body":
                extra.update(value)
            else:
                request[key] = value
        extra.update(self.extra_body)  # the user's own extras win over the protocol's defaults
        if self.temperature is not None:
            request.setdefault("temperature", self.temperature)
        if self.top_p is not None:
            request.setdefault("top_p", self.top_p)
        if extra:
            request["extra_body"] = extra
        return request

    def ready(self) -> None:
        """Import the SDK and make the client now (the first request then goes out at once), e.g. in a worker
        thread while a kernel starts. Blocking; idempotent."""
        self._sdk_client().chat.completions  # noqa: B018 - the SDK imports its resources on first access

    def _sdk_client(self) -> openai.AsyncOpenAI:
        with self._making_client:
            if self._client is None:
                sdk = _sdk()
                self._client = sdk.AsyncOpenAI(
                    base_url=self.base_url, api_key=self._key(), max_retries=0, timeout=self.request_timeout
                )
            return self._client

    async def _complete_once(self, request: dict[str, Any]) -> ModelReply:
        completion = await self._sdk_client().chat.completions.create(**request)
        reply = completion_reply(completion)
        if reply is None:
            raise ModelError(f"the model endpoint {_safe_url(self.base_url)} returned no choices")
        return reply

    async def _streamed(self, request: dict[str, Any]) -> AsyncGenerator[Piece, None]:
        """One streamed attempt: its pieces, then its ``ModelReply``; the response is closed however it ends."""
        sdk = _sdk()
        stream = await self._sdk_client().chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True}
        )
        acc = StreamAccumulator()
        async with stream:
            try:
                async for chunk in stream:
                    text, thought, calls = acc.add(chunk)
                    if thought:
                        yield ReasoningPiece(thought)
                    if text:
                        yield TextPiece(text)
                    for call in calls:
                        yield call
            except sdk.APITimeoutError as exc:
                raise _StalledStream(acc.received) from exc
            except sdk.APIConnectionError as exc:
                raise _BrokenStream(acc.received) from exc
        yield acc.reply()

    # -- failures ---------------------------------------------------------

    def _failure(
        self, exc: BaseException, *, attempts: int, extras: dict[str, Any] | None = None
    ) -> tuple[bool, ModelError]:
        """Whether ``exc`` is worth retrying, and the error to raise if not."""
        sdk = _sdk()
        where = _safe_url(self.base_url)
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if isinstance(exc, _StalledStream) or _is_read_timeout(sdk, exc):
            return False, self._timeout_error(exc)
        if isinstance(exc, _BrokenStream):
            return True, ModelError(f"the model endpoint {where} closed the stream early ({exc}) after {tries}")
        if isinstance(exc, json.JSONDecodeError):
            return False, ModelError(f"the model endpoint {where} sent malformed JSON: {exc}")
        if isinstance(exc, sdk.APIStatusError):
            status = exc.status_code
            detail = _error_detail(exc)
            if status in (400, 413) and _mentions_context_length(exc, detail):
                message = f"the conversation no longer fits the context window of {self.name}: {detail}"
                return False, ContextLengthError(message, status_code=status)
            rejected = _rejected_extras(status, detail, extras)
            if rejected:
                message = (
                    f"the model endpoint {where} rejected the vLLM extra field(s) {', '.join(rejected)} "
                    f"(HTTP {status}: {detail}); this server does not take them: turn them off with {EXTRAS_OPTION}"
                )
                return False, ModelError(message, status_code=status)
            message = f"the model endpoint {where} answered HTTP {status} after {tries}: {detail}"
            if status in (401, 403):
                message += " (check the API key)"
            return status in (408, 429) or status >= 500, ModelError(message, status_code=status)
        if isinstance(exc, sdk.APIConnectionError):
            if isinstance(exc, sdk.APITimeoutError):
                reason = f"could not connect within {self.request_timeout:g}s"
            else:
                reason = _root_cause(exc)
            message = (
                f"cannot reach the model endpoint {where} ({reason}) after {tries}. "
                "Check that the server is running and that the base URL is right (it usually ends in /v1)."
            )
            return True, ModelUnreachableError(message)
        detail = getattr(exc, "message", None) or str(exc)
        if _mentions_context_length(exc, detail):
            message = f"the conversation no longer fits the context window of {self.name}: {detail}"
            return False, ContextLengthError(message)
        return False, ModelError(f"the model endpoint {where} failed: {detail}")

    def _timeout_error(self, exc: BaseException) -> ModelTimeoutError:
        where = _safe_url(self.base_url)
        limit = f"{self.request_timeout:g} s"
        received = getattr(exc, "received", 0)
        if received:
            what = f"the model at {where} streamed {received} characters of its reply, then sent nothing for {limit}"
        else:
            what = (
                f"the model at {where} accepted the request but did not start replying within {limit} "
                "(it is reachable, just slow: a big model, a long conversation or a busy server)"
            )
        message = (
            f"{what}. Not retried, so the server is not asked to generate the same reply twice; "
            f"allow more time with {_TIMEOUT_OPTION}."
        )
        return ModelTimeoutError(message, timeout=self.request_timeout, received=received)

    def _delay(self, attempt: int, exc: BaseException) -> float:
        retry_after = _retry_after(exc)
        if retry_after is not None:
            return min(retry_after, _MAX_DELAY_S)
        base = self.backoff * (2.0**attempt)
        return min(base * (1 + random.random() / 4), _MAX_DELAY_S)


def openai_model(name: str, settings: ModelSettings) -> OpenAIChatModel:
    """The ``openai`` entry point of ``kernel_agent.models``: ``name`` at the OpenAI-compatible endpoint the
    settings say. ``settings.options`` are further ``OpenAIChatModel`` keywords (``max_retries``, ``backoff``,
    ``extra_body``; a ``request_timeout`` there wins). Raises ``ConfigError`` as ``OpenAIChatModel`` does."""
    options = dict(settings.options)
    if settings.request_timeout is not None:
        options.setdefault("request_timeout", settings.request_timeout)
    return OpenAIChatModel(
        name,
        base_url=settings.base_url,
        api_key=settings.api_key,
        temperature=settings.temperature,
        top_p=settings.top_p,
        stream=settings.stream,
        **options,
    )


def _is_read_timeout(sdk: Any, exc: BaseException) -> bool:
    """A time-out after the connection was made: the server has the request and is (slowly) on it."""
    if not isinstance(exc, sdk.APITimeoutError):
        return False
    cause = exc.__cause__ or exc.__context__
    return type(cause).__name__ not in _CONNECT_TIMEOUTS


def _rejected_extras(status: int, detail: str, extras: dict[str, Any] | None) -> list[str]:
    """The ``extra_body`` fields a 400/422 complains about (all of them when it names none)."""
    if status not in (400, 422) or not extras:
        return []
    lowered = detail.lower()
    named = [key for key in extras if key.lower() in lowered]
    if named:
        return named
    return list(extras) if any(marker in lowered for marker in _UNKNOWN_FIELD_MARKERS) else []


def _error_detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        message = inner.get("message") if isinstance(inner, dict) else body.get("message")
        if message:
            return str(message)[:500]
    elif isinstance(body, str) and body:
        return body[:500]
    return str(getattr(exc, "message", "") or exc)[:500]


def _mentions_context_length(exc: Any, detail: str) -> bool:
    text = f"{detail} {getattr(exc, 'code', '') or ''} {getattr(exc, 'message', '') or ''}".lower()
    return any(marker in text for marker in _CONTEXT_MARKERS)


def _root_cause(exc: BaseException) -> str:
    # The SDK says "Connection error."; the useful words sit at the bottom of the chain.
    reason, seen = str(exc), 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        reason = str(current) or reason
        current, seen = current.__cause__ or current.__context__, seen + 1
    return reason


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None
