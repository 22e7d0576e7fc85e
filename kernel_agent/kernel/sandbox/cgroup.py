"""The kernel's cgroups: ``ProcessCgroup`` (one per controller), the prefix that joins them.

Owns making a cgroup for one kernel under the session's own cgroup (pids:
``pids.max``; memory: ``memory.max`` or v1's ``memory.limit_in_bytes``, for
the whole process tree), the launch-command prefix that moves the kernel's
process tree in before anything runs, killing what is left inside and
removing it, and sweeping leftovers of owners that were killed. Which limits
exist is ``limits.py``'s; starting kernels is ``providers/local.py``'s.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from ...errors import ConfigError

__all__ = ["CGROUP_PREFIX", "ProcessCgroup", "join_prefix", "pid_alive"]

log = logging.getLogger(__name__)

CGROUP_PREFIX = "kernel-agent-"


class ProcessCgroup:
    """One kernel's cgroup in one hierarchy: the session makes it, the kernel's command joins it,
    the session removes it.

    Its name carries the owner's pid (``kernel-agent-<pid>-<hex>``) so that
    ``sweep_stale`` can tell leftovers of a killed owner. It never acts on a
    directory without that prefix. Removing it kills whatever is still inside,
    including processes that left the kernel's process group.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.name.startswith(CGROUP_PREFIX):
            raise ConfigError(f"not a kernel-agent cgroup: {self.path}")

    def __repr__(self) -> str:
        return f"<ProcessCgroup {self.path}>"

    @classmethod
    def create(cls, max_processes: int) -> ProcessCgroup | None:
        """Make a cgroup with ``pids.max = max_processes``; None where no pids controller is writable."""
        made = cls._make("pids", lambda path: {"pids.max": str(max_processes)})
        if made is None:
            log.info("no writable pids cgroup here; the process limit falls back to RLIMIT_NPROC")
        return made

    @classmethod
    def create_memory(cls, memory_mb: int) -> ProcessCgroup | None:
        """Make a memory cgroup capping the resident memory of everything inside (tmpfs pages
        such as ``/dev/shm`` included) at ``memory_mb``; None where no memory controller is writable."""
        limit = str(memory_mb * 1024 * 1024)
        made = cls._make(
            "memory", lambda path: {"memory.max" if (path / "memory.max").exists() else "memory.limit_in_bytes": limit}
        )
        if made is None:
            log.info("no writable memory cgroup here; memory is bounded per process only (RLIMIT_AS)")
        return made

    @classmethod
    def create_cpu_account(cls) -> ProcessCgroup | None:
        """Make a cgroup that counts the CPU time of everything inside (v1 ``cpuacct``, v2 ``cpu.stat``);
        None where none is writable. It limits nothing by itself: the session reads it (``cpu_seconds``)."""
        made = cls._make("cpuacct", lambda path: {})
        if made is None:
            log.info("no writable cpu accounting cgroup here; CPU time is bounded per process only (RLIMIT_CPU)")
        return made

    def cpu_seconds(self) -> float | None:
        """CPU time used by every process that was ever inside, together (None: not readable here)."""
        try:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9  # cgroup v1, in ns
        except (OSError, ValueError):
            pass
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():  # cgroup v2, in µs
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        except (OSError, ValueError):
            pass
        return None

    @classmethod
    def _make(cls, controller: str, settings: Callable[[Path], dict[str, str]]) -> ProcessCgroup | None:
        for parent in _cgroup_parents(controller):
            cls.sweep_stale(parent)
            path = parent / f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                for name, value in settings(path).items():
                    (path / name).write_text(value)
            except OSError:  # cgroup v2 without the controller in the parent's subtree_control
                _rmdir(path)
                continue
            return cls(path)
        return None

    @staticmethod
    def sweep_stale(parent: Path) -> None:
        """Remove the empty cgroups of owners that no longer exist.

        Only empty ones: an owner in another pid namespace may look dead
        from here, and its kernels must not be killed.
        """
        try:
            candidates = list(parent.glob(f"{CGROUP_PREFIX}*-*"))
        except OSError:
            return
        for path in candidates:
            owner = path.name[len(CGROUP_PREFIX) :].split("-", 1)[0]
            if owner.isdigit() and int(owner) != os.getpid() and not pid_alive(int(owner)):
                _rmdir(path)

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def launch_prefix(self) -> list[str]:
        """A command prefix that moves itself into this cgroup, then ``exec``s the rest (``join_prefix``)."""
        return join_prefix([self])

    def oom_kills(self) -> int | None:
        """How many processes the memory controller killed in here (None: not a memory cgroup)."""
        for name in ("memory.events", "memory.oom_control"):  # cgroup v2, v1
            try:
                for line in (self.path / name).read_text().splitlines():
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
            except (OSError, ValueError):
                continue
        return None

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process inside until none is left; False if some outlived ``timeout``."""
        deadline = time.monotonic() + timeout
        while pids := [pid for pid in self.pids() if pid != os.getpid()]:
            if time.monotonic() > deadline:
                return False
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.005)  # let the kills land before listing again
        return True

    def remove(self, timeout: float = 5.0) -> bool:
        """Kill what is inside and remove the cgroup. Returns whether it is gone."""
        self.kill_all(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.warning("could not remove the kernel's cgroup %s: %s", self.path, exc)
                    return False
            time.sleep(0.005)  # exited tasks leave the cgroup asynchronously


def join_prefix(
    cgroups: Sequence[ProcessCgroup],
    descriptor: tuple[int, Path] | None = None,
    *,
    more: Sequence[tuple[int, str]] = (),
    also: str | None = None,
    copies: Sequence[tuple[int, int]] = (),
) -> list[str]:
    """A command prefix that moves itself into every one of ``cgroups``, then ``exec``s the rest.

    The kernel's whole process tree (bwrap included) is then inside before
    any model code runs; inside the sandbox ``/sys`` is read-only, so no
    process there can move itself out. Exits 97 (``CONFINEMENT_FAILED``) if a join fails.
    ``descriptor`` (number, file): the rest also gets that file open for reading on that number (the
    sandbox's system-call filter, for bwrap), in the same shell: one exec less at every start; ``more``:
    further (number, path) pairs opened the same way. ``also``: one more pid moved into each cgroup
    with it (a kernel forked from a template, which no command of ours starts). ``copies``: (number, of)
    pairs, the rest gets descriptor ``of`` copied to ``number`` too.
    """
    opened = ([(descriptor[0], str(descriptor[1]))] if descriptor is not None else []) + list(more)
    also_join = '; [ -z "$also" ] || echo "$also" > "$1" || exit 97' if also is not None else ""
    joins = f'while [ "$1" != -- ]; do echo $$ > "$1" || exit 97{also_join}; shift; done; shift; '
    procs = [str(c.path / "cgroup.procs") for c in cgroups]
    if not opened and also is None and not copies:
        return ["/bin/sh", "-c", joins + 'exec "$@"', "sh", *procs, "--"]
    takes = "".join(f"f{int(number)}=$1; shift; " for number, _ in opened)
    takes += "also=$1; shift; " if also is not None else ""
    redirections = "".join(f' {int(number)}<"$f{int(number)}"' for number, _ in opened)
    redirections += "".join(f" {int(number)}>&{int(of)}" for number, of in copies)
    script = f'{takes}{joins}exec "$@"{redirections}'
    given = [path for _, path in opened] + ([also] if also is not None else [])
    return ["/bin/sh", "-c", script, "sh", *given, *procs, "--"]


def _cgroup_parents(controller: str, mountinfo: str | None = None, own: str | None = None) -> list[Path]:
    """Where a ``controller`` cgroup for a kernel can go: the session's own cgroup in each hierarchy
    that carries it. Cgroup v1 hierarchies come first, then cgroup v2.
    """
    if mountinfo is None or own is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
            own = Path("/proc/self/cgroup").read_text()
        except OSError:
            return []
    own_v1 = own_v2 = None
    for line in own.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[1] == "" and parts[0] == "0":
            own_v2 = parts[2]
        elif len(parts) == 3 and controller in parts[1].split(","):
            own_v1 = parts[2]
    v1, v2 = [], []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        left_fields, right_fields = left.split(), right.split()
        if len(left_fields) < 5 or len(right_fields) < 3:
            continue
        root, mount_point, fstype, options = left_fields[3], left_fields[4], right_fields[0], right_fields[2]
        if fstype == "cgroup" and controller in options.split(",") and own_v1 is not None:
            v1.append(_join_cgroup_path(mount_point, root, own_v1))
        elif fstype == "cgroup2" and own_v2 is not None:
            v2.append(_join_cgroup_path(mount_point, root, own_v2))
    return [path for path in v1 + v2 if path is not None]


def _join_cgroup_path(mount_point: str, root: str, own: str) -> Path | None:
    if root != "/" and not (own + "/").startswith(root.rstrip("/") + "/"):
        return None
    relative = own[len(root.rstrip("/")) :] if root != "/" else own
    return Path(_unescape_mount(mount_point)) / relative.lstrip("/")


def _unescape_mount(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (what stale-owner sweeps ask); False for a number no pid
    can be (a name or file someone else wrote may carry one)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True
