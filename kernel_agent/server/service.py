"""The service's engine: files, threads and runs of many owners on one ``Store``.

Owns what a request may do (who owns what, the concurrency cap, a busy thread's 409, a draining
server's 503), starting a run (its thread, its lease, its records) and following, cancelling and
deleting, the service's life (start, drain, close) and recovery after a crash (runs that were in
flight are marked ``interrupted``). A run's execution is ``executor.py``'s, the live thread kernels
``runtimes.py``'s, the service keys ``keys.py``'s, a dead replica's runs ``takeover.py``'s.
Raises ``ServiceError`` (with an HTTP status) for requests it refuses; the HTTP layer only translates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._loop import in_thread
from ..errors import ConfigError, ServiceError
from .config import NO_KEY_HELP, ServerConfig
from .executor import Executor
from .keys import SQLITE_TTL_S, Keys
from .leases import Leases
from .metrics import Metrics
from .records import FileRecord, RunRecord, ThreadRecord
from .revocations import KEY_REVOKED, Revocations
from .runtimes import Runtimes
from .store import Store, new_id
from .takeover import Sweeper, close_orphan, interrupt, now
from .threads import follow_stored

__all__ = ["DEMO_NO_FOLLOW_UP", "Service"]

# Why a demo server refuses a follow-up: its script answers the bundled question once and has no reply
# for another, so a follow-up would only play "the script ended" under a completed badge.
DEMO_NO_FOLLOW_UP = (
    "This demo server takes no follow-up: its replies are scripted for the bundled question only, and no "
    "language model is asked. Start a new analysis to watch the demo again, or serve a real model "
    "(kernel-agent serve --model NAME --base-url URL) to ask follow-ups."
)

log = logging.getLogger(__name__)

_OPEN = ("queued", "running")
R = TypeVar("R", FileRecord, ThreadRecord, RunRecord)


class Service:
    """Everything the HTTP layer asks for. Use as ``async with Service(config):``."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.store = Store(config.data_dir, config.database)
        self.runtimes = Runtimes(config, self.store, lambda: self.leases)
        self._starting = 0  # runs let in whose task is not made yet: they count toward max_running
        self._starting_by: Counter[str] = Counter()  # the same, by owner: they count toward its share
        self.executor = Executor(
            self.store,
            lambda: self.leases,
            lambda: self.draining,
            replied=lambda seconds: self.metrics.model_replied(seconds),
        )
        self.metrics = Metrics(self._state)  # reads the state once now
        self.replica = new_id("replica")
        self._leases: Leases | None = None
        self._keys: Keys | None = None
        self._revocations: Revocations | None = None  # with auth: a revoked key's streams and runs end here
        self._watchers: list[asyncio.Task[None]] = []  # the sweeper, the revocations' watcher
        self._drain_until: float | None = None  # set by begin_drain: no new runs, the running ones may finish

    @property
    def leases(self) -> Leases:
        if self._leases is None:
            raise RuntimeError("the service is not started")
        return self._leases

    @property
    def keys(self) -> Keys:
        if self._keys is None:
            raise RuntimeError("the service is not started")
        return self._keys

    async def __aenter__(self) -> Service:
        await self.store.load()
        self._leases = Leases(self.store.engine, self.replica, self.config.lease_ttl)
        try:
            await self._open_keys()
        except BaseException:
            await self.store.close()
            raise
        await self.recover()
        if self.store.shared:
            sweeper = Sweeper(self.store, self.leases, self.metrics, busy=self.runtimes.busy)
            self._watchers.append(asyncio.create_task(sweeper.run()))
        if self.config.auth:
            self._revocations = Revocations(self.keys, self._running_owners, self._cancel_owned)
            self._watchers.append(asyncio.create_task(self._revocations.run()))
        await self.runtimes.start()
        return self

    async def _open_keys(self) -> None:
        """The keys table, with the configured keys imported. Raises ``ConfigError`` when auth is on
        and no key is active."""
        self._keys = Keys(self.store.engine, ttl=0.0 if self.store.shared else SQLITE_TTL_S)
        if added := await self.keys.import_keys(self.config.keys):
            log.info("imported %d service keys (their hashes) into the database", added)
        if self.config.auth and not await self.keys.active():
            raise ConfigError(NO_KEY_HELP)

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def begin_drain(self) -> None:
        """Stop taking runs (503, and ``/ready`` says so); the running ones get ``drain_grace`` seconds
        from now to finish before ``close`` stops them. Idempotent: the first call sets the deadline."""
        if self._drain_until is None:
            self._drain_until = time.monotonic() + self.config.drain_grace
            log.info("draining: %d runs in flight get %.0f s to finish", self.executor.running, self.config.drain_grace)

    @property
    def draining(self) -> bool:
        return self._drain_until is not None

    async def close(self) -> None:
        """Let the runs in flight finish until the drain deadline, then cancel the rest (marked
        ``interrupted``; their notebooks are saved), shut every kernel down. Idempotent."""
        self.begin_drain()
        await self.executor.wait((self._drain_until or 0) - time.monotonic())
        await self.runtimes.stop_reaping()
        for watcher in self._watchers:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        self._watchers.clear()
        await self.executor.stop_all()
        await self.runtimes.close()
        await self.store.close()

    async def recover(self) -> None:
        """Mark the runs a killed server left open as ``interrupted`` (their notebooks hold every
        completed round), and close their event logs with a ``finished`` event. Notebooks an older
        server kept in a workspace move beside it first. On a shared database the runs of replicas
        that still renew their leases are theirs: the sweeper takes over the others as they expire."""
        if moved := await in_thread(self.store.move_records_out):
            log.info("moved %d notebooks out of thread workspaces", moved)
        if self.store.shared:
            return
        await self.leases.release_all()
        for run in self.store.runs():
            if run.status in _OPEN:
                await interrupt(self.store, run, "the server stopped while this run was in flight")

    # ----------------------------------------------------------------- files
    async def add_file(self, owner: str, filename: str, temp: Path, size: int, purpose: str) -> FileRecord:
        """Keep an upload (``temp`` is moved). Raises ``ServiceError`` 422 for a bad name or an empty file
        (no analysis can read one: refused now, not after a run starts)."""
        if size == 0:
            raise ServiceError(f"the file {filename!r} is empty", status=422)
        record = FileRecord(
            id=new_id("file"),
            owner=owner,
            filename=safe_name(filename),
            bytes=size,
            purpose=purpose,
            created_at=int(time.time()),
        )
        await self.store.add_file(record, temp)
        return record

    def file(self, owner: str, file_id: str) -> FileRecord:
        """The owner's file record. Raises ``ServiceError`` 404 for another owner's or an unknown id."""
        return _owned(self.store.file(file_id), owner, f"no file {file_id}")

    def files(self, owner: str) -> list[FileRecord]:
        return [f for f in self.store.files() if f.owner == owner]

    def delete_file(self, owner: str, file_id: str) -> None:
        """Remove the owner's upload. Raises ``ServiceError`` 404 as ``file`` does."""
        self.store.delete_file(self.file(owner, file_id))

    # ----------------------------------------------------------------- threads and runs
    def thread(self, owner: str, thread_id: str) -> ThreadRecord:
        return _owned(self.store.thread(thread_id), owner, f"no thread {thread_id}")

    def threads(self, owner: str) -> list[ThreadRecord]:
        return [t for t in self.store.threads() if t.owner == owner]

    def run(self, owner: str, run_id: str) -> RunRecord:
        return _owned(self.store.run(run_id), owner, f"no run {run_id}")

    def thread_runs(self, thread: ThreadRecord) -> list[RunRecord]:
        return [r for r in (self.store.run(i) for i in thread.runs) if r is not None]

    async def start_run(
        self,
        owner: str,
        task: str,
        file_ids: Sequence[str] = (),
        thread_id: str | None = None,
        protocol: str | None = None,
        *,
        sources: Sequence[str] | None = None,
    ) -> RunRecord:
        """Start a run (a follow-up in ``thread_id``'s live kernel when given); return its record. ``sources``:
        the server's live sources a new thread queries, by name (a follow-up keeps its thread's).

        Raises ``ServiceError``: 404 unknown file or thread, 409 the thread is busy, 422 an empty
        task, a source the server does not offer, other sources for a follow-up, or a follow-up on a demo
        server, 429 the server runs as many runs as it may.
        """
        if not task.strip():
            raise ServiceError("the task is empty", status=422)
        named = self._sources(sources)
        if self.config.demo and protocol not in (None, "tags"):
            raise ServiceError("this demo server plays scripted replies written for the tags protocol", status=422)
        if self.config.demo and thread_id is not None:
            raise ServiceError(DEMO_NO_FOLLOW_UP, status=422)
        if self.draining:
            raise ServiceError(
                "this server is shutting down and takes no new run; retry (another replica will)", status=503
            )
        await self.fresh(files=file_ids, threads=[thread_id] if thread_id else ())
        files = [self.file(owner, f) for f in file_ids]
        thread = self.thread(owner, thread_id) if thread_id else self._new_thread(owner, task, protocol, named)
        if thread_id and sources is not None and list(named) != thread.sources:
            raise ServiceError(
                f"thread {thread.id} queries {thread.sources or 'no sources'}; a follow-up cannot change them",
                status=422,
            )
        self._admit(owner)
        # The place is taken before the first await: a burst of requests must not all pass the check
        # while each waits for its kernel and folders (32 at once all started, with a cap of 8).
        self._starting += 1
        self._starting_by[owner] += 1
        try:
            return await self._start_run(owner, task, file_ids, files, thread)
        finally:
            self._starting -= 1
            self._starting_by[owner] -= 1
            if not self._starting_by[owner]:
                del self._starting_by[owner]

    def _admit(self, owner: str) -> None:
        """Raise ``ServiceError`` 429 saying why when ``owner`` may not start a run now: the server runs as many
        as it may, or this owner already runs its share (``ServerConfig.key_share``), so one key never takes
        every place. Checked before anything is saved: a refused request changes nothing."""
        share = self.config.key_share
        own = self.executor.running_for(owner) + self._starting_by[owner]
        if share < self.config.max_running and own >= share:  # said first: it is what this key can change
            raise ServiceError(
                f"this key has {own} runs running, the most one key runs at once on this server ({share} of "
                f"{self.config.max_running}, so other keys keep a place); retry when one ends",
                status=429,
            )
        running = self.executor.running + self._starting
        if running >= self.config.max_running:
            raise ServiceError(
                f"{running} runs are running, the most this server runs at once; retry later", status=429
            )

    async def _start_run(
        self, owner: str, task: str, file_ids: Sequence[str], files: list[FileRecord], thread: ThreadRecord
    ) -> RunRecord:
        runtime = await self.runtimes.of(thread)
        if runtime.busy:
            raise ServiceError(f"thread {thread.id} is running a run; wait for it or cancel it", status=409)
        await runtime.lock.acquire()
        run = RunRecord(
            id=new_id("run"), owner=owner, thread_id=thread.id, task=task, file_ids=list(file_ids), created_at=now()
        )
        try:  # the lease before the run is saved (an open run without one is an orphan), the workspace
            # before the kernel needs it
            async with self.leases.guard(thread.id):  # not while this replica's sweeper takes the thread over
                took = await self.leases.take(thread.id)
            if not took:
                raise ServiceError(f"thread {thread.id} is running a run on another replica; wait for it", status=409)
            await in_thread(self.store.prepare, thread.id, run.id)
            if await close_orphan(self.store, thread, running=self.executor.tasks):
                self.metrics.takeovers.inc()
        except BaseException:
            runtime.lock.release()
            raise
        if runtime.live and runtime.last_run != (thread.runs[-1] if thread.runs else None):
            await runtime.stop_kernel()  # another replica ran this thread since: rebuild from the notebook
        runtime.last_run = run.id
        self.store.save_run(run)
        thread.runs, thread.status, thread.updated_at = [*thread.runs, run.id], "running", now()
        thread.protocol = thread.protocol or runtime.agent.config.protocol.name  # the one its agent speaks, not null
        self.store.save_thread(thread)
        notice = demo_notice(task, [f.filename for f in files]) if self.config.demo else None
        self.executor.start(run, thread, runtime, files, notice)
        if self.store.shared:  # committed before the client hears of it: it may ask another replica next
            await self.store.flush()
        log.info("run %s started in thread %s", run.id, thread.id, extra={"run_id": run.id, "thread_id": thread.id})
        return run

    async def delete_thread(self, owner: str, thread_id: str) -> None:
        """Remove a thread: its kernel, workspace, notebook, runs and their events. Raises ``ServiceError``
        404 for an unknown thread, 409 while it runs."""
        thread = self.thread(owner, thread_id)
        await self.runtimes.remove(thread_id)
        self.store.delete_thread(thread)

    async def cancel(self, owner: str, run_id: str) -> RunRecord:
        """Cancel a run: the running code is interrupted, the notebook saved. Returns the record once
        the run has ended. Raises ``ServiceError`` 404 for an unknown run."""
        self.run(owner, run_id)
        await self.executor.cancel(run_id)
        return self.run(owner, run_id)

    async def events(self, owner: str, run_id: str, after: int = 0) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
        """The run's events after id ``after``: the recorded ones, then live ones until ``finished``.
        A run executing on this replica is followed in memory; any other from the database. When the
        owner's key is revoked meanwhile, ``KEY_REVOKED`` (without an id) ends them."""
        self.run(owner, run_id)
        followed = self._follow(run_id, after)
        if self._revocations is None:
            async for item in followed:
                yield item
            return
        async for item in self._revocations.stream(owner, followed, (None, KEY_REVOKED), _is_last):
            yield item

    async def _follow(self, run_id: str, after: int) -> AsyncIterator[tuple[int | None, dict[str, Any]]]:
        run_log = self.executor.logs.get(run_id)
        if run_log is not None:
            async for item in run_log.follow(after):
                yield item
            return
        async for item in follow_stored(self.store, run_id, after):
            yield item

    async def fresh(self, *, files: Sequence[str] = (), threads: Sequence[str] = (), runs: Sequence[str] = ()) -> None:
        """Read these records from the database, where another replica may have changed them."""
        if not self.store.shared:
            return
        for name, ids in (("files", files), ("threads", threads), ("runs", runs)):
            for record_id in ids:
                await self.store.refresh(name, record_id)

    async def ready(self) -> str | None:
        """None when this replica can serve (its database answers, at the current migration, and it is
        not draining); else why not."""
        if self.draining:
            return "draining: this server is shutting down"
        return await self.store.ready()

    def _state(self) -> dict[str, Any]:
        """The current values the metrics report (read at each scrape)."""
        runs = dict.fromkeys(("running", "completed", "failed", "cancelled", "interrupted"), 0)
        for record in self.store.runs():
            runs[record.status] = runs.get(record.status, 0) + 1
        return {
            "runs": runs,
            "live_kernels": self.runtimes.live,
            "running": self.executor.running,
            "starting": self._starting,
            "pending_writes": self.store.pending,
        }

    # ----------------------------------------------------------------- internals
    def _running_owners(self) -> set[str]:
        """The owners of the runs executing here."""
        runs = (self.store.run(run_id) for run_id, task in self.executor.tasks.items() if not task.done())
        return {run.owner for run in runs if run is not None}

    async def _cancel_owned(self, owner: str) -> None:
        """Cancel ``owner``'s runs executing here (a revoked key's): each ends ``cancelled``, its rounds kept."""
        owned = [
            run_id for run_id in list(self.executor.tasks) if (run := self.store.run(run_id)) and run.owner == owner
        ]
        for run_id in owned:
            log.info("run %s cancelled: its key was revoked", run_id, extra={"run_id": run_id})
        await asyncio.gather(*(self.executor.cancel(run_id) for run_id in owned))

    def _sources(self, names: Sequence[str] | None) -> list[str]:
        """``names`` (a run's ``sources``), each one the server offers, in order, once. Raises ``ServiceError``
        422 naming one it does not offer (its operator's ``--source``s are the only ones)."""
        offered = self.config.source_specs()
        chosen = list(dict.fromkeys(names or ()))
        for name in chosen:
            if name not in offered:
                words = ", ".join(sorted(offered)) if offered else "none"
                raise ServiceError(f"this server has no data source named {name!r} (its sources: {words})", status=422)
        return chosen

    def _new_thread(self, owner: str, task: str, protocol: str | None, sources: list[str]) -> ThreadRecord:
        """A new thread's record, saved only when its first run starts."""
        return ThreadRecord(
            id=new_id("thread"),
            owner=owner,
            task=task,
            protocol=protocol,
            sources=sources,
            created_at=now(),
            updated_at=now(),
        )


def _owned(record: R | None, owner: str, message: str) -> R:
    if record is None or record.owner != owner:
        raise ServiceError(message, status=404)
    return record


def safe_name(filename: str) -> str:
    """The last path component of an upload's name, without control characters or a leading dot.
    Raises ``ServiceError`` 422 when nothing usable is left."""
    name = filename.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if c.isprintable()).strip().lstrip(".")
    if not name or len(name) > 200:
        raise ServiceError(f"unusable file name {filename!r}", status=422)
    return name


def demo_notice(task: str, filenames: Sequence[str]) -> str | None:
    """What a demo server's run must say before it starts when the user brought a task or files of
    their own (the scripted replies answer the bundled task on the bundled data, whatever was asked);
    None when the run is the demo's own. Raises nothing but a broken install's ``OSError``."""
    from ..demo import dataset_path, demo_task

    bundled = dataset_path().name
    own_files = [name for name in filenames if name != bundled]
    own_task = task.strip() != demo_task().strip()
    if not own_files and not own_task:
        return None
    ignored = " and ".join(
        part
        for part in (
            "your question" if own_task else "",
            f"your file{'s' if len(own_files) > 1 else ''} {', '.join(own_files)}" if own_files else "",
        )
        if part
    )
    text = (
        f"Demo server: this run ignores {ignored}. Its replies are scripted for the bundled {bundled} "
        "and the demo's own task, and no language model is asked."
    )
    if bundled not in filenames:
        text += f" The scripted code reads {bundled}, which this run was not given, so expect it to fail."
    return text


def _is_last(item: tuple[int | None, dict[str, Any]]) -> bool:
    """Whether a followed event is the run's last (``finished``)."""
    return item[1].get("event") == "finished"
