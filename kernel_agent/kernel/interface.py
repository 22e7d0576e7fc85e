"""The kernel seam: what a kernel looks like to the rest of kernel-agent, wherever it runs.

Owns three typing protocols and the session state enum, nothing else:

* ``Kernel``: the public face of one live kernel, what the agent, the magic,
  the CLI, ``PythonTool`` and replay program against. ``AsyncKernelSession``
  is one, whether its kernel is a local process or lives on a gateway.
* ``KernelProvider``: where a kernel lives (a local process we start, a kernel
  we attached to, a kernel on a Jupyter Kernel Gateway). It starts, interrupts,
  restarts and stops the kernel, says whether it is alive and, once it is dead,
  why; it hands the engine a ``ChannelClient``. It knows nothing of executes.
* ``KernelFactory``: what front ends and the agent are given instead of a
  class: called with the run's local folder, it returns an async context
  manager that yields a started ``Kernel`` and closes it on exit (an
  ``AsyncKernelSession`` is one; so is a pool's ``acquire``).
* ``ChannelClient``: the part of jupyter_client's ``AsyncKernelClient`` the
  execute engine (``engine.py``) uses: send a request, read iopub and shell
  replies. Local kernels use jupyter_client's own client; a gateway kernel a
  websocket one with the same methods.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .files import KernelFiles
    from .limits import Limits
    from .partial import OutputCallback
    from .result import ExecutionResult

__all__ = ["ChannelClient", "Kernel", "KernelFactory", "KernelProvider", "SessionState"]


class SessionState(Enum):
    """A kernel session's life: made, started (``READY``), closed for good."""

    NEW = "new"
    READY = "ready"
    CLOSED = "closed"


class ChannelClient(Protocol):
    """Messages to and from one kernel (the subset of ``AsyncKernelClient`` the engine needs).

    ``get_iopub_msg``/``get_shell_msg`` raise ``queue.Empty`` when nothing
    came within ``timeout`` seconds.
    """

    def execute(
        self, code: str, silent: bool = False, store_history: bool = True,
        user_expressions: dict[str, Any] | None = None, allow_stdin: bool | None = None, stop_on_error: bool = True,
    ) -> str: ...

    async def get_iopub_msg(self, timeout: float | None = None) -> dict[str, Any]: ...

    async def get_shell_msg(self, timeout: float | None = None) -> dict[str, Any]: ...

    def stop_channels(self) -> None: ...


class KernelProvider(Protocol):
    """Where one kernel lives, and its lifecycle. The engine drives executes through ``client``.

    ``owns_kernel`` is False for a kernel we attached to: it is never
    restarted or killed. ``limits`` are the confinement in force there
    (``Limits.off()`` where we apply none), used to name a limit behind an
    error. ``workspace`` is the kernel's working directory *on this machine*,
    or None where the kernel's files are not ours (a remote kernel).
    """

    owns_kernel: bool
    limits: Limits
    client: ChannelClient | None

    @property
    def workspace(self) -> Path | None: ...

    async def start(self) -> dict[str, Any]:
        """Start (or attach to) the kernel; return its ``kernel_info_reply`` content. Raises ``KernelStartError``."""
        ...

    async def is_alive(self) -> bool: ...

    async def interrupt(self) -> None: ...

    async def restart(self) -> dict[str, Any]:
        """Restart and wait until the kernel answers again. Raises ``KernelStartError``."""
        ...

    def describe_exit(self) -> str:
        """Why the (dead) kernel ended, in words, e.g. ``exit code 1`` or ``the gateway reports it dead``."""
        ...

    async def close(self) -> None:
        """Stop the kernel if we own it and remove what we made for it. Idempotent."""
        ...


@runtime_checkable
class Kernel(Protocol):
    """One live kernel: state persists between ``execute`` calls until it is lost (and said so).

    Use as an async context manager (``start`` on enter, ``close`` on exit).
    Errors in the analysed code come back as data (``ExecutionResult``);
    machinery failures raise from ``errors.KernelError``'s branch.
    """

    @property
    def workspace(self) -> Path | None: ...

    @property
    def state(self) -> SessionState: ...

    @property
    def kernel_info(self) -> dict[str, Any]: ...

    @property
    def files(self) -> KernelFiles:
        """The workspace seam (``files.KernelFiles``): data files in, changed files back out."""
        ...

    async def start(self) -> Kernel: ...

    async def execute(
        self, code: str, timeout: float | None = None, *, rebuild: bool | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run ``code``; a timeout interrupts (then restarts if need be). ``on_output`` gets the
        output so far while it runs (``partial.OutputChunk``, throttled). Raises ``SessionClosedError``."""
        ...

    async def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
        """Evaluate expressions silently; each one's ``text/plain`` or None where it raised."""
        ...

    async def interrupt(self) -> None: ...

    async def restart(self) -> None: ...

    async def is_alive(self) -> bool: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Kernel: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


KernelFactory = Callable[[Path], AbstractAsyncContextManager[Kernel]]
