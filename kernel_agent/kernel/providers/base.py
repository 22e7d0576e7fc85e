"""The provider seam: where one kernel lives (``KernelProvider``) and how its messages travel (``ChannelClient``).

Like jupyter_client's ``provisioning/``, this folder holds the places a
kernel can live, each behind the same two protocols:

* ``KernelProvider``: a local process we start or attach to (``local.py``), a
  kernel on a Jupyter Kernel Gateway or Enterprise Gateway (``gateway/``). It
  starts, interrupts, restarts and stops the kernel, says whether it is alive
  and, once it is dead, why; it hands the engine a ``ChannelClient``. It knows
  nothing of executes.
* ``ChannelClient``: the part of jupyter_client's ``AsyncKernelClient`` the
  execute engine (``engine.py``) uses: send a request, read iopub and shell
  replies. Local kernels use jupyter_client's own client; a gateway kernel a
  websocket one with the same methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..sandbox.limits import Limits

__all__ = ["ChannelClient", "KernelProvider", "bound_messages", "max_message_bytes", "supports_sockets"]

_HEADROOM = 4 * 1024 * 1024  # a message's header, metadata and JSON escapes around its data


def max_message_bytes(max_output_bytes: int) -> int:
    """The largest message the host reads from a kernel: twice what one execution may show, plus
    headroom. The kernel's own cap sends no more than that; model code that writes to the kernel's
    sockets directly is not bound by it."""
    return 2 * max_output_bytes + _HEADROOM


def bound_messages(client: Any, limit: int) -> None:
    """Make every socket ``client`` opens drop (ZMQ ``MAXMSGSIZE``: disconnect, then reconnect) a
    message over ``limit`` bytes, before the host holds it in memory, and reconnect promptly. Call before
    ``start_channels``."""
    import zmq

    client.context.setsockopt(zmq.MAXMSGSIZE, limit)
    # A kernel binds its sockets after we connect: retry every 5 ms, backing off to ZMQ's 100 ms, not the flat 100 ms
    # (a kernel forked from a template is ready in tens of milliseconds).
    client.context.setsockopt(zmq.RECONNECT_IVL, 5)
    client.context.setsockopt(zmq.RECONNECT_IVL_MAX, 100)


def supports_sockets(provider: object) -> bool:
    """Whether ``provider`` makes the host Unix sockets of ``ProviderSettings.sockets`` reachable by its kernel:
    its optional ``supports_sockets`` attribute, True only where it says so (``LocalProvider``; a subclass
    inherits the claim). A provider that says nothing is taken not to."""
    return getattr(provider, "supports_sockets", False) is True


class ChannelClient(Protocol):
    """Messages to and from one kernel (the subset of ``AsyncKernelClient`` the engine needs).

    ``get_iopub_msg``/``get_shell_msg`` raise ``queue.Empty`` when nothing
    came within ``timeout`` seconds.
    """

    def execute(
        self,
        code: str,
        silent: bool = False,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool | None = None,
        stop_on_error: bool = True,
    ) -> str: ...

    async def get_iopub_msg(self, timeout: float | None = None) -> dict[str, Any]: ...

    async def get_shell_msg(self, timeout: float | None = None) -> dict[str, Any]: ...

    def stop_channels(self) -> None: ...


@runtime_checkable
class KernelProvider(Protocol):
    """Where one kernel lives, and its lifecycle. The engine drives executes through ``client``.

    ``owns_kernel`` is False for a kernel we attached to: it is never
    restarted or killed. ``limits`` are the confinement in force there
    (``Limits.off()`` where we apply none), used to name a limit behind an
    error. ``workspace`` is the kernel's working directory *on this machine*,
    or None where the kernel's files are not ours (a remote kernel). Optionally,
    ``supports_sockets = True`` declares that it binds the settings' ``sockets``
    for its kernel (read by ``supports_sockets``; none: it cannot).
    """

    owns_kernel: bool
    limits: Limits

    @property
    def client(self) -> ChannelClient | None:
        """The channels once started (None before): a read-only member, so a provider may hold a narrower type."""
        ...

    @property
    def workspace(self) -> Path | None: ...

    async def start(self) -> dict[str, Any]:
        """Start (or attach to) the kernel; return its ``kernel_info_reply`` content. Raises ``KernelStartError``."""
        ...

    async def is_alive(self) -> bool: ...

    @property
    def dropped_messages(self) -> int:
        """How many times a message from the kernel was (or may have been) lost unread: one over the
        size bound (``max_message_bytes``) drops its connection, which is then made again."""
        ...

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
