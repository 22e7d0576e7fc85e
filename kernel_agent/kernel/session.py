"""One live Jupyter kernel per session: ``AsyncKernelSession``.

Owns the session's lifecycle (``SessionState``: new, ready, closed) and
its public methods, the ``interface.Kernel`` protocol. It *has* a provider,
which says where the kernel lives, made by name (``providers/registry.py``: ``local`` by
default, ``gateway`` with a gateway, ``attached`` for ``connect``, or a third party's), and an
``engine.ExecuteEngine``, which runs each request over the provider's channels. A session we started
we shut down; one we attached to we never kill.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_client.manager import AsyncKernelManager

from ..errors import ConfigError, KernelError, SessionClosedError
from ..records import PYTHON3_KERNELSPEC
from ..result import ExecutionResult
from .engine import ExecuteEngine
from .files import CopiedFiles, KernelFiles, LocalFiles, NoFiles, RemoteFiles
from .interface import SessionState
from .outputs import OutputCaps
from .partial import OutputCallback
from .providers.base import KernelProvider
from .providers.gateway.settings import GatewaySettings
from .providers.registry import ProviderSettings, make_provider, provider_for
from .providers.runtime import sweep_stale_runtime_dirs
from .sandbox.limits import Confinement, Limits

__all__ = ["AsyncKernelSession", "SessionState", "sweep_stale_runtime_dirs"]

_FILE_TIMEOUT = 120.0  # one chunk (4 MB) of a data file or artifact through a slow gateway


class AsyncKernelSession:
    """A live kernel: ``execute`` code in it, state persists between calls.

    ``workspace`` is the kernel's cwd (created if missing; a private temp dir
    removed on close when None). ``env`` adds variables; the agent's secrets
    are never passed (``allow_env`` names exceptions). ``timeout`` is the
    default per-execute deadline. ``rebuild=True`` re-runs the successful
    cells after a restart that lost state. ``limits`` confine the kernel.
    ``gateway`` (a URL or ``GatewaySettings``; ``gateway_token`` is its
    secret) runs the kernel on a Jupyter Kernel/Enterprise Gateway instead
    (``gateway_kernel_id`` attaches to a running one there, never killed, unless ``gateway_adopt``
    makes this session its owner);
    ``kernel_name`` then picks the gateway's kernelspec (default: the
    gateway's default) and ``workspace`` stays the run's local folder.
    ``provider`` says where the kernel lives: a name registered in ``kernel_agent.providers``
    (``providers/registry.py``; default ``gateway`` when ``gateway`` is given, else ``local``), made with
    these arguments, or a ``KernelProvider`` already made. ``sockets``: variable name → a host Unix socket the
    kernel may connect to (``ProviderSettings.sockets``; a live data source's broker), for a provider made here.
    ``template``: a local kernel of ours (our Python, sandboxed, no network) is forked from a warmed template with
    the analysis stack imported (``providers/forked.py``; False: started cold); ``confinement`` says which.
    Raises ``ConfigError`` for an unknown provider, one that cannot bind ``sockets`` (or was made already),
    a malformed gateway URL, ``ExtraMissingError`` for a
    gateway without the ``gateway`` extra.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        kernel_name: str | None = None,
        env: dict[str, str] | None = None,
        allow_env: tuple[str, ...] = (),
        timeout: float | None = None,
        startup_timeout: float = 60.0,
        interrupt_grace: float = 1.0,
        caps: OutputCaps | None = None,
        limits: Limits | None = None,
        rebuild: bool = False,
        gateway: str | GatewaySettings | None = None,
        gateway_token: str | None = None,
        gateway_kernel_id: str | None = None,
        gateway_adopt: bool = False,
        provider: KernelProvider | str | None = None,
        python: str | None = None,
        sockets: Mapping[str, Path] | None = None,
        template: bool = True,
    ) -> None:
        self.timeout = timeout
        self.caps = caps or OutputCaps()
        self.rebuild = rebuild
        self.local_folder = Path(workspace) if workspace is not None else None
        if provider is None or isinstance(provider, str):
            settings = ProviderSettings(
                workspace=self.local_folder,
                kernel_name=kernel_name,
                env=dict(env or {}),
                allow_env=allow_env,
                startup_timeout=startup_timeout,
                max_images=self.caps.max_images,
                max_output_bytes=self.caps.max_output_bytes,
                limits=limits,
                python=python,
                gateway=gateway,
                gateway_token=gateway_token,
                kernel_id=gateway_kernel_id,
                adopt=gateway_adopt,
                sockets=dict(sockets or {}),
                template=template,
            )
            provider = make_provider(provider_for(provider, gateway), settings)
        elif sockets:
            raise ConfigError(
                "a kernel provider already made cannot be given sockets: make it with them "
                "(ProviderSettings.sockets), or name it (provider='local')"
            )
        self.kernel_name = kernel_name or getattr(provider, "kernel_name", None) or "default"
        self.provider = provider
        self.engine = ExecuteEngine(provider, self.caps, interrupt_grace=interrupt_grace)
        self.state = SessionState.NEW
        self._closing: asyncio.Future[None] | None = None
        self.kernel_info: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<AsyncKernelSession [{self.state.value}] {self.kernel_name} cwd={self.workspace}>"

    @property
    def workspace(self) -> Path | None:
        """The kernel's working directory on this machine (None where its files are not ours)."""
        return self.provider.workspace

    @property
    def files(self) -> KernelFiles:
        """The workspace seam: data files into the kernel's cwd, changed files back into the local folder.

        Before ``start()`` and after ``close()`` its methods raise ``SessionClosedError``; for a
        remote kernel made without a local folder (``workspace=``) they raise ``KernelError``.
        """
        if self.state is not SessionState.READY:
            return NoFiles(SessionClosedError(f"this kernel session is {self.state.value}: it has no files"))
        kernel_folder = self.provider.workspace
        if kernel_folder is not None and self.local_folder is not None and kernel_folder != self.local_folder:
            return CopiedFiles(kernel_folder, self.local_folder)  # bound after start (a pooled kernel)
        if kernel_folder is not None:
            return LocalFiles(kernel_folder)
        if self.local_folder is None:
            return NoFiles(KernelError("a remote kernel needs a local folder (workspace=...) to bring files to"))
        return RemoteFiles(self.local_folder, self._run_silently)

    def bind(self, local_folder: str | os.PathLike[str]) -> None:
        """Adopt a run's local folder after start (a pooled kernel): data files are copied from it into
        the kernel's own folder and changed files copied back; the sandbox stays as it was started."""
        self.local_folder = Path(local_folder)
        self.local_folder.mkdir(parents=True, exist_ok=True)

    @property
    def confinement(self) -> str:
        """Where the kernel runs and what confines it, in words (notebook metadata, events)."""
        describe = getattr(self.provider, "describe_confinement", None)
        return describe() if describe is not None else self.provider.limits.describe()

    @property
    def kernelspec(self) -> dict[str, str]:
        """What a notebook's ``kernelspec`` metadata says for this kernel, so the notebook opens and replays
        in it: the kernelspec a local kernel was chosen from, else what the kernel says of its language."""
        choice = getattr(self.provider, "choice", None)
        if choice is not None:
            return dict(choice.recorded)
        language = str(self.kernel_info.get("language_info", {}).get("name") or "python")
        if language.lower() == "python":
            return dict(PYTHON3_KERNELSPEC)
        return {"name": self.kernel_name, "display_name": self.kernel_name, "language": language.lower()}

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
    async def connect(cls, connection_file: str | os.PathLike[str], **kwargs: Any) -> AsyncKernelSession:
        """Attach to a running kernel by its connection file; ``close()`` never kills it.
        Raises ``KernelStartError`` when it does not answer."""
        caps = kwargs.get("caps") or OutputCaps()
        settings = ProviderSettings(
            startup_timeout=kwargs.pop("startup_timeout", 60.0),
            max_output_bytes=caps.max_output_bytes,
            connection_file=str(connection_file),
        )
        provider = make_provider("attached", settings)
        session = cls(provider=provider, **kwargs)
        return await session.start()

    async def start(self) -> AsyncKernelSession:
        """Start the kernel and wait until it answers. Raises ``KernelStartError``."""
        if self.state is not SessionState.NEW:
            return self
        try:
            self.kernel_info = await self.provider.start()
        except BaseException:
            self.state = SessionState.CLOSED
            raise
        self.engine.language = str(self.kernel_info.get("language_info", {}).get("name") or "python")
        self.state = SessionState.READY
        return self

    async def close(self) -> None:
        """Shut the kernel down (if we own it) and remove every file we made. Idempotent.

        A cancel that arrives meanwhile (a reaper or a server shutting down) waits until the
        clean-up is done, then goes on: cut short, it would leave a kernel unreaped, its files open
        and its runtime dir behind, with nothing left holding them to clean up later.
        """
        if self.state is SessionState.CLOSED and self._closing is None:
            return
        self.state = SessionState.CLOSED
        if self._closing is None:
            self._closing = asyncio.ensure_future(self.provider.close())
        try:
            await asyncio.shield(self._closing)
        except asyncio.CancelledError:
            if not self._closing.done():
                await asyncio.wait({self._closing})
            raise

    shutdown = close

    async def __aenter__(self) -> AsyncKernelSession:
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
            raise SessionClosedError(
                "this kernel session was not started (use it as a context manager or call start())"
            )

    # ----------------------------------------------------------------- execute
    async def execute(
        self,
        code: str,
        timeout: float | None = None,
        *,
        rebuild: bool | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run ``code``; return what happened. Errors in the code are data, not exceptions.

        ``timeout`` (seconds, default the session's) triggers the ladder:
        interrupt, a short grace, a second interrupt, then a restart that loses
        state. ``on_output`` is called on this session's event loop with the
        output so far while the code runs (``partial.OutputChunk``: new text and
        figures, bounded, at most one chunk per 0.5 s, the rest when it ends); it
        must not block, and when it raises the error is logged and the code runs
        on. It never changes the result. Raises ``SessionClosedError`` when
        closed and ``KernelStartError`` when a needed restart fails.
        """
        self._check_open()
        return await self.engine.execute(
            code,
            self.timeout if timeout is None else timeout,
            rebuild=self.rebuild if rebuild is None else rebuild,
            rebuild_timeout=self.timeout,
            on_output=on_output,
        )

    async def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
        """Evaluate expressions silently (no history, no outputs, no execution count).

        Returns each expression's ``text/plain`` value, or None where it raised.
        For read-only probes such as "which packages are importable". Raises
        ``KernelError`` when the kernel does not answer within ``timeout``.
        """
        self._check_open()
        return await self.engine.evaluate(expressions, timeout)

    async def run_quietly(self, code: str, timeout: float = 30.0) -> str:
        """Run ``code`` outside the history (no execution count, nothing recorded); its printed text.
        The probe for kernels without ``user_expressions``. Raises ``KernelError``."""
        self._check_open()
        return await self.engine.run_quietly(code, timeout)

    async def _run_silently(self, code: str, expressions: dict[str, str]) -> dict[str, Any]:
        """The remote workspace's way in: silent code, its ``execute_reply`` content (files.RemoteFiles)."""
        self._check_open()
        return await self.engine.run_silently(code, expressions, _FILE_TIMEOUT)
