"""The service's engine: files, threads and runs of many owners on one ``Store``.

Owns the run lifecycle (start, follow, cancel, finish), the thread runtimes
(live kernels, idle shutdown, the live cap), the concurrency cap and recovery
after a crash (runs that were in flight are marked ``interrupted``), and the
warm ``KernelPool`` new threads take their kernels from when ``pool_size`` is set. Every
run is the agent's own event stream (``AsyncAgent.stream`` for a thread's
first run, ``stream_resume`` for a follow-up); there is no second agent loop.
Raises ``ServiceError`` (with an HTTP status) for requests it refuses; the
HTTP layer only translates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from .._loop import in_thread
from ..agent.config import AgentConfig
from ..errors import ConfigError, KernelAgentError, ServiceError
from ..kernel.pool import KernelPool
from .config import NO_KEY_HELP, ServerConfig
from .keys import SQLITE_TTL_S, Keys
from .leases import Leases
from .metrics import Metrics
from .records import FileRecord, GeneratedFile, RunRecord, ThreadRecord
from .store import Store, new_id
from .takeover import Sweeper, close_orphan, finished_event, interrupt, now
from .threads import RunLog, ThreadRuntime, event_dict, follow_stored

__all__ = ["Service"]

log = logging.getLogger(__name__)

_OPEN = ("queued", "running")
R = TypeVar("R", FileRecord, ThreadRecord, RunRecord)


class Service:
    """Everything the HTTP layer asks for. Use as ``async with Service(config):``."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.store = Store(config.data_dir, config.database)
        self.runtimes: dict[str, ThreadRuntime] = {}
        self.logs: dict[str, RunLog] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._closing: set[asyncio.Future[None]] = set()
        self._starting = 0  # runs let in whose task is not made yet: they count toward max_running
        self.pool: KernelPool | None = None
        self.metrics = Metrics(self._state)
        self.replica = new_id("replica")
        self._leases: Leases | None = None
        self._keys: Keys | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._lost: set[str] = set()  # runs whose lease another replica took: nothing more of them is written
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
            sweeper = Sweeper(self.store, self.leases, self.metrics, busy=self._runs_here)
            self._sweeper = asyncio.create_task(sweeper.run())
        if self.config.pool_size:
            self.pool = await pool_for(self.config).start()
        self._reaper = asyncio.create_task(self._reap_idle())
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
            log.info("draining: %d runs in flight get %.0f s to finish", len(self.tasks), self.config.drain_grace)

    @property
    def draining(self) -> bool:
        return self._drain_until is not None

    async def close(self) -> None:
        """Let the runs in flight finish until the drain deadline, then cancel the rest (marked
        ``interrupted``; their notebooks are saved), shut every kernel down. Idempotent."""
        self.begin_drain()
        running = [task for task in self.tasks.values() if not task.done()]
        left = (self._drain_until or 0) - time.monotonic()
        if running and left > 0:
            await asyncio.wait(running, timeout=left)
        for background in (self._reaper, self._sweeper):
            if background is not None:
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background
        self._reaper = self._sweeper = None
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)
        runtimes, self.runtimes = list(self.runtimes.values()), {}
        for runtime in runtimes:
            await runtime.close()
        if self.pool is not None:
            await self.pool.close()
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

    def _runs_here(self, thread_id: str) -> bool:
        runtime = self.runtimes.get(thread_id)
        return runtime is not None and runtime.busy

    # ----------------------------------------------------------------- files
    async def add_file(self, owner: str, filename: str, temp: Path, size: int, purpose: str) -> FileRecord:
        """Keep an upload (``temp`` is moved). Raises ``ServiceError`` 422 for a bad name or an empty file
        (no analysis can read one: refused now, not after a run starts)."""
        if size == 0:
            raise ServiceError(f"the file {filename!r} is empty", status=422)
        record = FileRecord(id=new_id("file"), owner=owner, filename=safe_name(filename), bytes=size,
                            purpose=purpose, created_at=int(time.time()))
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

    async def start_run(self, owner: str, task: str, file_ids: Sequence[str] = (), thread_id: str | None = None,
                        protocol: str | None = None) -> RunRecord:
        """Start a run (a follow-up in ``thread_id``'s live kernel when given); return its record.

        Raises ``ServiceError``: 404 unknown file or thread, 409 the thread is busy, 422 an empty
        task, 429 the server runs as many runs as it may.
        """
        if not task.strip():
            raise ServiceError("the task is empty", status=422)
        if self.config.demo and protocol not in (None, "tags"):
            raise ServiceError("this demo server plays scripted replies written for the tags protocol", status=422)
        if self.draining:
            raise ServiceError("this server is shutting down and takes no new run; retry (another replica will)",
                               status=503)
        await self.fresh(files=file_ids, threads=[thread_id] if thread_id else ())
        files = [self.file(owner, f) for f in file_ids]
        thread = self.thread(owner, thread_id) if thread_id else self._new_thread(owner, task, protocol)
        running = sum(1 for t in self.tasks.values() if not t.done()) + self._starting
        if running >= self.config.max_running:  # before anything is saved: a refused request changes nothing
            raise ServiceError(f"{running} runs are running, the most this server runs at once; retry later",
                               status=429)
        # The place is taken before the first await: a burst of requests must not all pass the check
        # while each waits for its kernel and folders (32 at once all started, with a cap of 8).
        self._starting += 1
        try:
            return await self._start_run(owner, task, file_ids, files, thread)
        finally:
            self._starting -= 1

    async def _start_run(self, owner: str, task: str, file_ids: Sequence[str], files: list[FileRecord],
                         thread: ThreadRecord) -> RunRecord:
        runtime = await self._runtime(thread)
        if runtime.busy:
            raise ServiceError(f"thread {thread.id} is running a run; wait for it or cancel it", status=409)
        await runtime.lock.acquire()
        run = RunRecord(id=new_id("run"), owner=owner, thread_id=thread.id, task=task, file_ids=list(file_ids),
                        created_at=now())
        try:  # the lease before the run is saved (an open run without one is an orphan), the workspace
            # before the kernel needs it
            if not await self.leases.take(thread.id):
                raise ServiceError(f"thread {thread.id} is running a run on another replica; wait for it",
                                   status=409)
            await asyncio.to_thread(self.store.prepare, thread.id, run.id)
            if await close_orphan(self.store, thread, running=self.tasks):
                self.metrics.takeovers.inc()
        except BaseException:
            runtime.lock.release()
            raise
        if runtime.live and runtime.last_run != (thread.runs[-1] if thread.runs else None):
            await runtime.stop_kernel()  # another replica ran this thread since: rebuild from the notebook
        runtime.last_run = run.id
        self.store.save_run(run)
        thread.runs, thread.status, thread.updated_at = [*thread.runs, run.id], "running", now()
        thread.protocol = thread.protocol or runtime.agent.config.protocol  # the one its agent speaks, not null
        self.store.save_thread(thread)
        run_log = self.logs[run.id] = RunLog(self.store, run.id)
        task = self.tasks[run.id] = asyncio.create_task(self._execute(run, thread, runtime, files, run_log))
        task.add_done_callback(lambda _task: self._never_started(run, thread, runtime, run_log))
        if self.store.shared:  # committed before the client hears of it: it may ask another replica next
            await self.store.flush()
        log.info("run %s started in thread %s", run.id, thread.id, extra={"run_id": run.id, "thread_id": thread.id})
        return run

    async def delete_thread(self, owner: str, thread_id: str) -> None:
        """Remove a thread: its kernel, workspace, notebook, runs and their events. Raises ``ServiceError``
        404 for an unknown thread, 409 while it runs."""
        thread = self.thread(owner, thread_id)
        runtime = self.runtimes.get(thread_id)
        if runtime is not None:
            if runtime.busy:
                raise ServiceError(f"thread {thread_id} is running a run; cancel it first", status=409)
            del self.runtimes[thread_id]
            await runtime.close()
        self.store.delete_thread(thread)

    async def cancel(self, owner: str, run_id: str) -> RunRecord:
        """Cancel a run: the running code is interrupted, the notebook saved. Returns the record once
        the run has ended. Raises ``ServiceError`` 404 for an unknown run."""
        self.run(owner, run_id)
        task = self.tasks.get(run_id)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return self.run(owner, run_id)

    async def events(self, owner: str, run_id: str, after: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """The run's events after id ``after``: the recorded ones, then live ones until ``finished``.
        A run executing on this replica is followed in memory; any other from the database."""
        self.run(owner, run_id)
        run_log = self.logs.get(run_id)
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
        return {"runs": runs, "live_kernels": sum(1 for r in self.runtimes.values() if r.live),
                "running": sum(1 for t in self.tasks.values() if not t.done()), "pending_writes": self.store.pending}

    # ----------------------------------------------------------------- internals
    def _new_thread(self, owner: str, task: str, protocol: str | None) -> ThreadRecord:
        """A new thread's record, saved only when its first run starts."""
        return ThreadRecord(id=new_id("thread"), owner=owner, task=task, protocol=protocol, created_at=now(),
                            updated_at=now())

    async def _runtime(self, thread: ThreadRecord) -> ThreadRuntime:
        runtime = self.runtimes.get(thread.id)
        if runtime is None:
            options = dict(self.config.agent)
            if thread.protocol:
                options["protocol"] = thread.protocol
            if self.config.demo:  # a script plays in order: each thread its own
                from ..demo import TYPING_DELAY_S, demo_model

                options["chat_model"] = demo_model(delay=TYPING_DELAY_S)
            try:
                runtime = ThreadRuntime(thread.id, self.store.workspace(thread.id), options, self.pool, self.leases)
            except KernelAgentError as exc:
                raise ServiceError(str(exc), status=422) from None
            self.runtimes[thread.id] = runtime
        await self._make_room(keep=runtime)
        return runtime

    async def _make_room(self, keep: ThreadRuntime) -> None:
        """Shut the idlest kernels down while more than ``max_threads_live`` would be alive."""
        live = [r for r in self.runtimes.values() if r.live and r is not keep and not r.busy]
        excess = len(live) + 1 - self.config.max_threads_live
        for runtime in sorted(live, key=lambda r: r.last_used)[: max(excess, 0)]:
            await runtime.stop_kernel()

    async def _reap_idle(self) -> None:
        period = min(self.config.idle_ttl / 2, 30.0)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.config.idle_ttl
            for runtime in list(self.runtimes.values()):
                if runtime.live and not runtime.busy and runtime.last_used < cutoff:
                    log.info("thread %s idle: shutting its kernel down", runtime.thread_id,
                             extra={"thread_id": runtime.thread_id})
                    # A shutdown may cancel this mid-stop: the session's close finishes its clean-up
                    # first (AsyncKernelSession.close), and close() awaits this task.
                    await runtime.stop_kernel()

    async def _execute(self, run: RunRecord, thread: ThreadRecord, runtime: ThreadRuntime, files: list[FileRecord],
                       run_log: RunLog) -> None:
        renewing = asyncio.create_task(self.leases.keep(thread.id, lambda: self._lost_lease(run)))
        try:
            await self._drive(run, thread, runtime, files, run_log)
        except asyncio.CancelledError:
            run.status, run.stop_reason, run.error = "cancelled", "cancelled", "cancelled"
            if self.draining:  # not the user's cancel: the server stopped it
                run.status, run.stop_reason = "interrupted", None
                run.error = "the server shut down before this run finished (its drain grace period ran out)"
            await runtime.settle()
        except KernelAgentError as exc:  # bad data file, kernel would not start: the machinery, not the code
            run.status, run.error = "failed", f"{type(exc).__name__}: {exc}"
            await run_log.add({"event": "error", "message": str(exc), "error_type": type(exc).__name__,
                               "round": None})
        except Exception as exc:  # a bug must not leave the run open forever: record it, log it
            log.exception("run %s failed", run.id, extra={"run_id": run.id, "thread_id": thread.id})
            run.status, run.error = "failed", f"internal error: {type(exc).__name__}"
        finally:
            renewing.cancel()
            await self._finish(run, thread, runtime, run_log)

    def _lost_lease(self, run: RunRecord) -> None:
        """Another replica took the lease of ``run``'s thread (this one renewed too late): stop the run,
        and write nothing more of it."""
        log.error("run %s lost its lease to another replica: stopping it", run.id,
                  extra={"run_id": run.id, "thread_id": run.thread_id})
        self._lost.add(run.id)
        task = self.tasks.get(run.id)
        if task is not None:
            task.cancel()

    def _thread_files(self, thread: ThreadRecord, latest: list[Path]) -> list[Path]:
        """The uploads of every run of ``thread`` still on the server, one per file name (the latest wins)."""
        by_name: dict[str, Path] = {}
        for run in self.thread_runs(thread):
            for file_id in run.file_ids:
                record = self.store.file(file_id)
                if record is not None:
                    by_name[record.filename] = self.store.file_content(record)
        by_name.update({path.name: path for path in latest})
        return list(by_name.values())

    async def _drive(self, run: RunRecord, thread: ThreadRecord, runtime: ThreadRuntime, files: list[FileRecord],
                     run_log: RunLog) -> None:
        notebook = self.store.notebook(runtime.thread_id)  # beside the workspace: out of the kernel's reach
        paths = [self.store.file_content(f) for f in files]
        agent = runtime.agent
        if not await asyncio.to_thread(notebook.exists):
            stream = agent.stream(run.task, paths, runtime.workspace, notebook)
        else:
            task = run.task
            if paths:
                task += "\n\nNew data files in the working directory: " + ", ".join(p.name for p in paths)
            if not runtime.live:  # the thread's kernel may live on the gateway still (its replica died)
                await runtime.adopt()
            # Every file of the thread from our own uploads, never read back from the live kernel's folder.
            stream = agent.stream_resume(notebook, task, workspace=runtime.workspace, restore=not runtime.live,
                                         data=self._thread_files(thread, paths))
        # A cancel can land here between two events (while one is written): closing the stream then
        # stops the running code and saves the notebook, as a cancel inside the agent does.
        asked: float | None = None
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                data = event_dict(event)
                if data["event"] == "round_started":
                    asked = time.monotonic()
                elif data["event"] in ("code_ready", "answer") and asked is not None:
                    self.metrics.model_replied(time.monotonic() - asked)
                    asked = None
                if data["event"] == "finished":  # sent by _finish, once the records are final and the thread free
                    finished, run_log.held = data["run"], data
                    run.answer, run.stop_reason, run.error = finished["answer"], finished["stop_reason"], finished["error"]
                    run.status = finished["status"] = "completed" if finished["stop_reason"] != "llm_error" else "failed"
                    continue
                await run_log.add(data)
                if _track(run, data):
                    self.store.save_run(run)

    async def _finish(self, run: RunRecord, thread: ThreadRecord, runtime: ThreadRuntime, run_log: RunLog) -> None:
        # Records first (committed), then the lease and the thread are free, then the closing event: a
        # client that sees ``finished`` and asks a follow-up at once, of any replica, finds the thread
        # free and its records final. A run whose lease was taken is another replica's to close.
        if run.id in self._lost:
            self._lost.discard(run.id)
            self.tasks.pop(run.id, None)
            runtime.lock.release()
            await runtime.stop_kernel()
            run_log.over = True
            await run_log.end()
            self.logs.pop(run.id, None)
            return
        run.finished_at = now()
        self.store.save_run(run)
        log.info("run %s %s after %d rounds", run.id, run.status, run.rounds,
                 extra={"run_id": run.id, "thread_id": thread.id})
        self._set_thread_status(thread.id, run.status)
        self.tasks.pop(run.id, None)
        try:
            await self.store.flush()
            await self.leases.release(thread.id)
        except (SQLAlchemyError, OSError) as exc:  # the lease expires by itself
            log.warning("run %s: cannot commit its end or free its lease: %s", run.id, type(exc).__name__,
                        extra={"run_id": run.id, "thread_id": thread.id})
        runtime.touch()
        runtime.lock.release()
        if not run_log.events or run_log.events[-1].get("event") != "finished":
            await run_log.add(run_log.held or finished_event(run, run_log.events))
        await run_log.end()
        self.logs.pop(run.id, None)

    def _never_started(self, run: RunRecord, thread: ThreadRecord, runtime: ThreadRuntime, run_log: RunLog) -> None:
        """A task cancelled before its first step never runs its ``finally``: close the run here."""
        if run.id in self.tasks:  # ``_finish`` removes it
            run.status, run.stop_reason, run.error = "cancelled", "cancelled", "cancelled before it started"
            closing = asyncio.ensure_future(self._finish(run, thread, runtime, run_log))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    def _set_thread_status(self, thread_id: str, status: str) -> None:
        thread = self.store.thread(thread_id)
        if thread is not None:
            thread.status, thread.updated_at = status, now()
            self.store.save_thread(thread)


def pool_for(config: ServerConfig) -> KernelPool:
    """The warm pool for ``config`` (not started): kernels started as ``AsyncAgent.new_session`` starts
    them (the same sandbox and limits, or the same gateway), at most ``max_threads_live`` alive at once.
    Raises ``ConfigError`` for bad agent options."""
    seams = ("chat_model", "session_factory", "session_options", "model_options")
    agent = AgentConfig.resolve(**{k: v for k, v in config.agent.items() if k not in seams})
    options = {**agent.kernel_options(), **config.agent.get("session_options", {})}
    return KernelPool(config.pool_size, max_kernels=config.max_threads_live, **options)


def _track(run: RunRecord, event: dict[str, Any]) -> bool:
    """Keep the run record's progress (model, rounds, generated files) up to date; True when it
    changed in a way worth saving now."""
    if event["event"] == "run_started":
        run.model = event["model"]
        return True
    if event["event"] == "round_finished":
        run.rounds += 1
        return True
    if event["event"] == "execution_finished":
        known = {f.name for f in run.files}
        for artifact in event.get("artifacts", []):
            if artifact["path"] not in known:
                run.files.append(GeneratedFile(name=artifact["path"], size=artifact["size"]))
    return False


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
