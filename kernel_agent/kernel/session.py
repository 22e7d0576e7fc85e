"""One live Jupyter kernel per session: ``AsyncKernelSession``.

Owns the kernel's lifecycle (start, attach, restart, shutdown) and the
execute loop: send one request, fold its iopub messages with
``OutputCollector``, enforce the timeout ladder (interrupt, grace, restart)
and detect kernel death. It *has* a jupyter_client manager and client; it
does not subclass them. A session we started we shut down; one we attached
to (``connect``) we never kill.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any

from jupyter_client import AsyncKernelClient, AsyncKernelManager

from ..errors import KernelError, KernelStartError, SandboxUnavailableError, SessionClosedError
from .environment import kernel_environment
from .kernelspec import KERNEL_NAME, kernel_spec_manager
from .figure_cap import figure_cap_env
from .limit_notes import limit_note
from .limits import Confinement, Limits, pid_alive
from .outputs import OutputCaps, OutputCollector
from .result import ExecutionResult

__all__ = ["AsyncKernelSession", "SessionState", "sweep_stale_runtime_dirs"]

log = logging.getLogger(__name__)

_RUNTIME_PREFIX = "kernel-agent-"
_OWNER_FILE = "owner.pid"
_POLL_S = 0.2  # how often a silent kernel is checked for death
_REPLY_WAIT_S = 5.0


def sweep_stale_runtime_dirs(root: str | None = None) -> list[Path]:
    """Remove runtime dirs (connection file, kernel log) left by owners that were killed.

    A dir is stale when the process that made it no longer exists. Its kernel
    has already exited by then (ipykernel's parent poller). Returns what was removed.
    """
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{_RUNTIME_PREFIX}*"):
        try:
            owner = int((folder / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if owner != os.getpid() and not pid_alive(owner):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class SessionState(Enum):
    NEW = "new"
    READY = "ready"
    CLOSED = "closed"


class AsyncKernelSession:
    """A live kernel: ``execute`` code in it, state persists between calls.

    ``workspace`` is the kernel's cwd (created if missing; a private temp dir
    removed on close when None). ``env`` adds variables; the agent's secrets
    are never passed (``allow_env`` names exceptions). ``timeout`` is the
    default per-execute deadline. ``rebuild=True`` re-runs the successful
    cells after a restart that lost state. ``limits`` confine the kernel.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        kernel_name: str = KERNEL_NAME,
        env: dict[str, str] | None = None,
        allow_env: tuple[str, ...] = (),
        timeout: float | None = None,
        startup_timeout: float = 60.0,
        interrupt_grace: float = 1.0,
        caps: OutputCaps | None = None,
        limits: Limits | None = None,
        rebuild: bool = False,
    ) -> None:
        self._owns_workspace = workspace is None
        self.workspace = Path(workspace) if workspace is not None else None
        self.kernel_name = kernel_name
        self.timeout = timeout
        self.startup_timeout = startup_timeout
        self.interrupt_grace = interrupt_grace
        self.caps = caps or OutputCaps()
        self.limits = limits or Limits()
        self.rebuild = rebuild
        self._env_extra = dict(env or {})
        self._allow_env = allow_env
        self.manager: AsyncKernelManager | None = None
        self.client: AsyncKernelClient | None = None
        self.owns_kernel = True
        self.state = SessionState.NEW
        self.kernel_info: dict[str, Any] = {}
        self._runtime_dir: Path | None = None
        self._stderr_file: Any = None
        self._confinement: Confinement | None = None
        self._lock = asyncio.Lock()
        self._history: list[str] = []  # successful code since the last state loss
        self._history_before_loss: list[str] = []

    def __repr__(self) -> str:
        return f"<AsyncKernelSession [{self.state.value}] {self.kernel_name} cwd={self.workspace}>"

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    async def connect(cls, connection_file: str | os.PathLike[str], **kwargs: Any) -> "AsyncKernelSession":
        """Attach to a running kernel by its connection file; ``close()`` never kills it."""
        session = cls(**kwargs)
        session.owns_kernel = False
        session._owns_workspace = False
        client = AsyncKernelClient()
        try:
            client.load_connection_file(str(connection_file))
            client.start_channels()
            await client.wait_for_ready(timeout=session.startup_timeout)
        except (OSError, RuntimeError, ValueError) as exc:
            client.stop_channels()
            raise KernelStartError(f"cannot attach to the kernel in {connection_file}: {exc}") from exc
        session.client = client
        session.state = SessionState.READY
        return session

    async def start(self) -> "AsyncKernelSession":
        """Start the kernel and wait until it answers. Raises ``KernelStartError``."""
        if self.state is not SessionState.NEW:
            return self
        try:
            await self._start_kernel()
        except BaseException:
            await self._release()
            self.state = SessionState.CLOSED
            raise
        self.state = SessionState.READY
        return self

    async def _start_kernel(self) -> None:
        sweep_stale_runtime_dirs()
        self._runtime_dir = Path(tempfile.mkdtemp(prefix=_RUNTIME_PREFIX))
        (self._runtime_dir / _OWNER_FILE).write_text(str(os.getpid()))
        if self.workspace is None:
            self.workspace = self._runtime_dir / "workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        transport = "tcp" if self.limits.network else "ipc"
        self.manager = AsyncKernelManager(
            kernel_name=self.kernel_name, kernel_spec_manager=kernel_spec_manager(), transport=transport
        )
        self.manager.connection_file = str(self._runtime_dir / "connection.json")
        if transport == "ipc":
            self.manager.ip = str(self._runtime_dir / "ipc")
        self._confinement = Confinement.prepare(self.limits)
        env = kernel_environment(
            extra={**figure_cap_env(self.caps.max_images), **self._env_extra, **self._confinement.env},
            allow=self._allow_env,
        )
        self._stderr_file = open(self._runtime_dir / "kernel.log", "wb")  # noqa: SIM115 - closed in _release
        try:
            await self.manager.start_kernel(
                cwd=str(self.workspace), env=env, stdout=subprocess.DEVNULL, stderr=self._stderr_file
            )
            self.client = self.manager.client()
            self.client.start_channels()
            reply = await self._wait_ready()
        except Exception as exc:  # jupyter_client raises RuntimeError, OSError, NoSuchKernel (KeyError)...
            if self._launcher_refused():
                raise SandboxUnavailableError(f"cannot confine the kernel as asked: {self._kernel_log_tail()}") from exc
            raise KernelStartError(f"kernel {self.kernel_name!r} did not start: {exc}. {self._kernel_log_tail()}") from exc
        self.kernel_info = reply

    async def _wait_ready(self) -> dict[str, Any]:
        assert self.client is not None
        waiter = asyncio.ensure_future(self.client.wait_for_ready(timeout=self.startup_timeout))
        while not waiter.done():
            done, _ = await asyncio.wait({waiter}, timeout=_POLL_S)
            if not done and self.manager is not None and not await self.manager.is_alive():
                waiter.cancel()
                raise RuntimeError(f"the kernel exited during start-up ({self._exit_description()})")
        waiter.result()
        reply = await self.client.kernel_info(reply=True, timeout=self.startup_timeout)
        return reply["content"]

    async def close(self) -> None:
        """Shut the kernel down (if we own it) and remove every file we made. Idempotent."""
        if self.state is SessionState.CLOSED:
            return
        self.state = SessionState.CLOSED
        await self._release()

    shutdown = close

    async def _release(self) -> None:
        if self.client is not None:
            self.client.stop_channels()
        if self.manager is not None and self.owns_kernel:
            try:
                if self.manager.has_kernel:
                    await self.manager.shutdown_kernel(now=not await self.manager.is_alive())
            except Exception:  # a dying kernel must not keep us from cleaning up
                log.warning("kernel shutdown failed; killing it", exc_info=True)
                await self._kill()
        if self._confinement is not None:  # the kernel is gone: kill what it left behind, drop its cgroup
            self._confinement.release()
        if self._stderr_file is not None:
            self._stderr_file.close()
        if self._runtime_dir is not None:
            shutil.rmtree(self._runtime_dir, ignore_errors=True)

    async def _kill(self) -> None:
        assert self.manager is not None
        try:
            await self.manager.shutdown_kernel(now=True)
        except Exception:
            log.debug("kill after failed shutdown also failed", exc_info=True)

    async def __aenter__(self) -> "AsyncKernelSession":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def is_alive(self) -> bool:
        """True while the kernel process (or, when attached, its heartbeat) is alive."""
        if self.state is not SessionState.READY:
            return False
        if self.manager is not None:
            return await self.manager.is_alive()
        assert self.client is not None
        return self.client.hb_channel.is_beating()

    # ----------------------------------------------------------------- control
    async def interrupt(self) -> None:
        """Interrupt running code (signal or message, as the kernelspec says)."""
        self._check_open()
        if self.manager is not None:
            await self.manager.interrupt_kernel()
        else:
            assert self.client is not None
            self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))

    async def restart(self) -> None:
        """Restart the kernel: all state is lost. Raises ``KernelError`` for an attached kernel."""
        self._check_open()
        if self.manager is None or not self.owns_kernel:
            raise KernelError("restart needs a kernel this session started; this one was attached")
        async with self._lock:
            await self._restart()
            self._history.clear()

    async def _restart(self) -> None:
        assert self.manager is not None and self.client is not None
        try:
            await self.manager.restart_kernel(now=True)
            await self._wait_ready()
        except Exception as exc:
            raise KernelStartError(f"the kernel could not be restarted: {exc}. {self._kernel_log_tail()}") from exc

    def _check_open(self) -> None:
        if self.state is SessionState.CLOSED:
            raise SessionClosedError("this kernel session is closed")
        if self.state is SessionState.NEW:
            raise SessionClosedError("this kernel session was not started (use it as a context manager or call start())")

    # ----------------------------------------------------------------- execute
    async def execute(self, code: str, timeout: float | None = None, *, rebuild: bool | None = None) -> ExecutionResult:
        """Run ``code``; return what happened. Errors in the code are data, not exceptions.

        ``timeout`` (seconds, default the session's) triggers the ladder:
        interrupt, a short grace, a second interrupt, then a restart that loses
        state. Raises ``SessionClosedError`` when closed and ``KernelStartError``
        when a needed restart fails.
        """
        self._check_open()
        async with self._lock:
            result = await self._execute(code, self.timeout if timeout is None else timeout)
        if result.state_lost and (self.rebuild if rebuild is None else rebuild) and self._history_before_loss:
            result = await self._rebuild(result)
        return result

    async def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
        """Evaluate expressions silently (no history, no outputs, no execution count).

        Returns each expression's ``text/plain`` value, or None where it raised.
        For read-only probes such as "which packages are importable".
        """
        self._check_open()
        assert self.client is not None
        async with self._lock:
            msg_id = self.client.execute("", silent=True, store_history=False, user_expressions=expressions)
            collector = OutputCollector(msg_id, self.caps)
            outcome = await self._collect(collector, time.monotonic() + timeout)
            if outcome != "idle":
                raise KernelError(f"the kernel did not answer a silent probe ({outcome})")
            reply = await self._shell_reply(msg_id)
        values = reply.get("user_expressions", {})
        return {
            name: values[name]["data"].get("text/plain") if values.get(name, {}).get("status") == "ok" else None
            for name in expressions
        }

    async def _execute(self, code: str, timeout: float | None) -> ExecutionResult:
        assert self.client is not None
        self._history_before_loss: list[str] = []
        started = time.monotonic()
        msg_id = self.client.execute(code, silent=False, store_history=True, allow_stdin=False, stop_on_error=True)
        collector = OutputCollector(msg_id, self.caps)
        deadline = None if timeout is None else started + timeout
        try:
            outcome = await self._collect(collector, deadline)
            reply: dict[str, Any] = {}
            if outcome == "idle":
                reply = await self._shell_reply(msg_id)
                if any(p.get("source") == "ask_exit" for p in reply.get("payload", []) or []):
                    outcome = "exited"
            elif outcome == "deadline":
                outcome = await self._stop_runaway(collector)
        except asyncio.CancelledError:
            # Our owner was cancelled (Ctrl-C): stop the code so nothing runs on unseen.
            await asyncio.shield(self._interrupt_quietly())
            raise
        return await self._finish(code, collector, outcome, reply, time.monotonic() - started, timeout)

    async def _collect(self, collector: OutputCollector, deadline: float | None) -> str:
        """Feed iopub messages until idle; return ``idle``, ``deadline`` or ``died``."""
        assert self.client is not None
        while not collector.idle:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "deadline"
            wait = _POLL_S if deadline is None else max(min(_POLL_S, deadline - now), 0.001)
            try:
                msg = await self.client.get_iopub_msg(timeout=wait)
            except queue.Empty:
                if not await self.is_alive():
                    return "died"
                continue
            collector.feed(msg)
        return "idle"

    async def _shell_reply(self, msg_id: str) -> dict[str, Any]:
        assert self.client is not None
        end = time.monotonic() + _REPLY_WAIT_S
        while time.monotonic() < end:
            try:
                msg = await self.client.get_shell_msg(timeout=_POLL_S)
            except queue.Empty:
                if not await self.is_alive():
                    return {}
                continue
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return msg.get("content", {})
        log.warning("no execute_reply for %s within %.0fs", msg_id, _REPLY_WAIT_S)
        return {}

    async def _stop_runaway(self, collector: OutputCollector) -> str:
        """The timeout ladder. Returns ``interrupted`` (state kept) or ``restarted``."""
        grace = self.interrupt_grace / 2
        if not collector.started:  # SIGINT before the cell starts is lost: wait to see it start
            await self._collect(collector, time.monotonic() + grace)
        for _attempt in range(2):
            if collector.idle:
                break
            await self._interrupt_quietly()
            outcome = await self._collect(collector, time.monotonic() + grace)
            if outcome == "died":
                return "died"
        if collector.idle:
            await self._shell_reply(collector.msg_id)
            return "interrupted"
        if self.manager is None or not self.owns_kernel:
            return "stuck"
        await self._restart()
        return "restarted"

    async def _interrupt_quietly(self) -> None:
        try:
            await self.interrupt()
        except Exception:
            log.debug("interrupt failed", exc_info=True)

    async def _finish(
        self, code: str, collector: OutputCollector, outcome: str, reply: dict[str, Any], duration: float,
        timeout: float | None,
    ) -> ExecutionResult:
        status, state_lost, note = "ok", False, ""
        if outcome == "idle":
            status = "error" if reply.get("status") == "error" or collector.error else "ok"
            note = limit_note(collector.error, self.limits)  # "" unless one of our limits caused the error
            if reply.get("status") == "aborted":
                status, note = "error", "the request was aborted by the kernel"
        elif outcome == "interrupted":
            status, note = "timeout", f"stopped by an interrupt after {timeout:g}s"
        elif outcome == "restarted":
            status, state_lost = "timeout", True
            note = f"did not stop within {self.interrupt_grace:g}s of an interrupt after {timeout:g}s; the kernel was restarted"
        elif outcome == "stuck":
            status, note = "timeout", f"still running after {timeout:g}s and an interrupt; the attached kernel was left as it is"
        elif outcome in ("died", "exited"):
            status, state_lost = "died", True
            note = self._death_note(outcome)
            if self.owns_kernel and self.manager is not None:
                await self._restart()
                note += "; the kernel was restarted"
        if state_lost:
            self._history_before_loss = self._history[:]
            self._history.clear()
        elif status == "ok":
            self._history.append(code)
        return ExecutionResult(
            status=status,  # type: ignore[arg-type]
            outputs=tuple(collector.finish()),
            execution_count=reply.get("execution_count", collector.execution_count),
            duration_s=duration,
            error=collector.error,
            state_lost=state_lost,
            note=note,
            code=code,
            dropped_chars=collector.dropped_chars,
            dropped_images=collector.dropped_images,
            display_ids=collector.display_ids,
            display_updates=tuple(collector.display_updates),
        )

    async def _rebuild(self, result: ExecutionResult) -> ExecutionResult:
        """Re-run the cells that succeeded before the state loss, in order."""
        cells = self._history_before_loss
        ran: list[int] = []
        for number, code in enumerate(cells, start=1):
            async with self._lock:
                again = await self._execute(code, self.timeout)
            if again.status != "ok":
                break
            ran.append(number)
        note = f"{result.note}; state rebuilt by re-running {len(ran)} of {len(cells)} earlier successful cells"
        return replace(result, note=note, rebuilt_cells=tuple(ran))

    def _death_note(self, outcome: str) -> str:
        if outcome == "exited":
            return "the code asked the kernel to exit"
        return f"the kernel died ({self._exit_description()})"

    def _exit_description(self) -> str:
        code = getattr(getattr(self.manager, "provisioner", None), "process", None)
        returncode = getattr(code, "returncode", None)
        if returncode is None:
            return "no exit status"
        if self._confinement is not None:
            return self._confinement.describe_exit(returncode)
        return f"exit code {returncode}"

    def _launcher_refused(self) -> bool:
        process = getattr(getattr(self.manager, "provisioner", None), "process", None)
        return getattr(process, "returncode", None) == 97

    def _kernel_log_tail(self, lines: int = 5) -> str:
        if self._runtime_dir is None:
            return ""
        try:
            text = (self._runtime_dir / "kernel.log").read_text(errors="replace")
        except OSError:
            return ""
        tail = [line for line in text.splitlines() if line.strip()][-lines:]
        return "Kernel said: " + " | ".join(tail) if tail else ""
