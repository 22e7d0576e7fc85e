"""The kernel process entry point named by our kernelspec, and the rlimits it applies.

``python -I /abs/kernel_agent/_boot.py kernel_agent.kernel.inside.launcher -f CONNECTION_FILE [ipykernel options]``
(``_python.python_argv``: isolated, so nothing in the workspace, the kernel's current folder, is imported before the
limits hold; a launcher the code planted there is never the one that runs): take the session's limits
(``KERNEL_AGENT_LIMITS``) out of the environment, lower this process's rlimits to them (``confine``), then become an
ordinary ipykernel in the same process, with ``PYTHONPATH``'s absolute entries (which ``-I`` ignored) on its path.
``... launcher --exec ARGV...`` does the same for any other kernelspec's command (IRkernel, another environment's
ipykernel): confine, then ``execvp`` it, so the limits hold in that kernel too (rlimits survive ``exec``). It
already runs inside the sandbox and its cgroup (``sandbox/bwrap.py``, ``sandbox/limits.Confinement.launch_prefix``):
namespaces are bwrap's job, not ours.
Exit code 97 means a requested limit could not be
set; the reason is on stderr (the session's ``kernel.log``). What each limit
means is ``sandbox/limits.py``'s docstring; what is handed over, ``handover.py``.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from .handover import CGROUP_ENV, CONFINEMENT_FAILED, CPU_HARD_GRACE_S, LIMITS_ENV, MB, OWNER_ENV, Rlimits

__all__ = ["CONFINEMENT_FAILED", "EXEC_FLAG", "confine", "main", "read_env"]

EXEC_FLAG = "--exec"  # what follows is another kernel's command, run confined in place of ipykernel


def main(argv: list[str] | None = None) -> None:
    limits: Rlimits | None = None
    try:
        limits, in_cgroup = read_env(os.environ)
        confine(limits, in_cgroup)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"kernel-agent launcher: cannot confine the kernel as asked ({limits}): {exc}\n")
        sys.exit(CONFINEMENT_FAILED)
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == [EXEC_FLAG]:
        command = args[1:]
        try:
            os.execvp(command[0], command)
        except (OSError, IndexError) as exc:
            sys.stderr.write(f"kernel-agent launcher: cannot start the kernel {command[:1]}: {exc}\n")
            sys.exit(CONFINEMENT_FAILED + 1)
    _honour_pythonpath(os.environ.get("PYTHONPATH", ""))
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance(argv=args)


def _honour_pythonpath(value: str) -> None:
    """The user's ``PYTHONPATH`` (absolute entries only: a relative one names the workspace), after the
    limits hold, where Python would have put it: before the standard library."""
    entries = [entry for entry in value.split(os.pathsep) if os.path.isabs(entry) and entry not in sys.path]
    sys.path[1:1] = entries


def read_env(environ: MutableMapping[str, str]) -> tuple[Rlimits, bool]:
    """Take (and remove) the hand-over variables: the limits, and whether a pids cgroup holds us.
    Raises ``ValueError``."""
    environ.pop(OWNER_ENV, None)  # still in /proc/<pid>/environ, where leftover sweeps look; not in os.environ
    return Rlimits.from_env(environ.pop(LIMITS_ENV, None)), bool(environ.pop(CGROUP_ENV, ""))


def confine(limits: Rlimits, in_cgroup: bool = False) -> None:
    """Lower this process's rlimits to ``limits``, before ipykernel starts.

    The process limit is the pids cgroup's job when the kernel runs in one
    (``in_cgroup``); ``RLIMIT_NPROC`` stands in otherwise. Raises ``OSError``
    when a limit cannot be set.
    """
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.max_processes is not None and not in_cgroup:
        _set_limit(resource.RLIMIT_NPROC, _user_task_count() + limits.max_processes)
    if limits.memory_mb is not None:
        _set_limit(resource.RLIMIT_AS, limits.memory_mb * MB)
    if limits.cpu_seconds is not None:
        _set_limit(resource.RLIMIT_CPU, limits.cpu_seconds, hard=limits.cpu_seconds + CPU_HARD_GRACE_S)
    if limits.max_file_mb is not None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an OSError in the code, not a dead kernel
        _set_limit(resource.RLIMIT_FSIZE, limits.max_file_mb * MB)


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


if __name__ == "__main__":
    main()
