"""Describing a data file under a hard bound: ``describe``, ``start_describer``.

A data file is hostile input: a 426 KB parquet file can declare 100 million rows, a 292 KB xlsx can
unpack to 90 MB of XML. So the host process never parses one. ``describe`` hands the path to a confined
worker (``describe_worker.py``: a zygote started once per process, pandas and pyarrow preloaded, that
forks a child per file with an address-space, CPU and wall-time limit) and reads back its markdown. A
file whose description passes a limit is described by what it declares (``summaries.declared``: its
kind, size and what its metadata claims) with "not read: larger than the description budget"; it never
costs the host more than a socket and a few KB.

The worker gets a kernel's environment (an allow-list: no key or token of the host's reaches the code
that parses hostile bytes). Owns the zygote's lifetime (started on first use or by ``start_describer``,
ended when this process exits or closes its end of the control socket, restarted once if it died) and
the wire between the two. Does not own what a description says (``summaries.py``) nor which files are described
(``data.py``).
"""

from __future__ import annotations

import atexit
import json
import socket
import subprocess
import threading
from pathlib import Path

from ..._python import NEUTRAL_CWD, python_argv
from ...errors import DataFileError
from ...kernel.sandbox.environment import kernel_environment
from .describe_worker import CPU_SECONDS, MEMORY_BYTES, WALL_SECONDS
from .summaries import MAX_SUMMARY_CHARS, file_kind, human_size

__all__ = ["BUDGET_NOTE", "describe", "start_describer"]

BUDGET_NOTE = (
    f"not read: larger than the description budget ({MEMORY_BYTES >> 20} MB of memory, {CPU_SECONDS} s of CPU); "
    "read it in the kernel, in parts"
)
_WORKER = "kernel_agent.agent.datafiles.describe_worker"
_START_SECONDS = 120.0  # the zygote imports pandas and pyarrow: seconds on a loaded machine
# One thread each for BLAS and Arrow in the zygote: no thread pool exists when it forks.
_THREADS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_THREAD_LIMIT": "1"}


def describe(source: Path) -> str:
    """Markdown describing the checked data file ``source`` (``data.summarize`` documents it), made by a
    confined worker; a file over the description budget is described by what it declares. Blocking.

    Raises ``DataFileError`` when the file cannot be parsed as its kind says, or the worker cannot start.
    """
    return _describe_with(_zygote, source)


def _describe_with(zygote: _Zygote, source: Path) -> str:
    lines = _ask(zygote, source)
    said: dict[str, str] = {}
    for line in lines:  # the child parsed hostile bytes: what it says is data too, taken only as strings
        try:
            message = json.loads(line)
        except ValueError:
            break
        if isinstance(message, dict):
            said.update({k: v for k, v in message.items() if isinstance(k, str) and isinstance(v, str)})
    if "summary" in said:
        return said["summary"][:MAX_SUMMARY_CHARS]
    if "error" in said:  # the parser's own error, by name and message, is the cause
        raise DataFileError(said["error"][:500], path=str(source)) from ValueError(said.get("cause", "")[:500])
    declared = said.get("declared") or f"{file_kind(source)} · {human_size(source.stat().st_size)}"
    return f"{declared} · {BUDGET_NOTE}"[:MAX_SUMMARY_CHARS]


def start_describer() -> None:
    """Start this process's describer ahead (it imports pandas: ~0.5 s), so the first run does not wait
    for it. Blocking (call it in a thread). Raises ``DataFileError`` when it cannot start."""
    _zygote.connection()


def _ask(zygote: _Zygote, source: Path) -> list[bytes]:
    """The worker's lines about ``source``; retried once on a fresh zygote if the old one has died."""
    for attempt in (1, 2):
        control = zygote.connection()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with theirs:
                socket.send_fds(control, [b"d"], [theirs.fileno()])
        except OSError:
            ours.close()
            zygote.forget(control)
            if attempt == 2:
                raise DataFileError(f"cannot describe {source.name}: the describer ended", path=str(source)) from None
            continue
        with ours:
            ours.settimeout(WALL_SECONDS + 10)
            ours.sendall(json.dumps({"path": str(source)}).encode() + b"\n")
            return _read_lines(ours)
    raise AssertionError("unreachable")


def _read_lines(conn: socket.socket, limit: int = 8 * MAX_SUMMARY_CHARS) -> list[bytes]:
    """Whole lines until the last one the child sends (a summary, an error, or over the budget), its end of
    the socket closed (it died), or ``limit`` bytes; a timeout ends it too."""
    data = b""
    try:
        while len(data) < limit and (chunk := conn.recv(65536)):
            data += chunk
            if data.endswith(b"\n") and not data.rsplit(b"\n", 2)[-2].startswith(b'{"declared"'):
                break  # the last word: the child need not have exited yet
    except OSError:  # timed out or reset: what came so far is all there is
        pass
    return data.split(b"\n")[:-1]


class _Zygote:
    """The worker process and the host's end of its control socket; one per process."""

    def __init__(self, memory_bytes: int = MEMORY_BYTES, cpu_seconds: int = CPU_SECONDS) -> None:
        self._limits = (memory_bytes, cpu_seconds)
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def connection(self) -> socket.socket:
        with self._lock:
            if self._control is None:
                self._control = self._start()
            return self._control

    def forget(self, control: socket.socket) -> None:
        with self._lock:
            if self._control is control:
                self._close()

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._control is not None:
            self._control.close()  # the zygote reads the end of it and exits
            self._control = None
        if self._process is not None:
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        environment = kernel_environment(extra=_THREADS_ENV)  # a kernel's allow-list: no secret of ours
        try:
            with theirs:
                self._process = subprocess.Popen(
                    python_argv(_WORKER, str(theirs.fileno()), *map(str, self._limits)),
                    cwd=NEUTRAL_CWD,  # and isolated: nothing of the caller's folder (a workspace?) is imported
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    env=environment,
                    start_new_session=True,  # a Ctrl-C at the terminal is the host's to handle
                )
            ours.settimeout(_START_SECONDS)
            ready = ours.recv(16)
            ours.settimeout(None)
        except OSError as exc:
            ours.close()
            self._reap()
            raise DataFileError(f"the data describer could not start: {exc}") from exc
        if ready != b"ready":
            ours.close()
            self._reap()
            raise DataFileError("the data describer could not start (its process ended; see its message above)")
        return ours

    def _reap(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


_zygote = _Zygote()
atexit.register(_zygote.close)
