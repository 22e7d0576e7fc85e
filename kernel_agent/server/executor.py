"""Runs executing on this replica: one task each, from the agent's first event to the run's last record.

Owns a run's execution once ``Service.start_run`` has let it in (its lease taken, its records saved):
the task that drives the agent's own event stream (``AsyncAgent.stream`` for a thread's first run,
``stream_resume`` for a follow-up; there is no second agent loop) into the run's ``RunLog``, keeps the
thread's lease renewed meanwhile, and closes the run honestly (completed, failed, cancelled, or
interrupted by a drain), records first, then the lease, then the closing event. A run whose lease
another replica took is stopped and left to that replica. No HTTP, no admission (caps, 409s).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from .._loop import in_thread
from ..errors import KernelAgentError
from ..events import AnswerReady, CodeReady, Notice, RoundStarted, RunFinished
from .leases import Leases
from .records import FileRecord, GeneratedFile, RunRecord, ThreadRecord
from .store import Store
from .takeover import finished_event, now
from .threads import RunLog, ThreadRuntime, event_dict

__all__ = ["Executor"]

log = logging.getLogger(__name__)


class Executor:
    """The runs executing here. ``leases`` and ``draining`` are read when a run needs them; ``replied``
    hears how long the model took to reply, each round."""

    def __init__(
        self,
        store: Store,
        leases: Callable[[], Leases],
        draining: Callable[[], bool],
        *,
        replied: Callable[[float], None],
    ) -> None:
        self.store = store
        self._replied = replied
        self._leases = leases
        self._draining = draining
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self._owners: dict[str, str] = {}  # run id -> its owner, for each task in ``tasks``
        self.logs: dict[str, RunLog] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self._lost: set[str] = set()  # runs whose lease another replica took: nothing more of them is written

    @property
    def running(self) -> int:
        return sum(1 for task in self.tasks.values() if not task.done())

    def running_for(self, owner: str) -> int:
        """Runs of ``owner`` executing here."""
        return sum(1 for run_id, task in self.tasks.items() if not task.done() and self._owners.get(run_id) == owner)

    def start(
        self,
        run: RunRecord,
        thread: ThreadRecord,
        runtime: ThreadRuntime,
        files: list[FileRecord],
        notice: str | None = None,
    ) -> None:
        """Execute ``run`` (saved, its lease and ``runtime.lock`` held) in a task of its own; ``notice``,
        when given, is the run's first event (a ``notice``: what the user must know before it starts)."""
        run_log = self.logs[run.id] = RunLog(self.store, run.id)
        self._owners[run.id] = run.owner
        task = self.tasks[run.id] = asyncio.create_task(self._execute(run, thread, runtime, files, run_log, notice))
        task.add_done_callback(lambda _task: self._never_started(run, thread, runtime, run_log))

    async def cancel(self, run_id: str) -> None:
        """Stop ``run_id`` if it executes here, and wait until it has ended."""
        task = self.tasks.get(run_id)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the runs executing here to finish."""
        running = [task for task in self.tasks.values() if not task.done()]
        if running and timeout > 0:
            await asyncio.wait(running, timeout=timeout)

    async def stop_all(self) -> None:
        """Cancel every run still executing here (each is closed as its cancel says) and wait."""
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)

    async def _execute(
        self,
        run: RunRecord,
        thread: ThreadRecord,
        runtime: ThreadRuntime,
        files: list[FileRecord],
        run_log: RunLog,
        notice: str | None,
    ) -> None:
        renewing = asyncio.create_task(self._leases().keep(thread.id, lambda: self._lost_lease(run)))
        try:
            if notice is not None:
                await run_log.add(event_dict(Notice(message=notice)))
            await self._drive(run, thread, runtime, files, run_log)
        except asyncio.CancelledError:
            run.status, run.stop_reason, run.error = "cancelled", "cancelled", "cancelled"
            if self._draining():  # not the user's cancel: the server stopped it
                run.status, run.stop_reason = "interrupted", None
                run.error = "the server shut down before this run finished (its drain grace period ran out)"
            await runtime.settle()
        except KernelAgentError as exc:  # bad data file, kernel would not start: the machinery, not the code
            run.status, run.error = "failed", f"{type(exc).__name__}: {exc}"
            await run_log.add({"event": "error", "message": str(exc), "error_type": type(exc).__name__, "round": None})
        except Exception as exc:  # a bug must not leave the run open forever: record it, log it
            log.exception("run %s failed", run.id, extra={"run_id": run.id, "thread_id": thread.id})
            run.status, run.error = "failed", f"internal error: {type(exc).__name__}"
        finally:
            renewing.cancel()
            await self._finish(run, thread, runtime, run_log)

    def _lost_lease(self, run: RunRecord) -> None:
        """Another replica took the lease of ``run``'s thread (this one renewed too late): stop the run,
        and write nothing more of it."""
        log.error(
            "run %s lost its lease to another replica: stopping it",
            run.id,
            extra={"run_id": run.id, "thread_id": run.thread_id},
        )
        self._lost.add(run.id)
        task = self.tasks.get(run.id)
        if task is not None:
            task.cancel()

    def _thread_files(self, thread: ThreadRecord, latest: list[Path]) -> list[Path]:
        """The uploads of every run of ``thread`` still on the server, one per file name (the latest wins)."""
        by_name: dict[str, Path] = {}
        for run in (self.store.run(i) for i in thread.runs):
            for file_id in run.file_ids if run is not None else ():
                record = self.store.file(file_id)
                if record is not None:
                    by_name[record.filename] = self.store.file_content(record)
        by_name.update({path.name: path for path in latest})
        return list(by_name.values())

    async def _drive(
        self, run: RunRecord, thread: ThreadRecord, runtime: ThreadRuntime, files: list[FileRecord], run_log: RunLog
    ) -> None:
        notebook = self.store.notebook(runtime.thread_id)  # beside the workspace: out of the kernel's reach
        paths = [self.store.file_content(f) for f in files]
        agent = runtime.agent
        await runtime.open_sources()  # before the agent reads them (its prompt, its setup cell's sql())
        if not await in_thread(notebook.exists):
            stream = agent.stream(run.task, paths, runtime.workspace, notebook)
        else:
            task = run.task
            if paths:
                task += "\n\nNew data files in the working directory: " + ", ".join(p.name for p in paths)
            if not runtime.live:  # the thread's kernel may live on the gateway still (its replica died)
                await runtime.adopt()
            # Every file of the thread from our own uploads, never read back from the live kernel's folder.
            stream = agent.stream_resume(
                notebook,
                task,
                workspace=runtime.workspace,
                restore=not runtime.live,
                data=self._thread_files(thread, paths),
            )
        # A cancel can land here between two events (while one is written): closing the stream then
        # stops the running code and saves the notebook, as a cancel inside the agent does.
        asked: float | None = None
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                data = event_dict(event)
                if isinstance(event, RoundStarted):
                    asked = time.monotonic()
                elif isinstance(event, CodeReady | AnswerReady) and asked is not None:
                    self._replied(time.monotonic() - asked)
                    asked = None
                if isinstance(event, RunFinished):  # sent by _finish, once the records are final and the thread free
                    finished, run_log.held = data["run"], data
                    run.answer, run.stop_reason, run.error = (
                        finished["answer"],
                        finished["stop_reason"],
                        finished["error"],
                    )
                    run.status = finished["status"] = (
                        "completed" if finished["stop_reason"] != "llm_error" else "failed"
                    )
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
            self._owners.pop(run.id, None)
            runtime.lock.release()
            await runtime.stop_kernel()
            run_log.over = True
            await run_log.end()
            self.logs.pop(run.id, None)
            return
        run.finished_at = now()
        self.store.save_run(run)
        log.info(
            "run %s %s after %d rounds",
            run.id,
            run.status,
            run.rounds,
            extra={"run_id": run.id, "thread_id": thread.id},
        )
        self._set_thread_status(thread.id, run.status)
        self.tasks.pop(run.id, None)
        self._owners.pop(run.id, None)
        try:
            await self.store.flush()
            await self._leases().release(thread.id)
        except (SQLAlchemyError, OSError) as exc:  # the lease expires by itself
            log.warning(
                "run %s: cannot commit its end or free its lease: %s",
                run.id,
                type(exc).__name__,
                extra={"run_id": run.id, "thread_id": thread.id},
            )
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
