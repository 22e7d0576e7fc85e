"""Confinement of the kernel process: ``Limits``, what a session holds for one kernel, the words for a death.

Owns the resource limits, the sandbox mode and the no-network switch as a
value (``Limits``) and what a session holds for one kernel (``Confinement``:
the environment that hands the limits to the launcher, the kernel's cgroups,
how an exit status is told). The cgroups themselves are ``cgroup.py``'s,
the sandbox ``bwrap.py``'s; applying the rlimits inside the kernel process
is ``inside/launcher.py``'s job; starting kernels is ``providers/local.py``'s.

How each limit is enforced (Linux):

* ``memory_mb``: twice. ``RLIMIT_AS`` per process: an allocation past it
  raises ``MemoryError`` in the analysed code and the kernel lives on with
  its state (the common case, which lets the model react). It bounds address
  space, not resident memory, so it sits well above what the scientific
  stack reserves (see ``default_memory_mb``). And a memory cgroup for the
  whole process tree (where the machine has a writable memory controller):
  resident memory of the kernel and every child together, ``/dev/shm``
  pages included, at most ``memory_mb``; past it the kernel's OOM killer
  ends the largest process (state lost), named as such in the result.
* ``cpu_seconds``: ``RLIMIT_CPU`` over the kernel's lifetime. At the limit
  ``SIGXCPU`` ends the kernel; the session reports it and restarts a fresh one.
* ``max_processes``: ``pids.max`` of a cgroup made for this kernel under the
  session's own pids cgroup (v1 or v2); it counts threads too. Without a
  writable pids controller the launcher falls back to ``RLIMIT_NPROC``, which
  counts all processes of the user (it is set to their current number plus
  the limit) and which Linux does not enforce for root.
* ``max_file_mb``: ``RLIMIT_FSIZE`` with ``SIGXFSZ`` ignored, so writing past
  it is an ``OSError`` (EFBIG), not a dead kernel.
* ``network``: off by default (``None`` resolves to False in the sandbox):
  the sandbox (``bwrap.py``) gets a network namespace of its own (only its
  loopback), so model code reaches neither the world nor this machine's
  services (the MCP server, the service, a database on 127.0.0.1). ``True``
  (``--network``) gives the sandbox a network namespace of its own behind pasta
  (``network.py``): the outside world, never this machine's loopback or services.
  Unconfined (``sandbox="off"``), on means the host's own network. An explicit ``False`` needs the
  sandbox: with ``sandbox="off"`` it is a ``ConfigError``; unconfined
  (``sandbox="off"``) the default resolves to on, as nothing could cut it.
* ``sandbox``: ``"strict"`` (default) runs the kernel inside bubblewrap
  (``bwrap.py`` says what it sees) under a system-call filter (``seccomp.py``)
  and with no nested user namespaces; when that is impossible here the
  session raises ``SandboxUnavailableError``, never runs unconfined in
  silence. ``"off"`` runs it unconfined, on purpose.
* Core dumps are always off: a crashing kernel must not drop its memory,
  which holds the data, into the workspace.

Inside the sandbox the kernel has no capability, so it can neither raise its
rlimits nor leave its cgroup (``/sys`` is read-only there). With
``sandbox="off"`` these limits stop accidents only: root code can undo them.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ...errors import ConfigError
from ..inside.handover import CGROUP_ENV, CONFINEMENT_FAILED, CPU_HARD_GRACE_S, LIMITS_ENV, MB, OWNER_ENV
from . import seccomp
from .bwrap import SandboxMode, check_mode
from .cgroup import ProcessCgroup, join_prefix
from .seccomp import SECCOMP_FD

__all__ = [
    "CGROUP_ENV",
    "CONFINEMENT_FAILED",
    "LIMITS_ENV",
    "OWNER_ENV",
    "Confinement",
    "Limits",
    "default_memory_mb",
    "describe_exit",
]

log = logging.getLogger(__name__)

# The tree's CPU budget is enforced this much past the limit, so that one process using it all
# alone meets its own RLIMIT_CPU first (SIGXCPU, the more precise words); bwrap and the shell that
# start the kernel count in the tree too.
TREE_CPU_TOLERANCE_S = 1.0


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
    ``network``: None (default) is off in the sandbox and on unconfined; False: no network at all,
    not even to this machine (needs the sandbox); True: in the sandbox, a network namespace of its own behind
    pasta (the outside world, never this machine's services); unconfined, the host's network.
    ``sandbox``: ``"strict"`` or ``"off"`` (``bwrap.py``).
    Raises ``ConfigError`` for a value that is not a positive int (or None),
    an unknown sandbox mode, or ``network=False`` without the sandbox.
    """

    memory_mb: int | None = field(default_factory=default_memory_mb)
    cpu_seconds: int | None = None
    max_processes: int | None = 1024
    max_file_mb: int | None = 2048
    network: bool | None = None
    sandbox: SandboxMode = "strict"

    def __post_init__(self) -> None:
        for name in ("memory_mb", "cpu_seconds", "max_processes", "max_file_mb"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ConfigError(f"Limits.{name} must be a positive whole number or None, not {value!r}")
        check_mode(self.sandbox)
        if self.network is None:  # off wherever the sandbox can cut it
            object.__setattr__(self, "network", self.sandbox == "off")
        if not isinstance(self.network, bool):
            raise ConfigError(f"Limits.network must be True or False, not {self.network!r}")
        if not self.network and self.sandbox == "off":
            raise ConfigError("Limits(network=False) needs the sandbox: it cannot be combined with sandbox='off'")

    @classmethod
    def off(cls) -> Limits:
        """No resource limit at all, network on; still in the sandbox (``replace(..., sandbox="off")`` for none)."""
        return cls(memory_mb=None, cpu_seconds=None, max_processes=None, max_file_mb=None, network=True)

    def describe(self) -> str:
        """The confinement in force, in words (for notebook metadata, events and warnings)."""
        parts = [
            (
                f"sandbox: bubblewrap (strict); {seccomp.describe()}; no nested user namespaces"
                if self.sandbox == "strict"
                else "sandbox: OFF (unconfined)"
            ),
            f"network: {'on' if self.network else 'off'}",
        ]
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
    def from_env(cls, text: str | None) -> Limits:
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


# ------------------------------------------------------------ session side
class Confinement:
    """What a session holds for its kernel: the limits, the cgroups, the words for a death.

    ``prepare`` makes the cgroups (pids when a process limit is set, memory
    when a memory limit is); ``env`` goes into the kernel's environment for
    the launcher; ``launch_prefix`` joins the cgroups; ``release`` removes
    them and everything still in them, once the kernel is gone.
    """

    def __init__(
        self,
        limits: Limits,
        cgroup: ProcessCgroup | None = None,
        memory: ProcessCgroup | None = None,
        cpu: ProcessCgroup | None = None,
    ) -> None:
        self.limits = limits
        self.cgroup = cgroup  # pids
        self.memory = memory
        self.cpu = cpu  # counts the tree's CPU time when cpu_seconds is set
        self.cpu_killed = False  # set by ``enforce_cpu``: the next death is the tree's CPU limit
        self._cpu_base = 0.0  # the tree's CPU time when the current kernel started
        self._oom_kills = _oom_kill_count()

    def __repr__(self) -> str:
        return f"<Confinement {self.limits} cgroups={[str(c.path) for c in self._cgroups]}>"

    @classmethod
    def prepare(cls, limits: Limits) -> Confinement:
        cgroup = ProcessCgroup.create(limits.max_processes) if limits.max_processes is not None else None
        memory = ProcessCgroup.create_memory(limits.memory_mb) if limits.memory_mb is not None else None
        cpu = None
        if limits.cpu_seconds is not None:  # cgroup v2 counts CPU in any cgroup; v1 needs a cpuacct one
            cpu = next((c for c in (cgroup, memory) if c is not None and c.cpu_seconds() is not None), None)
            cpu = cpu or ProcessCgroup.create_cpu_account()
        return cls(limits, cgroup, memory, cpu)

    @property
    def _cgroups(self) -> list[ProcessCgroup]:
        return list(dict.fromkeys(c for c in (self.cgroup, self.memory, self.cpu) if c is not None))

    def new_kernel(self) -> None:
        """A (re)started kernel begins with the whole CPU budget: count from here."""
        self._cpu_base = (self.cpu.cpu_seconds() if self.cpu is not None else None) or 0.0

    def tree_cpu_seconds(self) -> float | None:
        """CPU time the current kernel and every process it started have used together
        (None: not counted on this machine)."""
        used = self.cpu.cpu_seconds() if self.cpu is not None else None
        return None if used is None else used - self._cpu_base

    def enforce_cpu(self) -> bool:
        """Kill the whole process tree once its CPU time together passes ``cpu_seconds``.

        ``RLIMIT_CPU`` counts each process alone (a child, or a loop left spinning
        in a thread, gets a fresh allowance); this counts them all, whenever the
        session looks (every death poll while code runs, and before each execution).
        Returns True when it killed; the death is then reported as this limit.
        """
        used = self.tree_cpu_seconds()
        if self.limits.cpu_seconds is None or used is None or used <= self.limits.cpu_seconds + TREE_CPU_TOLERANCE_S:
            return False
        log.warning(
            "the kernel's process tree used %.1f s of CPU (limit %d s): killing it", used, self.limits.cpu_seconds
        )
        self.cpu_killed = True
        self.kill_tree()
        return True

    @property
    def env(self) -> dict[str, str]:
        env = {LIMITS_ENV: self.limits.to_env(), OWNER_ENV: str(os.getpid())}
        if self.cgroup is not None:
            env[CGROUP_ENV] = self.cgroup.path.name
        return env

    def launch_prefix(
        self,
        program: Path | None = None,
        *,
        more: Sequence[tuple[int, str]] = (),
        also: str | None = None,
        copies: Sequence[tuple[int, int]] = (),
    ) -> list[str]:
        """What goes before the kernel's command (bwrap's, when sandboxed) to put it into its cgroups and,
        with ``program`` (the compiled system-call filter), to open that on ``SECCOMP_FD`` for bwrap; ``more``
        ``also`` and ``copies`` as ``cgroup.join_prefix`` takes them (a forked kernel's namespaces, its pid,
        bwrap's info descriptor)."""
        descriptor = (SECCOMP_FD, program) if program is not None else None
        if not (self._cgroups or descriptor or more or copies):
            return []
        also = also if self._cgroups else None
        return join_prefix(self._cgroups, descriptor, more=more, also=also, copies=copies)

    def describe_exit(self, returncode: int) -> str:
        """Why the kernel ended, in words, e.g. ``signal SIGXCPU: CPU time limit of 60 s reached``."""
        oom_kills = _oom_kill_count()
        oom_killed = oom_kills is not None and self._oom_kills is not None and oom_kills > self._oom_kills
        self._oom_kills = oom_kills
        if self.cpu_killed:
            self.cpu_killed = False
            return (
                f"signal SIGKILL: CPU time limit of {self.limits.cpu_seconds} s for the kernel and every "
                "process it started, together, reached"
            )
        return describe_exit(returncode, self.limits, oom_killed=oom_killed)

    def kill_tree(self) -> None:
        """Kill every process in the kernel's cgroups and wait until they are gone (the cgroups stay)."""
        for cgroup in self._cgroups:
            cgroup.kill_all()

    def release(self) -> None:
        """Kill whatever the kernel left in its cgroups and remove them. Idempotent."""
        for cgroup in self._cgroups:
            cgroup.remove()


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
            memory = (
                f"; memory limit {limits.memory_mb:,} MB per process and for all processes together"
                if limits.memory_mb
                else ""
            )
            return f"out of memory (the system's out-of-memory killer ran{memory})"
        cpu = f", or the hard CPU time limit of {limits.cpu_seconds + CPU_HARD_GRACE_S} s" if limits.cpu_seconds else ""
        return f"killed from outside{cpu}"
    if signum == signal.SIGXCPU:
        return f"CPU time limit of {limits.cpu_seconds} s reached" if limits.cpu_seconds else "CPU time limit reached"
    if signum == signal.SIGXFSZ:
        size = f" of {limits.max_file_mb} MB" if limits.max_file_mb else ""
        return f"file size limit{size} exceeded"
    return _SIGNAL_WORDS.get(signum, "")


_SIGNAL_WORDS: dict[int, str] = {
    signal.SIGSEGV: "segmentation fault",
    signal.SIGBUS: "bus error",
    signal.SIGABRT: "aborted",
    signal.SIGFPE: "floating-point exception",
    signal.SIGILL: "illegal instruction",
    signal.SIGTERM: "terminated",
}


def _oom_kill_count() -> int | None:
    try:
        for line in Path("/proc/vmstat").read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
