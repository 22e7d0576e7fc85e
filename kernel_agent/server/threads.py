"""A thread's live kernel and agent, and a run's event log in memory.

Owns ``ThreadRuntime`` (one ``AsyncAgent`` and one live kernel session per
thread, kept across runs so a follow-up sees every variable; the kernel is
built by the agent's own ``new_session``, so the sandbox and limits are those
of ``kernel-agent run``, or taken from the service's warm ``KernelPool``,
whose kernels are started with the same options; a thread with live sources has
them opened and brokered with its kernel, which is started given the broker's
socket (never a pooled one), and closed with it) and ``RunLog`` (the events of one run, committed to
the store as they come and handed to any number of SSE readers) and ``follow_stored`` (the
events of a run executing elsewhere, from the database). No HTTP here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agent.run.agent import AsyncAgent
from ..agent.run.live import LiveSources
from ..errors import KernelError
from ..events import Event, ExecutionFinished
from ..kernel.pool import KernelPool
from ..kernel.session import AsyncKernelSession
from ..model import llm as _llm  # noqa: F401 - imported with the app, not on the loop by the first thread
from ..result import fold_traceback, strip_ansi

if TYPE_CHECKING:
    from ..sources.base import SourceSpec
    from .leases import Leases
    from .store import Store

__all__ = ["RunLog", "ThreadRuntime", "event_dict", "follow_stored"]

log = logging.getLogger(__name__)


def event_dict(event: Event) -> dict[str, Any]:
    """``event.to_dict()``, with an execution's nbformat outputs added (the page draws them; an
    error's gets ``folded``, its traceback as ``result.fold_traceback`` folds it for people) and
    ``text``, the output as the model was shown it (the chat transcript's ``<Execute>`` block)."""
    out = event.to_dict()
    if isinstance(event, ExecutionFinished):
        out["result"]["outputs"] = [_wire_output(o) for o in event.result.outputs]
        out["result"]["text"] = event.result.to_llm_text()
    return out


def _wire_output(output: dict[str, Any]) -> dict[str, Any]:
    wire = dict(output)
    if wire.get("output_type") == "error":
        wire["folded"] = fold_traceback([strip_ansi(line) for line in wire.get("traceback", [])]).to_dict()
    return wire


class _ThreadKernels:
    """The agent's kernel factory for a thread: its one kernel (``_Lease``), and its open live sources
    (``live_sources``, read by the agent: the kernel has their socket; the thread closes them)."""

    kernels_apart = False

    def __init__(self, runtime: ThreadRuntime) -> None:
        self.runtime = runtime

    @property
    def live_sources(self) -> LiveSources | None:
        return self.runtime.live_sources

    def __call__(self, _workspace: Path, /) -> _Lease:
        return _Lease(self.runtime)


class _Lease:
    """What the agent's ``async with session_factory(workspace)`` gets: the thread's kernel,
    started on first use and left running on exit (the thread owns it, not the run)."""

    def __init__(self, runtime: ThreadRuntime) -> None:
        self.runtime = runtime

    async def __aenter__(self) -> AsyncKernelSession:
        return await self.runtime.session()

    async def __aexit__(self, *exc: object) -> None:
        self.runtime.touch()


class ThreadRuntime:
    """One thread's agent and live kernel. ``lock`` lets one run at a time use them.
    With a ``pool``, the kernel is a pooled one bound to the workspace, held until ``stop_kernel``.
    With ``sources`` (the operator's, resolved from the thread's names), ``open_sources`` opens them and
    their broker, the kernel is started with its socket (not from the pool), and ``stop_kernel`` closes them
    after the kernel: every run of the thread queries through the same broker, one per thread."""

    def __init__(
        self,
        thread_id: str,
        workspace: Path,
        agent_options: dict[str, Any],
        pool: KernelPool | None = None,
        leases: Leases | None = None,
        sources: Sequence[SourceSpec] = (),
    ) -> None:
        self.thread_id = thread_id
        self.workspace = workspace
        self.sources = tuple(sources)
        self.live_sources: LiveSources | None = None  # open while the thread's kernel lives (or is starting)
        self.pool = pool if not self.sources else None  # a pooled kernel was started without the socket
        # On a gateway, the thread's kernel is recorded with its owner, so a replica taking the thread
        # over adopts it (every variable survives) instead of rebuilding.
        self.leases = leases if agent_options.get("gateway_url") and pool is None else None
        self._lease = contextlib.AsyncExitStack()
        self.agent = AsyncAgent(**agent_options, session_factory=_ThreadKernels(self))
        self.lock = asyncio.Lock()
        self.last_used = time.monotonic()
        self.last_run: str | None = None  # the last run this replica executed in the thread
        self._session: AsyncKernelSession | None = None

    def __repr__(self) -> str:
        return f"<ThreadRuntime {self.thread_id} live={self.live}>"

    @property
    def live(self) -> bool:
        """True while the thread holds a started kernel."""
        return self._session is not None

    @property
    def busy(self) -> bool:
        return self.lock.locked()

    def touch(self) -> None:
        self.last_used = time.monotonic()

    async def open_sources(self) -> LiveSources | None:
        """The thread's live sources, opened with their broker now when they are not (None without sources).
        Raises ``SourceError`` naming one that cannot be opened (nothing left open)."""
        if self.sources and self.live_sources is None:
            live = LiveSources(self.sources)
            await live.open()
            self.live_sources = live
        return self.live_sources

    async def session(self) -> AsyncKernelSession:
        """The live kernel, started now when there is none (or it died: a new one gets the same sources).
        Raises ``KernelStartError``, ``SourceError``."""
        if self._session is not None and not await self._session.is_alive():
            await self._stop_session()
        if self._session is None:
            self._session = await self._start()
        self.touch()
        return self._session

    async def _start(self) -> AsyncKernelSession:
        live = await self.open_sources()
        if live is not None:
            session = self.agent.new_session(self.workspace, sockets=live.kernel_sockets())
            await session.start()
            return session
        if self.pool is not None:
            # The pool's lease closes the kernel when it ends; the thread ends it in ``stop_kernel``.
            return await self._lease.enter_async_context(self.pool.acquire(self.workspace))
        session = self.agent.new_session(self.workspace)
        await session.start()
        if self.leases is not None:
            await self.leases.own_kernel(self.thread_id, _kernel_id(session))
        return session

    async def adopt(self) -> bool:
        """With no live kernel: take over the thread's recorded kernel on the gateway (its variables
        intact), when there is one and it still lives. True when adopted."""
        if self._session is not None or self.leases is None:
            return False
        kernel_id = await self.leases.kernel_of(self.thread_id)
        if kernel_id is None:
            return False
        session = self.agent.new_session(self.workspace, gateway_kernel_id=kernel_id, gateway_adopt=True)
        try:
            await session.start()
        except KernelError as exc:
            log.info(
                "thread %s: its kernel %s on the gateway is gone (%s): a new one is rebuilt",
                self.thread_id,
                kernel_id,
                exc,
                extra={"thread_id": self.thread_id},
            )
            await self.leases.forget_kernel(self.thread_id, kernel_id)
            return False
        await self.leases.own_kernel(self.thread_id, kernel_id)
        self._session = session
        log.info(
            "thread %s: adopted its kernel %s on the gateway",
            self.thread_id,
            kernel_id,
            extra={"thread_id": self.thread_id},
        )
        return True

    async def settle(self, attempts: int = 3, wait: float = 1.0) -> None:
        """After a cancel: make sure the kernel is idle. An interrupt that lands before the cell has
        started is lost (the code would run on unseen), so probe, interrupt again while the probe
        waits, and shut the kernel down when it never answers (a follow-up rebuilds it)."""
        if self._session is None:
            return
        for _attempt in range(attempts):
            try:
                await self._session.evaluate({}, timeout=wait)
                return
            except KernelError:
                with contextlib.suppress(KernelError):
                    await self._session.interrupt()
        log.warning("thread %s: the kernel ignored interrupts after a cancel; shutting it down", self.thread_id)
        await self.stop_kernel()

    async def stop_kernel(self) -> None:
        """Shut the kernel down, then close its live sources (the thread lives on: a follow-up rebuilds both).
        Idempotent."""
        try:
            await self._stop_session()
        finally:
            live, self.live_sources = self.live_sources, None
            if live is not None:
                await live.aclose()

    async def _stop_session(self) -> None:
        """Shut the kernel down, its sources left open (a new kernel may be given the same socket)."""
        session, self._session = self._session, None
        lease, self._lease = self._lease, contextlib.AsyncExitStack()
        try:
            await lease.aclose()
            if session is not None and self.leases is not None:  # adopted by another replica since: leave it
                kernel_id = _kernel_id(session)
                if await self.leases.owns_kernel(self.thread_id, kernel_id):
                    await self.leases.forget_kernel(self.thread_id, kernel_id)
                else:
                    getattr(session.provider, "disown", lambda: None)()
        finally:
            if session is not None:  # the only reference to it: close it even when cancelled
                await session.close()

    async def close(self) -> None:
        """Shut the kernel down and release the model client. Idempotent."""
        await self.stop_kernel()
        await self.agent.close()


class RunLog:
    """The events of one run: kept in memory, committed to the store as they come (each at its
    position, from 1), readable from any position by any number of followers until the run is over."""

    def __init__(
        self, store: Store, run_id: str, past: list[dict[str, Any]] | None = None, *, over: bool = False
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.events: list[dict[str, Any]] = list(past or [])
        self.over = over
        self.held: dict[str, Any] | None = None  # the agent's own ``finished``, sent once the run's records are final
        self._changed = asyncio.Condition()

    async def add(self, event: dict[str, Any]) -> None:
        """Record ``event`` (committed first, so a reader never sees what a restart would lose)."""
        await self.store.append_event(self.run_id, len(self.events) + 1, event)
        async with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    async def end(self) -> None:
        async with self._changed:
            self.over = True
            self._changed.notify_all()

    async def follow(self, after: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """``(id, event)`` from event ``after + 1`` on (ids count from 1), until the run is over."""
        position = after
        while True:
            async with self._changed:
                while position >= len(self.events) and not self.over:
                    await self._changed.wait()
                pending = self.events[position:]
                over = self.over
            for event in pending:
                position += 1
                yield position, event
            if over and position >= len(self.events):
                return


def _kernel_id(session: AsyncKernelSession) -> str:
    return str(getattr(session.provider, "kernel_id", ""))


async def follow_stored(store: Store, run_id: str, after: int = 0) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """A run's events as the database has them (a run executing on another replica, or over), woken by
    each commit (PostgreSQL) or polling, until its ``finished`` event, or until it has no more and its
    record says it is over."""
    position, over = after, False
    while True:
        events = await store.events(run_id, position)
        for event in events:
            position += 1
            yield position, event
            if event.get("event") == "finished":
                return
        if events:
            continue
        if over:  # over, and its closing event has not come after one more wait: it never will
            return
        await store.refresh("runs", run_id)
        record = store.run(run_id)
        # A run's records are final just before its ``finished`` event is written: wait once more for it.
        over = record is None or record.status not in ("queued", "running")
        await store.changed(run_id)
