"""Confinement of the kernel process: ``Limits``, the kernel's cgroup, the words for a death.

Owns the resource limits and the no-network switch as a value (``Limits``),
the kernel's own pids cgroup (``ProcessCgroup``) and what a session holds
for one kernel (``Confinement``: the environment that hands the limits to
the launcher, the cgroup, how an exit status is told). Applying the limits
inside the kernel process is ``launcher.py``'s job; starting kernels is
``session.py``'s.

How each limit is enforced (Linux):

* ``memory_mb``: ``RLIMIT_AS``. An allocation past it raises ``MemoryError``
  in the analysed code and the kernel lives on with its state. It bounds
  address space, not resident memory, so it sits well above what the
  scientific stack reserves (see ``default_memory_mb``), and it applies to
  each process the code starts, not to their sum. No memory cgroup is used:
  hitting one means an OOM kill (state lost), where ``MemoryError`` lets the
  model react; a kill by the system's OOM killer is still named as such.
* ``cpu_seconds``: ``RLIMIT_CPU`` over the kernel's lifetime. At the limit
  ``SIGXCPU`` ends the kernel; the session reports it and restarts a fresh one.
* ``max_processes``: ``pids.max`` of a cgroup made for this kernel under the
  session's own pids cgroup (v1 or v2); it counts threads too. Without a
  writable pids controller the launcher falls back to ``RLIMIT_NPROC``, which
  counts all processes of the user (it is set to their current number plus
  the limit) and which Linux does not enforce for root.
* ``max_file_mb``: ``RLIMIT_FSIZE`` with ``SIGXFSZ`` ignored, so writing past
  it is an ``OSError`` (EFBIG), not a dead kernel.
* ``network=False``: the sandbox (``sandbox.py``) gets a network namespace of
  its own (only its loopback). It needs the sandbox: with ``sandbox="off"``
  it is a ``ConfigError``.
* ``sandbox``: ``"strict"`` (default) runs the kernel inside bubblewrap
  (``sandbox.py`` says what it sees); when that is impossible here the
  session raises ``SandboxUnavailableError``, never runs unconfined in
  silence. ``"off"`` runs it unconfined, on purpose.
* Core dumps are always off: a crashing kernel must not drop its memory,
  which holds the data, into the workspace.

Inside the sandbox the kernel has no capability, so it can neither raise its
rlimits nor leave its cgroup (``/sys`` is read-only there). With
``sandbox="off"`` these limits stop accidents only: root code can undo them.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..errors import ConfigError
from .sandbox import SandboxMode, check_mode

__all__ = [
    "OWNER_ENV",
    "CGROUP_ENV",
    "CONFINEMENT_FAILED",
    "LIMITS_ENV",
    "Confinement",
    "Limits",
    "ProcessCgroup",
    "default_memory_mb",
    "describe_exit",
    "pid_alive",
]

log = logging.getLogger(__name__)

LIMITS_ENV = "KERNEL_AGENT_LIMITS"
CGROUP_ENV = "KERNEL_AGENT_CGROUP"  # set when the kernel's command joins a pids cgroup
# The pid of the kernel's owner, kept in the kernel's /proc/<pid>/environ so that leftovers can be
# told by owner even inside a sandbox (where jupyter_client's JPY_PARENT_PID must be unset).
OWNER_ENV = "KERNEL_AGENT_OWNER"
CONFINEMENT_FAILED = 97  # the launcher's exit code when a confinement cannot be set up
CGROUP_PREFIX = "kernel-agent-"
MB = 1024 * 1024
CPU_HARD_GRACE_S = 5  # SIGKILL this long after SIGXCPU, should the code ignore SIGXCPU


def default_memory_mb() -> int:
    """Three quarters of physical memory, and never below 4 GiB.

    Address space is not resident memory. Measured on a 2-core machine: an
    idle kernel reserves 0.7 GB, 1.1 GB once numpy, pandas, pyarrow and
    pyplot are imported, 2.5 GB after a groupby and a parquet round trip of
    a 40 MB frame, while only 0.34 GB is resident: untouched malloc arenas
    (64 MB per thread) and pyarrow's 1 GB mimalloc reservation. Under a
    1.5 GB limit pyarrow and thread pools failed; under 2 GB an 800 MB
    array was refused; 4 GB ran it all. More cores mean more threads and
    more reserved space; CUDA reserves far more, so GPU work needs ``None``.
    """
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 4096
    return max(4096, physical * 3 // 4 // MB)


@dataclass(frozen=True)
class Limits:
    """Per-kernel limits; ``None`` switches one off, ``Limits.off()`` all of them.

    ``memory_mb``: address space of the kernel process (``MemoryError`` past
    it); default three quarters of physical memory, at least 4096.
    ``cpu_seconds``: CPU time over the kernel's life, then it is ended and
    restarted; default off, as the per-execute timeout already bounds each cell.
    ``max_processes``: processes and threads of the kernel and its children
    (1024). ``max_file_mb``: largest file the code may write (2048).
    ``network=False``: no network at all, not even to this machine (needs the sandbox).
    ``sandbox``: ``"strict"`` or ``"off"`` (``sandbox.py``).
    Raises ``ConfigError`` for a value that is not a positive int (or None),
    an unknown sandbox mode, or ``network=False`` without the sandbox.
    """

    memory_mb: int | None = field(default_factory=default_memory_mb)
    cpu_seconds: int | None = None
    max_processes: int | None = 1024
    max_file_mb: int | None = 2048
    network: bool = True
    sandbox: SandboxMode = "strict"

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "max_processes", "max_file_mb"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"Limits.{name} must be a positive whole number or None, not {value!r}")
        if not isinstance(self.network, bool):
            raise ConfigError(f"Limits.network must be True or False, not {self.network!r}")
        check_mode(self.sandbox)
        if not self.network and self.sandbox == "off":
            raise ConfigError("Limits(network=False) needs the sandbox: it cannot be combined with sandbox='off'")

    @classmethod
    def off(cls) -> "Limits":
        """No resource limit at all, network on; still in the sandbox (``replace(..., sandbox="off")`` for none)."""
        return cls(memory_mb=None, cpu_seconds=None, max_processes=None, max_file_mb=None, network=True)

    def describe(self) -> str:
        """The confinement in force, in words (for notebook metadata, events and warnings)."""
        parts = ["sandbox: bubblewrap (strict)" if self.sandbox == "strict" else "sandbox: OFF (unconfined)",
                 f"network: {'on' if self.network else 'off'}"]
        if self.memory_mb is not None:
            parts.append(f"memory: {self.memory_mb:,} MB per process")
        if self.max_processes is not None:
            parts.append(f"processes: {self.max_processes:,}")
        if self.cpu_seconds is not None:
            parts.append(f"cpu: {self.cpu_seconds} s")
        if self.max_file_mb is not None:
            parts.append(f"file size: {self.max_file_mb:,} MB")
        return "; ".join(parts)

    @property
    def active(self) -> bool:
        return self != Limits.off()

    def to_env(self) -> str:
        """The value of ``LIMITS_ENV`` that hands these limits to the launcher."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str | None) -> "Limits":
        """Read ``to_env()``'s text; none means ``off()``. Raises ``ConfigError``."""
        if not text:
            return cls.off()
        try:
            values = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{LIMITS_ENV} is not JSON: {text!r}") from exc
        known = {f.name for f in fields(cls)}
        if not isinstance(values, dict) or set(values) - known:
            raise ConfigError(f"{LIMITS_ENV} holds unknown settings: {text!r}")
        return cls(**values)


# --------------------------------------------------------------------- cgroup
class ProcessCgroup:
    """One kernel's pids cgroup: the session makes it, the kernel's command joins it, the session removes it.

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
    def create(cls, max_processes: int) -> "ProcessCgroup | None":
        """Make a cgroup with ``pids.max = max_processes``; None where no pids controller is writable."""
        for parent in _pids_parents():
            cls.sweep_stale(parent)
            path = parent / f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                (path / "pids.max").write_text(str(max_processes))
            except OSError:  # cgroup v2 without pids in the parent's subtree_control
                _rmdir(path)
                continue
            return cls(path)
        log.info("no writable pids cgroup here; the process limit falls back to RLIMIT_NPROC")
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
            owner = path.name[len(CGROUP_PREFIX):].split("-", 1)[0]
            if owner.isdigit() and int(owner) != os.getpid() and not pid_alive(int(owner)):
                _rmdir(path)

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def launch_prefix(self) -> list[str]:
        """A command prefix that moves itself into this cgroup, then ``exec``s the rest of the command.

        The kernel's whole process tree (bwrap included) is then inside before
        any model code runs; inside the sandbox ``/sys`` is read-only, so no
        process there can move itself out.
        """
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

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


def _pids_parents(mountinfo: str | None = None, own: str | None = None) -> list[Path]:
    """Where a pids cgroup for a kernel can go: the session's own cgroup in each pids hierarchy.

    Cgroup v1 hierarchies that carry ``pids`` come first, then cgroup v2.
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
        elif len(parts) == 3 and "pids" in parts[1].split(","):
            own_v1 = parts[2]
    v1, v2 = [], []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        left_fields, right_fields = left.split(), right.split()
        if len(left_fields) < 5 or len(right_fields) < 3:
            continue
        root, mount_point, fstype, options = left_fields[3], left_fields[4], right_fields[0], right_fields[2]
        if fstype == "cgroup" and "pids" in options.split(",") and own_v1 is not None:
            v1.append(_join_cgroup_path(mount_point, root, own_v1))
        elif fstype == "cgroup2" and own_v2 is not None:
            v2.append(_join_cgroup_path(mount_point, root, own_v2))
    return [path for path in v1 + v2 if path is not None]


def _join_cgroup_path(mount_point: str, root: str, own: str) -> Path | None:
    if root != "/" and not (own + "/").startswith(root.rstrip("/") + "/"):
        return None
    relative = own[len(root.rstrip("/")):] if root != "/" else own
    return Path(_unescape_mount(mount_point)) / relative.lstrip("/")


def _unescape_mount(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (what stale-owner sweeps ask)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------ session side
class Confinement:
    """What a session holds for its kernel: the limits, the cgroup, the words for a death.

    ``prepare`` makes the cgroup (when a process limit is set); ``env`` goes
    into the kernel's environment for the launcher; ``launch_prefix`` joins
    the cgroup; ``release`` removes the cgroup and everything still in it,
    once the kernel is gone.
    """

    def __init__(self, limits: Limits, cgroup: ProcessCgroup | None = None) -> None:
        self.limits = limits
        self.cgroup = cgroup
        self._oom_kills = _oom_kill_count()

    def __repr__(self) -> str:
        return f"<Confinement {self.limits} cgroup={self.cgroup.path if self.cgroup else None}>"

    @classmethod
    def prepare(cls, limits: Limits) -> "Confinement":
        cgroup = ProcessCgroup.create(limits.max_processes) if limits.max_processes is not None else None
        return cls(limits, cgroup)

    @property
    def env(self) -> dict[str, str]:
        env = {LIMITS_ENV: self.limits.to_env(), OWNER_ENV: str(os.getpid())}
        if self.cgroup is not None:
            env[CGROUP_ENV] = self.cgroup.path.name
        return env

    def launch_prefix(self) -> list[str]:
        """What goes before the kernel's command (bwrap's, when sandboxed) to put it into its cgroup."""
        return self.cgroup.launch_prefix() if self.cgroup is not None else []

    def describe_exit(self, returncode: int) -> str:
        """Why the kernel ended, in words, e.g. ``signal SIGXCPU: CPU time limit of 60 s reached``."""
        oom_kills = _oom_kill_count()
        oom_killed = oom_kills is not None and self._oom_kills is not None and oom_kills > self._oom_kills
        self._oom_kills = oom_kills
        return describe_exit(returncode, self.limits, oom_killed=oom_killed)

    def release(self) -> None:
        """Kill whatever the kernel left in its cgroup and remove the cgroup. Idempotent."""
        if self.cgroup is not None:
            self.cgroup.remove()


def describe_exit(returncode: int, limits: Limits, *, oom_killed: bool = False) -> str:
    """A kernel's exit status in words, naming the limit it most likely hit."""
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = str(-returncode)
    return f"signal {name}" + (f": {hint}" if (hint := _signal_hint(-returncode, limits, oom_killed)) else "")


def _signal_hint(signum: int, limits: Limits, oom_killed: bool) -> str:
    if signum == signal.SIGKILL:
        if oom_killed:
            memory = f"; memory limit {limits.memory_mb} MB per process" if limits.memory_mb else ""
            return f"out of memory (the system's out-of-memory killer ran{memory})"
        cpu = f", or the hard CPU time limit of {limits.cpu_seconds + CPU_HARD_GRACE_S} s" if limits.cpu_seconds else ""
        return f"killed from outside{cpu}"
    if signum == signal.SIGXCPU:
        return f"CPU time limit of {limits.cpu_seconds} s reached" if limits.cpu_seconds else "CPU time limit reached"
    if signum == signal.SIGXFSZ:
        size = f" of {limits.max_file_mb} MB" if limits.max_file_mb else ""
        return f"file size limit{size} exceeded"
    return _SIGNAL_WORDS.get(signum, "")


_SIGNAL_WORDS = {
    signal.SIGSEGV: "segmentation fault", signal.SIGBUS: "bus error", signal.SIGABRT: "aborted",
    signal.SIGFPE: "floating-point exception", signal.SIGILL: "illegal instruction", signal.SIGTERM: "terminated",
}


def _oom_kill_count() -> int | None:
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
