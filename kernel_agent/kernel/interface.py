"""The kernel seam: what a kernel looks like to the rest of kernel-agent, wherever it runs.

Owns two typing protocols, the session state enum, the wrapper that makes a plain callable a
factory and ``EXEC_TIMEOUT_S``, nothing else (where a kernel lives is ``providers/``):

* ``Kernel``: the public face of one live kernel, what the agent, the magic,
  the CLI, ``PythonTool`` and replay program against. ``AsyncKernelSession``
  is one, whether its kernel is a local process or lives on a gateway.
* ``KernelFactory``: what front ends and the agent are given instead of a
  class: called with the run's local folder, it returns an async context
  manager that yields a started ``Kernel`` and closes it on exit; its
  ``kernels_apart`` says, before any kernel starts, whether its kernels
  always work in folders of their own, not in the run's folder
  (``KernelFiles.in_local`` false: a pool's, a gateway's). A ``KernelPool``
  is one. ``kernel_factory`` makes one of a plain callable (an
  ``AsyncKernelSession`` class, a lambda), whose kernels work in the run's folder.
  A factory may also say, before any kernel starts, what its kernels are
  (``kernels_ahead``: a ``KernelsAhead``, or None when it does not know), so
  the agent can ask the model while the kernel starts; ``kernels_ahead_of``
  reads it from ``AsyncKernelSession`` options.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..result import ExecutionResult
    from .files import KernelFiles
    from .partial import OutputCallback
    from .sandbox.limits import Limits

__all__ = [
    "EXEC_TIMEOUT_S",
    "Kernel",
    "KernelFactory",
    "KernelMaker",
    "KernelsAhead",
    "MadeKernels",
    "SessionState",
    "kernel_factory",
    "kernels_ahead",
    "kernels_ahead_of",
]


EXEC_TIMEOUT_S = 120.0
"""Seconds one execution of analysed code may take unless the user says otherwise: the ``exec_timeout``
setting's default (``--timeout``: the agent's rounds, ``replay``, the MCP server), declared here, below every
layer that runs code for a user, so that each takes it from one place. ``Kernel.execute`` itself has none."""


class SessionState(Enum):
    """A kernel session's life: made, started (``READY``), closed for good."""

    NEW = "new"
    READY = "ready"
    CLOSED = "closed"


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
    def kernelspec(self) -> dict[str, str]:
        """What a notebook's ``kernelspec`` metadata says for this kernel (name, display_name, language)."""
        ...

    @property
    def files(self) -> KernelFiles:
        """The workspace seam (``files.KernelFiles``): data files in, changed files back out."""
        ...

    @property
    def limits(self) -> Limits:
        """The confinement asked for (``sandbox.limits.Limits``); a gateway's kernel is confined by the gateway."""
        ...

    @property
    def confinement(self) -> str:
        """Where the kernel runs and what confines it, in words (notebook metadata, events)."""
        ...

    async def start(self) -> Kernel: ...

    async def execute(
        self,
        code: str,
        timeout: float | None = None,
        *,
        rebuild: bool | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Run ``code``; a timeout interrupts (then restarts if need be). ``on_output`` gets the
        output so far while it runs (``partial.OutputChunk``, throttled). Raises ``SessionClosedError``."""
        ...

    async def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
        """Evaluate expressions silently; each one's ``text/plain`` or None where it raised."""
        ...

    async def run_quietly(self, code: str, timeout: float = 30.0) -> str:
        """Run ``code`` outside the history (no execution count, nothing recorded); its printed text."""
        ...

    async def interrupt(self) -> None: ...

    async def restart(self) -> None: ...

    async def is_alive(self) -> bool: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> Kernel: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


KernelMaker = Callable[[Path], AbstractAsyncContextManager[Kernel]]  # a plain factory: folder -> kernel


@dataclass(frozen=True)
class KernelsAhead:
    """What a factory's kernels are, known before one starts: fresh local kernels of ``language`` (a
    kernelspec's language, lower case) in one environment, ``python`` (an interpreter's path; "" for this
    process's) for the ``kernel_name`` kernelspec ("" for ours). Enough to make a run's opening prompt
    while its kernel starts."""

    language: str = "python"
    kernel_name: str = ""
    python: str = ""

    @property
    def this_interpreter(self) -> bool:
        """True when the kernels run this process's interpreter with our kernelspec: what they can import
        can be asked here."""
        return self.language == "python" and not self.kernel_name and not self.python

    @property
    def environment(self) -> tuple[str, str, str]:
        """The environment's key: kernels with the same one have the same packages."""
        return (self.language, self.kernel_name, self.python)


_ELSEWHERE = ("gateway", "provider", "gateway_kernel_id")  # options that put the kernel out of this machine's view


def kernels_ahead_of(options: Mapping[str, Any]) -> KernelsAhead | None:
    """What ``AsyncKernelSession(folder, **options)`` kernels are, when known without starting one: our
    default kernelspec's Python (this interpreter, or ``python``); None for a named kernelspec (its language
    is the spec's, even ours named) or a kernel elsewhere (a gateway's, a provider's, an existing one)."""
    if any(options.get(name) for name in _ELSEWHERE) or options.get("kernel_name"):
        return None
    return KernelsAhead("python", python=str(options.get("python") or ""))


def kernels_ahead(factory: object) -> KernelsAhead | None:
    """What ``factory`` says of its kernels before one starts (its optional ``kernels_ahead``), else None."""
    said = getattr(factory, "kernels_ahead", None)
    return said if isinstance(said, KernelsAhead) else None


def interchangeable(factory: object) -> bool:
    """Whether ``factory``'s kernels may be replaced by fresh ones of the agent's own settings (its optional
    ``interchangeable``; ``KernelFactory``)."""
    return getattr(factory, "interchangeable", False) is True


@runtime_checkable
class KernelFactory(Protocol):
    """Called with the run's local folder: an async context manager yielding a started ``Kernel``, closed on exit.

    Optionally, a ``kernels_ahead`` attribute (``KernelsAhead | None``, read by ``kernels_ahead``; not part of
    the protocol, so a factory that does not know says nothing): what its kernels are before one starts. A
    factory that gives it promises fresh kernels of that language in that environment; the agent then sends
    its first request while the kernel starts. Optionally, an ``interchangeable`` attribute (read by
    ``interchangeable``): True when its kernels are fresh ones of the agent's own settings (a pool of them),
    so a run that needs a kernel made for it (given a live source's socket) may take one of the agent's own.
    Optionally, a ``live_sources`` attribute (the agent's ``LiveSources``, read by ``agent/run/live.py``'s
    ``factory_sources``): live sources already open whose broker socket its kernels are given (a service
    thread's, its operator's sources); a run then uses them, and closing them is the factory's.
    """

    @property
    def kernels_apart(self) -> bool:
        """True when its kernels always work in folders of their own (a pooled kernel's, a remote one's), so a
        run's folder holds only the run's record, never the kernel's files."""
        ...

    def __call__(self, workspace: Path, /) -> AbstractAsyncContextManager[Kernel]: ...


@dataclass(frozen=True)
class MadeKernels:
    """A ``KernelFactory`` of a plain callable, with what it says of its kernels' folders."""

    make: KernelMaker
    kernels_apart: bool = False
    kernels_ahead: KernelsAhead | None = None
    interchangeable: bool = False

    def __call__(self, workspace: Path, /) -> AbstractAsyncContextManager[Kernel]:
        return self.make(workspace)


def kernel_factory(factory: KernelFactory | KernelMaker) -> KernelFactory:
    """``factory`` itself when it is a ``KernelFactory``, else a plain callable made one (kernels not apart)."""
    return factory if isinstance(factory, KernelFactory) else MadeKernels(factory)
