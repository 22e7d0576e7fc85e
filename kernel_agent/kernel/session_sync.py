"""``KernelSession``: the blocking facade of ``AsyncKernelSession``.

Same methods, same meaning; it runs the async session on a private event
loop thread, so it also works inside a running event loop (an IPython
kernel, where the ``%%agent`` magic lives).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .._loop import LoopThread
from ..result import ExecutionResult
from .partial import OutputCallback
from .session import AsyncKernelSession, SessionState

__all__ = ["KernelSession"]

_EXIT_GRACE_S = 0.4  # jupyter_client splits it: half before SIGTERM, half before SIGKILL


class KernelSession:
    """A live kernel, blocking API. Use as a context manager, or ``start()``/``close()``.

    Takes the same arguments as ``AsyncKernelSession``.
    """

    def __init__(self, workspace: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        self._loop = LoopThread("kernel-agent-session")
        self._async: AsyncKernelSession = self._loop.run(_build(workspace, kwargs))
        self._loop.on_exit(self._close_at_exit)

    @classmethod
    def connect(cls, connection_file: str | os.PathLike[str], **kwargs: Any) -> KernelSession:
        """Attach to a running kernel; ``close()`` never kills it."""
        self = cls.__new__(cls)
        self._loop = LoopThread("kernel-agent-session")
        try:
            self._async = self._loop.run(AsyncKernelSession.connect(connection_file, **kwargs))
        except BaseException:
            self._loop.stop()
            raise
        self._loop.on_exit(self._close_at_exit)
        return self

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncKernelSession", "KernelSession", 1)

    @property
    def workspace(self) -> Path | None:
        return self._async.workspace

    @property
    def state(self) -> SessionState:
        return self._async.state

    @property
    def kernel_info(self) -> dict[str, Any]:
        return self._async.kernel_info

    @property
    def confinement(self) -> str:
        """Where the kernel runs, what confines it and how it started, in words (see ``AsyncKernelSession``)."""
        return self._async.confinement

    @property
    def kernelspec(self) -> dict[str, str]:
        """What a notebook's ``kernelspec`` metadata says for this kernel (see ``AsyncKernelSession``)."""
        return self._async.kernelspec

    @property
    def async_session(self) -> AsyncKernelSession:
        """The async session underneath (lives on this facade's private loop)."""
        return self._async

    def start(self) -> KernelSession:
        """Start the kernel. Raises ``KernelStartError``."""
        try:
            self._loop.run(self._async.start())
        except BaseException:
            self._loop.stop()
            raise
        return self

    def execute(
        self,
        code: str,
        timeout: float | None = None,
        *,
        rebuild: bool | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run ``code`` and return its ``ExecutionResult`` (see ``AsyncKernelSession.execute``).

        ``on_output`` is called on this facade's private loop thread, not the caller's.
        """
        return self._loop.run(self._async.execute(code, timeout, rebuild=rebuild, on_output=on_output))

    def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
        """Evaluate expressions silently (see ``AsyncKernelSession.evaluate``)."""
        return self._loop.run(self._async.evaluate(expressions, timeout))

    def run_quietly(self, code: str, timeout: float = 30.0) -> str:
        """Run code outside the history; its printed text (see ``AsyncKernelSession.run_quietly``)."""
        return self._loop.run(self._async.run_quietly(code, timeout))

    def interrupt(self) -> None:
        self._loop.run(self._async.interrupt())

    def bind(self, local_folder: str | os.PathLike[str]) -> None:
        """Adopt a run's local folder after start (see ``AsyncKernelSession.bind``)."""
        self._async.bind(local_folder)

    def restart(self) -> None:
        self._loop.run(self._async.restart())

    def is_alive(self) -> bool:
        return self._loop.run(self._async.is_alive()) if self._loop.running else False

    def close(self) -> None:
        """Shut the kernel down (if owned), remove its files, stop the loop thread. Idempotent."""
        self._loop.close(self._async.close)

    async def _close_at_exit(self) -> None:
        # The interpreter is exiting with this session never closed. jupyter_client would give the
        # kernel up to 2.5 s to honour the shutdown request before SIGTERM; a kernel that was just
        # interrupted by that same shutdown often takes all of it. Nobody waits for its state now,
        # so it gets a short grace and then the signals.
        manager = self._async.manager
        if manager is not None:
            manager.shutdown_wait_time = _EXIT_GRACE_S
        await self._async.close()

    shutdown = close

    def __enter__(self) -> KernelSession:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _build(workspace: str | os.PathLike[str] | None, kwargs: dict[str, Any]) -> AsyncKernelSession:
    # Created on the loop thread so any loop-bound state belongs to that loop.
    return AsyncKernelSession(workspace, **kwargs)
