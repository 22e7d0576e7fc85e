"""``Broker``: one session's live sources served to its kernel on a Unix socket, one query a connection.

The host runs it (an async context manager) for a session: it listens on ``<folder>/sql.sock`` (``folder``:
a fresh 0700 host temp dir, never in a workspace, removed on exit), reads a request (the wire is
``kernel/inside/sql_client.py``'s), runs the query in a worker thread of its own pool, and streams the
result back as Arrow IPC, one record batch at a time, writing the next only once the client has taken the
last (so a client that stops reading holds at most one batch of the host's memory, and only its own
connection). It stops pulling rows at the caps (``QueryLimits.max_rows``/``max_bytes``: the trailer says
so), cancels a query past its wall deadline (the statement timeout plus ``MARGIN_S``) or whose client
went away, and serves ``CONCURRENCY`` queries at once (further connections wait; past ``MAX_OPEN`` open
ones a connection is answered "busy"). On exit it cancels what runs, closes its sources and removes its
folder. Everything a client sends is hostile data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import QueryError, SourceError
from ..kernel.inside.sql_client import MAX_REQUEST_BYTES, frame
from .base import QueryLimits, Results, Source

if TYPE_CHECKING:
    import pyarrow

__all__ = ["CONCURRENCY", "MARGIN_S", "MAX_OPEN", "REQUEST_TIMEOUT_S", "Broker"]

log = logging.getLogger(__name__)
T = TypeVar("T")

CONCURRENCY = 4  # queries running at once
MAX_OPEN = 16  # connections open at once (waiting ones included)
MARGIN_S = 5.0  # the wall deadline past the statement timeout: the server's own timeout comes first
REQUEST_TIMEOUT_S = 10.0  # for a client to send its request
SOCKET_PATH_MAX = 108  # Linux's sun_path, its terminating NUL included


class _Stop(Exception):
    """The answer ends early: ``why`` is ``time`` (the wall deadline) or ``gone`` (the client left)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Chunks:
    """A file-like sink for pyarrow's stream writer: what it wrote since the last ``take``."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


class Broker:
    """One session's query broker (see the module docstring). ``socket`` is the path it listens on; the
    broker owns ``sources`` (closed on exit) and ``folder`` (removed on exit)."""

    def __init__(self, sources: Mapping[str, Source], folder: Path, limits: QueryLimits | None = None) -> None:
        self.sources = dict(sources)
        self.folder = Path(folder)
        self.limits = limits or QueryLimits()
        self.socket = self.folder / "sql.sock"
        self._server: asyncio.Server | None = None
        self._executor = ThreadPoolExecutor(max_workers=2 * CONCURRENCY, thread_name_prefix="sql-broker")
        self._slots = asyncio.Semaphore(CONCURRENCY)
        self._handlers: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"<Broker {', '.join(self.sources) or 'no sources'} on {self.socket}>"

    async def __aenter__(self) -> Broker:
        """Listen. Raises ``SourceError`` for a folder that is not a directory of ours or a socket path too long
        for Unix sockets, ``OSError`` when it cannot listen; its sources are closed and its folder removed then."""
        try:
            info = self.folder.lstat()
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                raise SourceError(f"the broker's folder {self.folder} is not a directory of ours")
            if len(os.fsencode(self.socket)) >= SOCKET_PATH_MAX:
                raise SourceError(f"the broker's socket path is too long for a Unix socket: {self.socket}")
            os.chmod(self.folder, 0o700)
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.socket))
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop listening, cancel every query (waiting for its thread), close the sources, remove the folder.
        Idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._handlers):
            task.cancel()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if server is not None:
            await server.wait_closed()
        for source in self.sources.values():
            await self._run(source.close)
        self.sources.clear()
        self._executor.shutdown(wait=True)
        shutil.rmtree(self.folder, ignore_errors=True)

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            if len(self._handlers) > MAX_OPEN:
                writer.write(frame({"ok": False, "error": "the broker is busy: too many queries at once"}))
                return
            try:
                source, query = await asyncio.wait_for(self._request(reader), REQUEST_TIMEOUT_S)
            except (ValueError, TimeoutError, asyncio.IncompleteReadError, RecursionError) as exc:
                writer.write(frame({"ok": False, "error": _request_error(exc)}))
                return
            async with self._slots:
                await self._answer(source, query, reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the broker is closing: nothing more to say to it
        except Exception:
            log.exception("the SQL broker failed on a connection")
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _request(self, reader: asyncio.StreamReader) -> tuple[tuple[str, Source], str]:
        """The request's source (resolved) and query. Raises ``ValueError`` saying what is wrong with it."""
        length = int.from_bytes(await reader.readexactly(4), "big")
        if length > MAX_REQUEST_BYTES:
            raise ValueError(f"the request ({length} bytes) is over the {MAX_REQUEST_BYTES}-byte bound")
        request = json.loads(await reader.readexactly(length))
        if not isinstance(request, dict) or not isinstance(request.get("query"), str):
            raise ValueError('the request is not {"query": str, "source": str | null}')
        name = request.get("source")
        if name is not None and not isinstance(name, str):
            raise ValueError("the request's source is not a name")
        return self._source(name), request["query"]

    def _source(self, name: str | None) -> tuple[str, Source]:
        names = ", ".join(self.sources) or "none"
        if name is None:
            if len(self.sources) != 1:
                raise ValueError(f"name a data source with sql(query, source=NAME); the live ones: {names}")
            return next(iter(self.sources.items()))
        if name not in self.sources:
            raise ValueError(f"no live data source is named {name!r}; the live ones: {names}")
        return name, self.sources[name]

    async def _answer(
        self, named: tuple[str, Source], query: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        name, source = named
        limits = self.limits
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.timeout_s + MARGIN_S
        gone = asyncio.ensure_future(reader.read(1))  # a client sends nothing after its request: EOF is leaving
        results: Results | None = None
        pending: asyncio.Future[Any] | None = None

        async def within(future: asyncio.Future[T], *, thread: bool = True) -> T:
            """``future``'s result, or ``_Stop`` at the deadline or when the client leaves (a thread's future is
            left ``pending`` for ``_end`` to cancel and wait for; a drain is dropped)."""
            nonlocal pending
            pending = future if thread else None
            waited: set[asyncio.Future[Any]] = {future, gone}
            done, _ = await asyncio.wait(
                waited, timeout=max(0.0, deadline - loop.time()), return_when=asyncio.FIRST_COMPLETED
            )
            if future in done:
                pending = None
                return future.result()
            if not thread:
                future.cancel()
            raise _Stop("gone" if gone.done() else "time")

        try:
            try:
                results = await within(loop.run_in_executor(self._executor, source.query, query, limits))
                first = await within(loop.run_in_executor(self._executor, next, results, None))
            except (QueryError, SourceError) as exc:
                writer.write(frame({"ok": False, "error": str(exc)}))
                return
            except _Stop as stop:
                if stop.why == "time":
                    writer.write(frame({"ok": False, "error": _late(limits)}))
                return
            writer.write(frame({"ok": True, "source": name}))
            await self._stream(first, results, within, writer, limits)
        except _Stop:
            pass  # the client left before the answer began
        finally:
            gone.cancel()
            await self._end(results, pending)

    async def _stream(
        self,
        first: pyarrow.RecordBatch | None,
        results: Results,
        within: Callable[..., Any],
        writer: asyncio.StreamWriter,
        limits: QueryLimits,
    ) -> None:
        import pyarrow

        loop = asyncio.get_running_loop()
        sink = _Chunks()
        if first is None:  # a kind whose results end at once: an empty result of no columns
            first = pyarrow.RecordBatch.from_pylist([])
        stream = pyarrow.ipc.new_stream(sink, first.schema)
        rows = sent = 0
        capped: str | None = None
        error: str | None = None
        batch: pyarrow.RecordBatch | None = first
        try:
            while batch is not None:
                keep = min(batch.num_rows, limits.max_rows - rows)
                if batch.num_rows and sent + batch.nbytes > limits.max_bytes:
                    keep = min(keep, batch.num_rows * (limits.max_bytes - sent) // max(1, batch.nbytes))
                    capped = "bytes"
                if keep < batch.num_rows:
                    capped = capped or "rows"
                    batch = batch.slice(0, keep)
                stream.write_batch(batch)
                rows += batch.num_rows
                data = sink.take()
                sent += len(data)
                writer.write(data)
                await within(asyncio.ensure_future(writer.drain()), thread=False)
                if capped:
                    break
                batch = await within(loop.run_in_executor(self._executor, next, results, None))
        except QueryError as exc:
            error = str(exc)
        except _Stop as stop:
            if stop.why == "gone":
                raise ConnectionResetError("the client left") from None
            capped = "time"
        stream.close()
        writer.write(sink.take())
        writer.write(frame({"rows": rows, "bytes": sent, "capped": capped, "error": error}))
        try:
            await asyncio.wait_for(writer.drain(), MARGIN_S)
        except TimeoutError:
            raise ConnectionResetError("the client stopped reading") from None

    async def _end(self, results: Results | None, pending: asyncio.Future[Any] | None) -> None:
        """``_free``, finished even when a cancel comes meanwhile (the broker closing: it waits for its
        handlers), then the cancel goes on: cut short, it would leave the query's connection open."""
        ending = asyncio.ensure_future(self._free(results, pending))
        try:
            await asyncio.shield(ending)
        except asyncio.CancelledError:
            if not ending.done():
                await asyncio.wait({ending})
            raise

    async def _free(self, results: Results | None, pending: asyncio.Future[Any] | None) -> None:
        """Stop a query that still runs (cancel, then wait for its thread) and free its connection, also when
        the answer ended while the query was being started (``pending`` then makes the ``Results``)."""
        if pending is not None:
            if results is not None and not pending.done():
                await self._run(results.cancel)
            try:
                finished = await pending
            except Exception:
                finished = None
            if results is None and finished is not None:  # started as the answer ended: it holds a connection
                results = finished
        if results is not None:
            await self._run(results.close)


def _request_error(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no request came within {REQUEST_TIMEOUT_S:g} s"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the request was cut short"
    if isinstance(exc, UnicodeDecodeError | json.JSONDecodeError | RecursionError):
        return "the request is not JSON (or nested past what a request needs)"
    return str(exc)


def _late(limits: QueryLimits) -> str:
    return f"the query ran past its {limits.timeout_s:g} s limit and was cancelled"
