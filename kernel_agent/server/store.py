"""The service's state: uploaded files, threads, runs and each run's events, in a SQL database.

Owns the records' life in the database (``database.py`` says which one and migrates it); the bytes
under the data dir stay files, laid out, written and removed by ``Blobs`` (``blobs.py``), which the
store extends with the records::

    DATA/kernel-agent.db                         the embedded database (unless --database names another)
    DATA/files/<file-id>/<name>                  an upload under its (sanitised) file name
    DATA/threads/<thread-id>/analysis.ipynb      its notebook (+ .analysis.clean.ipynb), out of the kernel's reach
    DATA/threads/<thread-id>/workspace/          the kernel's cwd: data files, generated files

Records are typed (``records.py``), read once when the store opens and kept in memory, so a read
never waits for the database. Each save updates memory at once and queues the write for one writer
task, which commits what is queued in one transaction, in the order saved; events are rows too, and
``append_event`` returns only once its row is committed, so a reader never sees what a restart would
lose. A data dir from before the database (JSON records, JSONL events) is imported on first start
(``legacy.import_once``). No HTTP, no kernels.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .._loop import in_thread
from ..errors import KernelAgentError
from ..kernel.door import Door
from ..notebook.export import legacy_clean_path
from . import legacy
from .blobs import NOTEBOOK, Blobs
from .database import database_url, engine_for, migrate, readiness, row_of, safe_url, tables, upsert
from .notify import EVENTS, RECORDS, Listener, announce
from .private import tighten
from .records import FileRecord, RunRecord, ThreadRecord

__all__ = ["NOTEBOOK", "Store", "new_id"]

log = logging.getLogger(__name__)

_BATCH = 256  # writes committed in one transaction at most
POLL_S = 1.0  # how often a follower looks for new events when no notification wakes it

R = TypeVar("R", FileRecord, ThreadRecord, RunRecord)
Write = Callable[[AsyncConnection], Awaitable[None]]
Queued = tuple[Write, asyncio.Future[None], str | None]


def new_id(prefix: str) -> str:
    """A fresh unguessable id such as ``run-3f9a…`` (ids double as the only handle a client has)."""
    return f"{prefix}-{secrets.token_hex(12)}"


def _safe_id(value: str) -> bool:
    return bool(value) and all(c.isalnum() or c in "-_" for c in value) and len(value) < 100


class Store(Blobs):
    """Files, threads and runs: read from memory, written behind to the database by one task.

    ``database`` is a URL (``sqlite:///PATH``, ``postgresql://…``); the default is the embedded SQLite
    file under ``root``. Use ``await load()`` first and ``await close()`` last."""

    def __init__(self, root: str | os.PathLike[str], database: str | None = None) -> None:
        super().__init__(Path(root).resolve())
        self.url = database_url(database, self.root)
        self._engine: AsyncEngine | None = None
        self._files: dict[str, FileRecord] = {}
        self._threads: dict[str, ThreadRecord] = {}
        self._runs: dict[str, RunRecord] = {}
        self._queue: asyncio.Queue[Queued] = asyncio.Queue()
        self._pending: dict[str, int] = {}  # record id -> its writes not yet committed (memory is newer)
        self._wakers: dict[str, set[asyncio.Event]] = {}
        self._refreshing: set[asyncio.Task[None]] = set()
        self._listener: Listener | None = None
        self._writer: asyncio.Task[None] | None = None
        self._last: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"<Store {safe_url(self.url)} {len(self._threads)} threads {len(self._runs)} runs>"

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError("the store is not open: await load() first")
        return self._engine

    # ----------------------------------------------------------------- life
    async def load(self) -> None:
        """Make the layout, migrate the database, import a JSON data dir once, read every record.
        Raises ``ConfigError`` when the database cannot be reached or migrated."""
        self._loop = asyncio.get_running_loop()
        await in_thread(self.make_layout)
        if tightened := await in_thread(tighten, self.root, self.url):
            log.info(
                "made %d files and folders of the data dir %s owner-only (an older version left them readable "
                "by other users)",
                tightened,
                self.root,
            )
        await migrate(self.url)
        self._engine = engine_for(self.url)
        await legacy.import_once(self.engine, self.root)
        async with self.engine.connect() as connection:
            self._files = await _all(connection, "files", FileRecord)
            self._threads = await _all(connection, "threads", ThreadRecord)
            self._runs = await _all(connection, "runs", RunRecord)
        self._writer = asyncio.create_task(self._write_behind())
        if self.shared:
            self._listener = Listener(self.url, self._wake, self._changed_elsewhere)
            self._listener.start()

    @property
    def shared(self) -> bool:
        """True on a database other replicas may share (PostgreSQL), where records change elsewhere."""
        return self.url.get_backend_name() == "postgresql"

    async def flush(self) -> None:
        """Wait until every queued write is committed. Raises what the last write raised."""
        if self._last is not None:
            await asyncio.shield(self._last)

    async def close(self) -> None:
        """Commit the queued writes, stop the writer and close the engine. Idempotent."""
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        for task in list(self._refreshing):
            task.cancel()
        await asyncio.gather(*self._refreshing, return_exceptions=True)
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self.flush()
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def ready(self) -> str | None:
        """None when the database answers and its schema is current; else why not (never raises)."""
        try:
            async with asyncio.timeout(5), self.engine.connect() as connection:
                return await readiness(connection)
        except (TimeoutError, OSError, RuntimeError, SQLAlchemyError) as exc:
            return f"the database does not answer: {type(exc).__name__}"

    @property
    def pending(self) -> int:
        """Writes queued and not yet committed."""
        return self._queue.qsize()

    def _enqueue(self, write: Write, key: str | None = None) -> asyncio.Future[None]:
        if self._loop is None:
            raise RuntimeError("the store is not open: await load() first")
        done: asyncio.Future[None] = self._loop.create_future()
        if key is not None:
            self._pending[key] = self._pending.get(key, 0) + 1
            done.add_done_callback(lambda _done: self._settled(key))
        self._queue.put_nowait((write, done, key))
        self._last = done
        return done

    def _settled(self, key: str) -> None:
        left = self._pending.get(key, 0) - 1
        if left > 0:
            self._pending[key] = left
        else:
            self._pending.pop(key, None)

    async def _write_behind(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < _BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._commit(batch)
            except Exception as exc:
                if len(batch) == 1:
                    _fail(batch[0][1], exc)
                    continue
                for item in batch:  # one bad write must not lose the others: commit them one by one
                    try:
                        await self._commit([item])
                    except Exception as one:
                        _fail(item[1], one)

    async def _commit(self, batch: list[Queued]) -> None:
        async with self.engine.begin() as connection:
            for write, _done, _key in batch:
                await write(connection)
        for _write, done, _key in batch:
            if not done.done():
                done.set_result(None)

    def _save(self, table: dict[str, R], record: R, name: str) -> None:
        """Keep ``record`` in memory now and queue its row."""
        table[record.id] = record
        row = row_of(record)

        async def write(connection: AsyncConnection) -> None:
            await upsert(connection, name, row, ("id",))
            await announce(connection, RECORDS, f"{name}:{record.id}")

        self._enqueue(write, record.id)

    # ----------------------------------------------------------------- paths
    def move_records_out(self) -> int:
        """Copy each thread's notebooks out of its workspace (where earlier servers kept them) to beside
        it; return how many (blocking). Read through the door: a link there leads nowhere."""
        moved = 0
        for record in list(self._threads.values()):
            folder = Door(self.thread_dir(record.id))
            for name in (NOTEBOOK, legacy_clean_path(NOTEBOOK).name):
                if folder.entry_kind(name) is not None:
                    continue
                try:
                    _size, chunks = Door(folder.root / "workspace").stream(name)
                    folder.write_from(name, chunks)
                except (OSError, KernelAgentError):
                    continue
                moved += 1
        return moved

    # ----------------------------------------------------------------- files
    async def add_file(self, record: FileRecord, content: Path) -> None:
        """Move the uploaded ``content`` (a temp file on the same disk) into place, then commit its record."""
        await in_thread(self.put_file, record, content)
        self._save(self._files, record, "files")
        await self.flush()

    def file(self, file_id: str) -> FileRecord | None:
        return self._files.get(file_id) if _safe_id(file_id) else None

    def files(self) -> list[FileRecord]:
        return _ordered(self._files)

    def delete_file(self, record: FileRecord) -> None:
        """Forget the file at once; its row, then its bytes, go behind (a half-deleted file is simply gone)."""
        self._files.pop(record.id, None)

        async def write(connection: AsyncConnection) -> None:
            await connection.execute(delete(tables["files"]).where(tables["files"].c.id == record.id))
            await announce(connection, RECORDS, f"files:{record.id}")
            await in_thread(self.remove_file, record.id)

        self._enqueue(write, record.id)

    # ----------------------------------------------------------------- threads and runs
    def save_thread(self, record: ThreadRecord) -> None:
        self._save(self._threads, record, "threads")

    def thread(self, thread_id: str) -> ThreadRecord | None:
        return self._threads.get(thread_id) if _safe_id(thread_id) else None

    def threads(self) -> list[ThreadRecord]:
        return _ordered(self._threads)

    def delete_thread(self, record: ThreadRecord) -> None:
        """Forget the thread and its runs at once; their rows and events, then its folder, go behind."""
        self._threads.pop(record.id, None)
        for run_id in record.runs:
            self._runs.pop(run_id, None)
        runs = list(record.runs)

        async def write(connection: AsyncConnection) -> None:
            await connection.execute(delete(tables["threads"]).where(tables["threads"].c.id == record.id))
            await connection.execute(delete(tables["runs"]).where(tables["runs"].c.id.in_(runs)))
            await connection.execute(delete(tables["events"]).where(tables["events"].c.run_id.in_(runs)))
            await announce(connection, RECORDS, f"threads:{record.id}")
            for run_id in runs:
                await announce(connection, RECORDS, f"runs:{run_id}")
            await in_thread(self.remove_thread, record.id)

        self._enqueue(write, record.id)

    def save_run(self, record: RunRecord) -> None:
        self._save(self._runs, record, "runs")

    def run(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id) if _safe_id(run_id) else None

    def runs(self) -> list[RunRecord]:
        return _ordered(self._runs)

    # ----------------------------------------------------------------- events
    async def append_event(self, run_id: str, seq: int, event: dict[str, Any]) -> None:
        """Commit ``event`` as the run's ``seq``-th (from 1), after every save queued before it."""
        row = {"run_id": run_id, "seq": seq, "body": json.dumps(event, ensure_ascii=False, default=str)}

        async def write(connection: AsyncConnection) -> None:
            await _insert(connection, "events", row)
            await announce(connection, EVENTS, run_id)

        await asyncio.shield(self._enqueue(write))

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The run's committed events after position ``after``, in order."""
        table = tables["events"]
        query = select(table.c.body).where(table.c.run_id == run_id, table.c.seq > after).order_by(table.c.seq)
        async with self.engine.connect() as connection:
            rows = (await connection.execute(query)).scalars().all()
        return [json.loads(body) for body in rows]

    async def changed(self, run_id: str, timeout: float = POLL_S) -> None:
        """Return when ``run_id``'s events may have grown: at a notification, else after ``timeout``."""
        woken = asyncio.Event()
        self._wakers.setdefault(run_id, set()).add(woken)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await woken.wait()
        finally:
            waiting = self._wakers.get(run_id, set())
            waiting.discard(woken)
            if not waiting:
                self._wakers.pop(run_id, None)

    def _wake(self, run_id: str) -> None:
        for woken in self._wakers.get(run_id, ()):
            woken.set()

    # ----------------------------------------------------------------- other replicas' changes
    async def refresh(self, name: str, record_id: str) -> None:
        """Read record ``record_id`` of table ``name`` (files, threads, runs) from the database into
        memory, unless this replica has writes of it not yet committed (then memory is newer)."""
        if not _safe_id(record_id) or name not in _KINDS or self._engine is None:
            return
        table = tables[name]
        async with self.engine.connect() as connection:
            body = (await connection.execute(select(table.c.body).where(table.c.id == record_id))).scalar()
        if record_id in self._pending:
            return
        memory = getattr(self, _KINDS[name][0])
        if body is None:
            memory.pop(record_id, None)
        else:
            fresh = _KINDS[name][1].model_validate_json(body)
            if memory.get(record_id) != fresh:
                memory[record_id] = fresh

    def _changed_elsewhere(self, name: str, record_id: str) -> None:
        if record_id in self._pending:  # our own write coming back
            return
        task = asyncio.create_task(self.refresh(name, record_id))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    # ----------------------------------------------------------------- import


_KINDS: dict[str, tuple[str, type[Any]]] = {
    "files": ("_files", FileRecord),
    "threads": ("_threads", ThreadRecord),
    "runs": ("_runs", RunRecord),
}


def _fail(done: asyncio.Future[None], exc: Exception) -> None:
    log.error("a write to the database failed: %s", exc)
    if not done.done():
        done.set_exception(exc)
        done.exception()  # retrieved: a save nobody awaits must not warn at exit


async def _insert(connection: AsyncConnection, name: str, row: dict[str, Any]) -> None:
    await connection.execute(tables[name].insert().values(**row))


async def _all(connection: AsyncConnection, name: str, kind: type[R]) -> dict[str, R]:
    records: dict[str, R] = {}
    for body in (await connection.execute(select(tables[name].c.body))).scalars():
        record = kind.model_validate_json(body)
        records[record.id] = record
    return records


def _ordered(records: dict[str, R]) -> list[R]:
    return sorted(records.values(), key=lambda r: str(r.created_at))
