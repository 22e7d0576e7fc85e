"""The confined describer's process: a zygote that forks one bounded child per data file.

Run by ``describer.py`` as ``python -m kernel_agent.agent.describe_worker FD [MEMORY_BYTES CPU_SECONDS]``,
where ``FD`` is its end of a ``SOCK_SEQPACKET`` control socket. The zygote imports pandas, pyarrow and
``summaries`` once, describes a small table to pay the first parse, says ``ready``, then waits: each
message on the control socket carries one connected socket (``SCM_RIGHTS``), and for each it forks a
child. Single-threaded (no thread pool is started before a fork: BLAS and Arrow are told to use one
thread), so forking is safe and costs a few ms.

A child reads ``{"path": ...}`` on its socket, lowers its limits (address space ``MEMORY_BYTES`` above what
the zygote had mapped, ``CPU_SECONDS`` of CPU, ``WALL_SECONDS`` of wall time by ``alarm``, no file
written, no core), sends what the file declares (``summaries.declared``: metadata only) and then its
description, one JSON object a line: ``{"declared": text}``, then ``{"summary": text}``, ``{"error": text,
"cause": text}`` (the file cannot be read as its kind says: what the parser raised) or
``{"over": "memory"}``. A child killed by a limit says nothing more; the host reads the end of the socket
as "over the budget". The zygote ends when the host's end of the control socket closes (the host process
ended or closed it). The address-space limit counts what the zygote had mapped but not used (allocator
arenas) as already there: the bound is hard, its headroom a little wider than ``MEMORY_BYTES``.

Standard library at module level; what it describes with is imported in ``main``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CPU_SECONDS", "MEMORY_BYTES", "WALL_SECONDS", "main"]

MEMORY_BYTES = 768 << 20  # address space a child may add to what the zygote had mapped
CPU_SECONDS = 5  # of CPU per file: a 90 MB-unpacked xlsx took 22 s
WALL_SECONDS = 30  # a child blocked on I/O (or starved of CPU on a loaded machine) ends here


def main(argv: list[str]) -> int:
    control = socket.socket(fileno=int(argv[0]))
    memory, cpu = (int(argv[1]), int(argv[2])) if len(argv) > 2 else (MEMORY_BYTES, CPU_SECONDS)
    from . import summaries

    _preload(summaries)
    control.send(b"ready")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel; none is waited for
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(control, 16, 4)
        except OSError:
            return 0
        if not fds:  # the host's end closed
            return 0
        for fd in fds:
            if os.fork() == 0:
                control.close()
                _child(fd, summaries, memory, cpu)  # never returns
            os.close(fd)


def _preload(summaries: Any) -> None:
    """Import what describing uses and describe a small table once, so each child starts warm."""
    import pandas  # noqa: F401

    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:  # optional: a parquet file then says so
        pass
    with tempfile.TemporaryDirectory(prefix="kernel-agent-warm-") as folder:
        sample = Path(folder) / "warm.csv"
        sample.write_text("day,region,value\n2024-01-31,north,1.5\n2024-02-29,south,2.5\n")
        try:
            summaries.describe(sample)
        except Exception:  # a warm-up: the files that follow say what is wrong, if anything
            pass


def _child(fd: int, summaries: Any, memory: int, cpu: int) -> None:
    status = 0
    try:
        with socket.socket(fileno=fd) as conn, conn.makefile("rwb") as stream:
            path = Path(json.loads(stream.readline())["path"])
            _confine(memory, cpu)
            _send(stream, {"declared": summaries.declared(path)})
            try:
                reply = {"summary": summaries.describe(path)}
            except MemoryError:
                reply = {"over": "memory"}
            except summaries.DataFileError as exc:
                cause = exc.__cause__
                reply = {"error": str(exc), "cause": f"{type(cause).__name__}: {cause}" if cause else None}
            _send(stream, reply)
    except BaseException:  # nothing more to say: the host reads the closed socket as "over the budget"
        status = 1
    finally:
        os._exit(status)


def _confine(memory: int = MEMORY_BYTES, cpu: int = CPU_SECONDS) -> None:
    mapped = _mapped_bytes()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + memory, mapped + memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.alarm(WALL_SECONDS)
    os.nice(5)  # a description never competes with the host's own work


def _mapped_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _send(stream: Any, message: dict[str, str | None]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
