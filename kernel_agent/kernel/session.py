"""One live Jupyter kernel per session: ``AsyncKernelSession``.

Owns the session's lifecycle (``SessionState``: new, ready, closed) and
its public methods, the ``interface.Kernel`` protocol. It *has* a provider,
which says where the kernel lives (``local.LocalProvider`` by default,
``AttachedProvider`` for ``connect``), and an ``engine.ExecuteEngine``,
which runs each request over the provider's channels. A session we started
we shut down; one we attached to we never kill.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jupyter_client import AsyncKernelManager

from ..errors import KernelError, SessionClosedError
from .engine import ExecuteEngine
from .interface import KernelProvider, SessionState
from .kernelspec import KERNEL_NAME
from .limits import Confinement, Limits
from .local import AttachedProvider, LocalProvider, sweep_stale_runtime_dirs
from .outputs import OutputCaps
from .result import ExecutionResult

__all__ = ["AsyncKernelSession", "SessionState", "sweep_stale_runtime_dirs"]


class AsyncKernelSession:
    """A live kernel: ``execute`` code in it, state persists between calls.

    ``workspace`` is the kernel's cwd (created if missing; a private temp dir
    removed on close when None). ``env`` adds variables; the agent's secrets
    are never passed (``allow_env`` names exceptions). ``timeout`` is the
    default per-execute deadline. ``rebuild=True`` re-runs the successful
    cells after a restart that lost state. ``limits`` confine the kernel.
    ``provider`` replaces where the kernel lives (the arguments that describe
    a local kernel are then unused).
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
        provider: KernelProvider | None = None,
    ) -> None:
        self.kernel_name = kernel_name
        self.timeout = timeout
        self.caps = caps or OutputCaps()
        self.rebuild = rebuild
        if provider is None:
            provider = LocalProvider(
                Path(workspace) if workspace is not None else None, kernel_name=kernel_name, env=env,
                allow_env=allow_env, startup_timeout=startup_timeout, max_images=self.caps.max_images, limits=limits,
            )
        self.provider = provider
        self.engine = ExecuteEngine(provider, self.caps, interrupt_grace=interrupt_grace)
        self.state = SessionState.NEW
        self.kernel_info: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<AsyncKernelSession [{self.state.value}] {self.kernel_name} cwd={self.workspace}>"

    @property
    def workspace(self) -> Path | None:
        """The kernel's working directory on this machine (None where its files are not ours)."""
        return self.provider.workspace

    @property
    def owns_kernel(self) -> bool:
        return self.provider.owns_kernel

    @property
    def limits(self) -> Limits:
        return self.provider.limits

    @property
    def interrupt_grace(self) -> float:
        return self.engine.interrupt_grace

    @property
    def manager(self) -> AsyncKernelManager | None:
        """The local kernel's jupyter_client manager (None for other providers)."""
        return getattr(self.provider, "manager", None)

    @property
    def _confinement(self) -> Confinement | None:
        return getattr(self.provider, "confinement", None)

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    async def connect(cls, connection_file: str | os.PathLike[str], **kwargs: Any) -> "AsyncKernelSession":
        """Attach to a running kernel by its connection file; ``close()`` never kills it.
        Raises ``KernelStartError`` when it does not answer."""
        provider = AttachedProvider(connection_file, startup_timeout=kwargs.pop("startup_timeout", 60.0))
        session = cls(provider=provider, **kwargs)
        return await session.start()

    async def start(self) -> "AsyncKernelSession":
        """Start the kernel and wait until it answers. Raises ``KernelStartError``."""
        if self.state is not SessionState.NEW:
            return self
        try:
            self.kernel_info = await self.provider.start()
        except BaseException:
            self.state = SessionState.CLOSED
            raise
        self.state = SessionState.READY
        return self

    async def close(self) -> None:
        """Shut the kernel down (if we own it) and remove every file we made. Idempotent."""
        if self.state is SessionState.CLOSED:
            return
        self.state = SessionState.CLOSED
        await self.provider.close()

    shutdown = close

    async def __aenter__(self) -> "AsyncKernelSession":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def is_alive(self) -> bool:
        """True while the kernel (process, heartbeat or remote status) is alive."""
        if self.state is not SessionState.READY:
            return False
        return await self.provider.is_alive()

    # ----------------------------------------------------------------- control
    async def interrupt(self) -> None:
        """Interrupt running code (signal or message, as the kernelspec says)."""
        self._check_open()
        await self.provider.interrupt()

    async def restart(self) -> None:
        """Restart the kernel: all state is lost. Raises ``KernelError`` for an attached kernel,
        ``KernelStartError`` when it does not come back."""
        self._check_open()
        if not self.provider.owns_kernel:
            raise KernelError("restart needs a kernel this session started; this one was attached")
        await self.engine.restart()

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
        return await self.engine.execute(
            code, self.timeout if timeout is None else timeout,
            rebuild=self.rebuild if rebuild is None else rebuild, rebuild_timeout=self.timeout,
        )

    async def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
        """Evaluate expressions silently (no history, no outputs, no execution count).

        Returns each expression's ``text/plain`` value, or None where it raised.
        For read-only probes such as "which packages are importable". Raises
        ``KernelError`` when the kernel does not answer within ``timeout``.
        """
        self._check_open()
        return await self.engine.evaluate(expressions, timeout)
