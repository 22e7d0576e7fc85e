"""Confinement of the kernel process: ``Limits`` and their application.

Owns the resource limits (memory, CPU time, processes, file size) and the
no-network switch as values, their hand-over to the launcher through one
environment variable, and applying them inside the kernel process before
ipykernel starts. The launcher calls ``apply_in_kernel``; sessions only
build ``Limits`` and pass ``to_env()``.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
from dataclasses import asdict, dataclass

__all__ = ["LIMITS_ENV", "Limits", "apply_in_kernel", "isolate_network"]

LIMITS_ENV = "KERNEL_AGENT_LIMITS"
_MB = 1024 * 1024
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000


@dataclass(frozen=True)
class Limits:
    """Per-kernel limits; ``None`` switches one off. ``Limits.off()`` switches all off.

    ``memory_mb`` caps the address space (``RLIMIT_AS``: allocations past it
    raise ``MemoryError`` in the code); ``cpu_seconds`` caps the kernel's CPU
    time over its lifetime; ``max_processes`` caps processes and threads;
    ``max_file_mb`` caps the size of any file the code writes (``OSError``).
    ``network=False`` runs the kernel in its own empty network namespace.
    """

    memory_mb: int | None = None
    cpu_seconds: int | None = None
    max_processes: int | None = None
    max_file_mb: int | None = 2048
    network: bool = True

    @classmethod
    def off(cls) -> "Limits":
        return cls(memory_mb=None, cpu_seconds=None, max_processes=None, max_file_mb=None, network=True)

    @property
    def active(self) -> bool:
        return self != Limits.off()

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str | None) -> "Limits":
        return cls(**json.loads(text)) if text else cls.off()


def _set(which: int, value: int) -> None:
    soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, hard if hard != resource.RLIM_INFINITY else value))


def apply_in_kernel(limits: Limits) -> None:
    """Apply ``limits`` to the current process (the kernel, before ipykernel starts)."""
    if not limits.network:
        isolate_network()
    if limits.memory_mb is not None:
        _set(resource.RLIMIT_AS, limits.memory_mb * _MB)
    if limits.cpu_seconds is not None:
        _set(resource.RLIMIT_CPU, limits.cpu_seconds)
    if limits.max_processes is not None:
        _set(resource.RLIMIT_NPROC, limits.max_processes)
    if limits.max_file_mb is not None:
        # Without this a write past the limit kills the kernel (SIGXFSZ); ignored, it is an OSError.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _set(resource.RLIMIT_FSIZE, limits.max_file_mb * _MB)


def isolate_network() -> None:
    """Move this process into a new, empty network namespace. Raises ``OSError`` if impossible."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) == 0:
        return
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot create a network namespace: {os.strerror(err)}")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
