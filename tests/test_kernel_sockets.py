"""A host Unix socket given to a kernel (``ProviderSettings.sockets``: a live data source's broker): bound into
the sandbox under ``/run``, named by its variable, reached, and nothing else of the host with it; a provider
that cannot give one refuses it."""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_agent.errors import ConfigError
from kernel_agent.kernel.providers.registry import ProviderSettings, make_provider
from kernel_agent.kernel.sandbox.bwrap import SandboxView, bwrap_argv
from kernel_agent.kernel.session_sync import KernelSession

PROBE = (
    "import os, socket\n"
    "where = os.environ['TEST_SOCKET']\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "s.connect(where)\n"
    "print(where, s.recv(100).decode())\n"
    "print('folder visible:', os.path.exists(os.environ['TEST_FOLDER']))\n"
)


@pytest.fixture
def greeter() -> Iterator[Path]:
    """A Unix socket in a private host folder that answers each connection with ``hello``."""
    with tempfile.TemporaryDirectory(prefix="kernel-agent-sock-test-") as folder:
        path = Path(folder) / "sql.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen()

        def serve() -> None:
            while True:
                try:
                    connection, _ = server.accept()
                except OSError:
                    return
                with connection:
                    connection.sendall(b"hello")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield path
        finally:
            server.shutdown(socket.SHUT_RDWR)
            server.close()
            thread.join(10)


@pytest.mark.kernel
def test_a_sandboxed_kernel_reaches_the_socket_it_is_given_at_its_own_path(greeter: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kernel-agent-sock-ws-") as workspace:
        env = {"TEST_FOLDER": str(greeter.parent)}
        with KernelSession(Path(workspace), sockets={"TEST_SOCKET": greeter}, env=env) as session:
            result = session.execute(PROBE, timeout=60)
    assert result.ok, result.error
    assert "/run/kernel-agent/sql.sock hello" in result.stdout
    assert "folder visible: False" in result.stdout  # the socket alone, not the host folder holding it


def test_the_sandbox_binds_each_socket_under_run() -> None:
    view = SandboxView(
        Path("/w"),
        Path("/s"),
        Path("/c.json"),
        bound_sockets=((Path("/tmp/x/sql.sock"), "/run/kernel-agent/sql.sock"),),
    )
    argv = bwrap_argv(Path("/usr/bin/bwrap"), view)
    at = argv.index("/tmp/x/sql.sock")
    assert argv[at - 1 : at + 2] == ["--bind", "/tmp/x/sql.sock", "/run/kernel-agent/sql.sock"]
    assert argv.index("--tmpfs") < at  # /run is the sandbox's own tmpfs, made before


def test_a_gateway_or_attached_kernel_refuses_a_socket(tmp_path: Path) -> None:
    sockets = {"TEST_SOCKET": tmp_path / "sql.sock"}
    with pytest.raises(ConfigError, match="gateway"):
        make_provider("gateway", ProviderSettings(gateway="http://127.0.0.1:9", sockets=sockets))
    with pytest.raises(ConfigError, match="socket"):
        make_provider("attached", ProviderSettings(connection_file=str(tmp_path / "c.json"), sockets=sockets))
