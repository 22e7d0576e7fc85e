"""Runtime dirs of the kernels this process starts: where they go (``runtime_root``), made and removed as one step
for observers, and those of killed owners swept (``sweep_stale_runtime_dirs``).

A runtime dir holds a kernel's connection file and log, and its owner's pid (``owner.pid``), by which a later
process tells a dir of a killed owner from a live one's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ..sandbox.cgroup import pid_alive

__all__ = ["make_runtime_dir", "remove_runtime_dir", "runtime_root", "sweep_stale_runtime_dirs"]

_RUNTIME_PREFIX = "kernel-agent-"
_OWNER_FILE = "owner.pid"
# A unix socket's path has at most 107 bytes; ours is <root>/kernel-agent-<8>/sockets/kernel-<port>-<n>.
_SOCKET_TAIL = len("/kernel-agent-xxxxxxxx/sockets/kernel-65535-99")
_SOCKET_PATH_MAX = 107
_SHORT_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")


def runtime_root() -> Path:
    """Where runtime dirs go: the temp dir, unless its path is too long for the kernel's ipc sockets
    (ZMQ: "File name too long"), then the first short, writable system temp dir. Raises nothing."""
    root = tempfile.gettempdir()
    if len(os.fsencode(root)) + _SOCKET_TAIL <= _SOCKET_PATH_MAX:
        return Path(root)
    for short in _SHORT_ROOTS:
        if os.path.isdir(short) and os.access(short, os.W_OK | os.X_OK):
            return Path(short)
    return Path(root)  # nothing shorter: the kernel's start will say why


def sweep_stale_runtime_dirs(root: str | None = None) -> list[Path]:
    """Remove runtime dirs (connection file, kernel log) left by owners that were killed.

    A dir is stale when the process that made it no longer exists. Its kernel
    has already exited by then (ipykernel's parent poller). Returns what was removed.
    """
    removed = []
    for folder in Path(root or runtime_root()).glob(f"{_RUNTIME_PREFIX}*"):
        try:
            owner = int((folder / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if owner != os.getpid() and not pid_alive(owner):
            remove_runtime_dir(folder)
            removed.append(folder)
    return removed


def make_runtime_dir() -> Path:
    """A new runtime dir that never exists without its owner file.

    The dir is built under a staging name and renamed into place, so a sweep or a
    leak check in another process never sees a ``kernel-agent-*`` dir whose owner
    is not yet written.
    """
    staging = Path(tempfile.mkdtemp(prefix=".staging-" + _RUNTIME_PREFIX, dir=runtime_root()))
    (staging / _OWNER_FILE).write_text(str(os.getpid()))
    final = staging.with_name(staging.name.removeprefix(".staging-"))
    os.rename(staging, final)  # mkdtemp's random suffix: the final name is free in practice
    return final


def remove_runtime_dir(folder: Path) -> None:
    """Remove a runtime dir as one step for observers: renamed away first, then deleted, so no
    ``kernel-agent-*`` dir is ever seen without its owner file (``make_runtime_dir``'s other half)."""
    doomed = folder.with_name(".removing-" + folder.name)
    try:
        os.rename(folder, doomed)
    except OSError:  # already gone, or another sweeper took it
        return
    shutil.rmtree(doomed, ignore_errors=True)
