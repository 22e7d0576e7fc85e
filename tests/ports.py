"""Ports for tests that run beside other tests (``pytest -n 2``, or another engineer's run on the machine).

A port found free and closed again is a guess: another process may take it before our server binds it, and
a test may then talk to someone else's server. So a server a test starts binds port 0 (the OS picks a free
port and it stays bound) and the test reads the port it got from its listening socket (``listening_port``);
a test that needs a port nobody listens on keeps it bound, never listening, for as long as it needs it
(``closed_port``).
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil


@contextmanager
def closed_port() -> Iterator[int]:
    """A local port where every connection is refused while the block runs: bound here and never listening,
    so no other process can start listening on it meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def listening_port(process: subprocess.Popen[Any], seconds: float = 90.0, host: str = "127.0.0.1") -> int:
    """The TCP port ``process`` (a server started on port 0) listens on at ``host``, once it listens. Fails
    when it exits first, when it listens on more than one port there, or after ``seconds`` (a start bound on
    a loaded 2-core machine, not a wait that makes a test pass)."""
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode} before it listened")
        ports = listening_now(process, host)
        if len(ports) == 1:
            return ports.pop()
        if ports:
            raise RuntimeError(f"the server listens on several ports: {sorted(ports)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not listen within {seconds:.0f} s")
        time.sleep(0.05)  # polling a server another process is starting


def listening_now(process: subprocess.Popen[Any], host: str = "127.0.0.1") -> set[int]:
    """The TCP ports ``process`` listens on at ``host`` now, without waiting (none once it has exited)."""
    try:
        connections = psutil.Process(process.pid).net_connections("tcp")
    except psutil.NoSuchProcess:
        return set()
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN and c.laddr.ip == host}
