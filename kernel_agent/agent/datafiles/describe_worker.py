"""The confined describer's process: a zygote that keeps one bounded child forked ahead per data file.

Run by ``describer.py`` as ``python -m kernel_agent.agent.datafiles.describe_worker FD [MEMORY_BYTES CPU_SECONDS]``,
where ``FD`` is its end of a ``SOCK_SEQPACKET`` control socket. The zygote imports pandas, pyarrow (duckdb when
installed) and ``summaries`` once, describes a small table of each heavy kind to pay the first parse, freezes its
objects for the garbage collector, says ``ready``, then keeps one *spare* child forked ahead: the spare lowers its
limits (address space ``MEMORY_BYTES`` above what the zygote had mapped, ``CPU_SECONDS`` of CPU, no file
written, no core) and waits on the control socket itself. Each message there carries one connected socket
(``SCM_RIGHTS``); the spare that takes it tells the zygote, which forks the next spare, so a request never
waits for a fork (30-40 ms for a process this size on a loaded machine). Single-threaded (no thread pool
is started before a fork: BLAS and Arrow are told to use one thread), so forking is safe.

A child reads ``{"path": ...}`` on its socket, sets ``WALL_SECONDS`` of wall time (``alarm``), sends what
the file declares (``summaries.declared``: metadata only) and then its description, one JSON object a
line: ``{"declared": text}``, then ``{"summary": text}``, ``{"error": text, "cause": text}`` (the file
cannot be read as its kind says: what the parser raised) or ``{"over": "memory"}``. A child killed by a
limit says nothing more; the host reads the end of the socket as "over the budget". The zygote ends when
the host's end of the control socket closes (the host process ended or closed it). The address-space
limit counts what the zygote had mapped but not used (allocator arenas) as already there: the bound is
hard, its headroom a little wider than ``MEMORY_BYTES``.

Standard library at module level; what it describes with is imported in ``main``.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import select
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
    taken, tell = os.pipe()  # a spare writes "+" when it took a request, "x" when the host's end closed
    while True:
        spare = os.fork()
        if spare == 0:
            os.close(taken)
            _spare(control, tell, summaries, memory, cpu)  # never returns
        while True:  # until the spare took a request (fork the next) or is gone without one
            ready, _, _ = select.select([taken], [], [], 1.0)
            word = os.read(taken, 1) if ready else b""
            if word == b"x":
                return 0
            if word == b"+" or _ended(spare):
                break


def _ended(pid: int) -> bool:
    """Reap every ended child; whether ``pid`` is one of them (or already gone)."""
    ended = False
    while True:
        try:
            found, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if found == 0:
            return ended
        ended = ended or found == pid


def _spare(control: socket.socket, tell: int, summaries: Any, memory: int, cpu: int) -> None:
    status = 0
    try:
        _confine(memory, cpu)
        _, fds, _, _ = socket.recv_fds(control, 16, 1)
        os.write(tell, b"+" if fds else b"x")
        control.close()
        if fds:
            _child(fds[0], summaries)
    except BaseException:  # nothing more to say: the host reads the closed socket as "over the budget"
        status = 1
    finally:
        os._exit(status)


def _preload(summaries: Any) -> None:
    """Import what describing uses and describe a small table of each heavy kind once (pandas' first parse,
    pyarrow's first read and conversion), so each child starts warm, and import duckdb when installed (its import
    starts no thread; a DuckDB file's child then saves ~0.1 s); then freeze what is there, so a child's garbage
    collections never touch (and copy) the zygote's objects."""
    import pandas as pd

    try:
        import duckdb  # noqa: F401
    except ImportError:  # optional (the databases extra): a DuckDB file then says so
        pass

    with tempfile.TemporaryDirectory(prefix="kernel-agent-warm-") as folder:
        samples = [Path(folder) / "warm.csv"]
        samples[0].write_text("day,region,value\n2024-01-31,north,1.5\n2024-02-29,south,2.5\n")
        try:
            import pyarrow.parquet  # noqa: F401

            pd.read_csv(samples[0]).to_parquet(Path(folder) / "warm.parquet")
            samples.append(Path(folder) / "warm.parquet")
        except ImportError:  # optional: a parquet file then says so
            pass
        for sample in samples:
            try:
                summaries.describe(sample)
                summaries.declared(sample)
                if sample.suffix == ".parquet":  # a big file's path: its first batch only
                    import pyarrow.parquet as pq

                    with pq.ParquetFile(sample) as parquet:
                        next(parquet.iter_batches(batch_size=1, use_threads=False)).to_pandas(use_threads=False)
            except Exception:  # a warm-up: the files that follow say what is wrong, if anything
                pass
    gc.collect()
    gc.freeze()


def _child(fd: int, summaries: Any) -> None:
    with socket.socket(fileno=fd) as conn, conn.makefile("rwb") as stream:
        path = Path(json.loads(stream.readline())["path"])
        signal.alarm(WALL_SECONDS)
        _send(stream, {"declared": summaries.declared(path)})
        try:
            reply = {"summary": summaries.describe(path)}
        except MemoryError:
            reply = {"over": "memory"}
        except summaries.DataFileError as exc:
            cause = exc.__cause__
            reply = {"error": str(exc), "cause": f"{type(cause).__name__}: {cause}" if cause else None}
        _send(stream, reply)


def _confine(memory: int = MEMORY_BYTES, cpu: int = CPU_SECONDS) -> None:
    mapped = _mapped_bytes()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + memory, mapped + memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


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
