"""The kernel process entry point named by our kernelspec, and the confinement it applies.

``python -m kernel_agent.kernel.launcher -f CONNECTION_FILE [ipykernel options]``:
take the session's limits (``KERNEL_AGENT_LIMITS``) and cgroup
(``KERNEL_AGENT_CGROUP``) out of the environment, confine this process with
them (``confine``), then become an ordinary ipykernel in the same process.
Exit code 97 means a requested confinement could not be set up; the reason
is on stderr (the session's ``kernel.log``). What each limit means is
``limits.py``'s docstring.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import resource
import signal
import socket
import struct
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from kernel_agent.kernel.limits import (
    CGROUP_ENV,
    CONFINEMENT_FAILED,
    CPU_HARD_GRACE_S,
    LIMITS_ENV,
    MB,
    Limits,
    ProcessCgroup,
)

__all__ = ["CONFINEMENT_FAILED", "confine", "isolate_network", "main", "read_env"]

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000


def main(argv: list[str] | None = None) -> None:
    limits: Limits | None = None
    try:
        limits, cgroup = read_env(os.environ)
        confine(limits, cgroup)
    except (OSError, ValueError) as exc:  # ConfigError is a ValueError
        sys.stderr.write(f"kernel-agent launcher: cannot confine the kernel as asked ({limits}): {exc}\n")
        sys.exit(CONFINEMENT_FAILED)
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance(argv=sys.argv[1:] if argv is None else argv)


def read_env(environ: MutableMapping[str, str]) -> tuple[Limits, ProcessCgroup | None]:
    """Take (and remove) the hand-over variables. Raises ``ConfigError``."""
    limits = Limits.from_env(environ.pop(LIMITS_ENV, None))
    path = environ.pop(CGROUP_ENV, None)
    return limits, ProcessCgroup(path) if path else None


def confine(limits: Limits, cgroup: ProcessCgroup | None = None) -> None:
    """Apply ``limits`` to this process, before ipykernel starts.

    Joins ``cgroup`` first, while the process still may; isolates the
    network last. Raises ``OSError`` when a confinement cannot be set up.
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if cgroup is not None:
        cgroup.join()
    elif limits.max_processes is not None:
        _set_limit(resource.RLIMIT_NPROC, _user_task_count() + limits.max_processes)
    if limits.memory_mb is not None:
        _set_limit(resource.RLIMIT_AS, limits.memory_mb * MB)
    if limits.cpu_seconds is not None:
        _set_limit(resource.RLIMIT_CPU, limits.cpu_seconds, hard=limits.cpu_seconds + CPU_HARD_GRACE_S)
    if limits.max_file_mb is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an OSError in the code, not a dead kernel
        _set_limit(resource.RLIMIT_FSIZE, limits.max_file_mb * MB)
    if not limits.network:
        isolate_network()
    elif limits.user_namespace is not False:
        try:
            _enter_user_namespace(0)
        except OSError as exc:
            if limits.user_namespace:
                raise
            sys.stderr.write(f"kernel-agent launcher: no user namespace ({exc}); "
                             "code in this kernel can read its owner's environment\n")


def _set_limit(which: int, value: int, *, hard: int | None = None) -> None:
    """Lower the soft and the hard limit, so the code cannot raise them again (without privilege)."""
    _, current_hard = resource.getrlimit(which)
    hard = value if hard is None else hard
    if current_hard != resource.RLIM_INFINITY:
        hard = min(hard, current_hard)
    resource.setrlimit(which, (min(value, hard), hard))


def _user_task_count() -> int:
    """Processes and threads the real user has now: what ``RLIMIT_NPROC`` counts."""
    uid, total = str(os.getuid()), 0
    for status in _proc_status_files():
        try:
            lines = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if lines.get("Uid", "").split()[:1] == [uid]:
            total += int(lines.get("Threads", "1").strip() or 1)
    return total


def _proc_status_files() -> Iterator[Path]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield entry / "status"


def isolate_network() -> None:
    """Move this process into a new network namespace with only a loopback. Raises ``OSError``.

    A new user namespace comes with it where possible, so that not even root
    code can join the host's network namespace again (``setns``); a bare
    network namespace (needs root) is the fallback.
    """
    try:
        _enter_user_namespace(_CLONE_NEWNET)
    except OSError:
        _unshare(_CLONE_NEWNET, "a network namespace")
    _loopback_up()


def _enter_user_namespace(extra_flags: int) -> None:
    """Enter a new user namespace (plus ``extra_flags`` namespaces), mapped to our own ids.

    From there the process keeps its files and its uid, but loses every
    privilege over processes outside it: it cannot ptrace them or read their
    ``/proc/<pid>/environ``. Raises ``OSError``.
    """
    uid, gid = os.getuid(), os.getgid()
    _unshare(_CLONE_NEWUSER | extra_flags, "a user namespace")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def _unshare(flags: int, what: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot create {what}: {os.strerror(err)}")


def _loopback_up() -> None:
    """Bring up the namespace's own ``lo``, so servers inside the kernel can still talk to each other."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh22x", b"lo", flags | iff_up))


if __name__ == "__main__":
    main()
