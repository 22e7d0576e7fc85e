"""A real ``jupyter kernelgateway`` on 127.0.0.1 for the tests: ``KernelGateway``.

Started from this venv (``python -m kernel_gateway``) on port 0 (the OS picks a free one) with a
token, in a clean environment (no model keys, no gateway token: a kernel it
starts could only learn our secrets from what we send it), with its own
runtime and temp folders. On exit it checks that no kernel was left on the
gateway and no kernel's private working folder, stops the gateway and
removes its folders; a kernel or folder left behind fails the test run.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
from leaks import kernels_of, process_gone
from ports import listening_port

_START_S = 60.0  # a gateway on a loaded 2-core machine takes a few seconds to import and bind


class KernelGateway:
    """``with KernelGateway() as gateway:`` ``gateway.url``, ``gateway.token``, ``gateway.kernels()``.

    ``nodelay=True`` runs it with kernel-agent's server-side TCP_NODELAY connection class.
    """

    def __init__(self, *, nodelay: bool = False) -> None:
        self.token = secrets.token_hex(16)
        self.port = 0  # the OS picks a free one as the gateway binds; read back once it listens (``_start``)
        self.url = ""
        self.nodelay = nodelay
        self.folder = Path(tempfile.mkdtemp(prefix="kg-test-"))
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            left, folders = self._left() if self.process is not None and self.process.poll() is None else ([], [])
        finally:
            self._stop()
        assert not left, f"kernels left running on the gateway: {left}"
        assert not folders, f"kernel working folders left on the gateway: {folders}"

    def assert_clean(self) -> None:
        """What ``__exit__`` checks, on a gateway that goes on running (one shared by several tests)."""
        left, folders = self._left()
        assert not left, f"kernels left running on the gateway: {left}"
        assert not folders, f"kernel working folders left on the gateway: {folders}"

    def _left(self) -> tuple[list[str], list[str]]:
        """The kernels the gateway runs and the kernels' working folders (their TMPDIR is ours) left in it."""
        return self.kernels(), sorted(p.name for p in self.folder.glob("kernel-agent.remote-*"))

    def kernels(self) -> list[str]:
        """The ids of the kernels the gateway runs now."""
        response = httpx.get(f"{self.url}/api/kernels", headers=self.headers(), timeout=10, trust_env=False)
        response.raise_for_status()
        return [kernel["id"] for kernel in response.json()]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def kernel_pids(self) -> list[int]:
        """The gateway's kernel processes (jupyter_client marks each with the gateway's pid)."""
        return kernels_of(self.process.pid) if self.process is not None else []

    def _command(self) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "kernel_gateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            f"--KernelGatewayApp.port={self.port}",
            "--KernelGatewayApp.port_retries=0",
            "--JupyterWebsocketPersonality.list_kernels=True",
            "--KernelGatewayApp.default_kernel_name=python3",
        ]
        if self.nodelay:
            command.append(
                "--KernelGatewayApp.kernel_websocket_connection_class="
                "kernel_agent.kernel.providers.gateway.nodelay.NoDelayWebsocketConnection"
            )
        return command

    def _environment(self) -> dict[str, str]:
        """A clean environment: nothing of ours but PATH, with its own home, temp and runtime folders."""
        runtime = self.folder / "runtime"
        runtime.mkdir()
        return {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.folder),
            "TMPDIR": str(self.folder),
            "JUPYTER_RUNTIME_DIR": str(runtime),
            "KG_AUTH_TOKEN": self.token,
            "LANG": "C.UTF-8",
            "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        }

    def _start(self) -> None:
        command, env = self._command(), self._environment()
        with open(self.folder / "log", "wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                command,
                env=env,
                cwd=self.folder,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )
        self.port = listening_port(self.process, _START_S)
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Poll until the gateway answers (its readiness, not a fixed sleep)."""
        assert self.process is not None
        end = time.monotonic() + _START_S
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"the gateway exited: {(self.folder / 'log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/api", headers=self.headers(), timeout=2, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the gateway did not answer in {_START_S:g}s")

    def _stop(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            orphans = kernels_of(process.pid)
            process.send_signal(signal.SIGTERM)  # the gateway shuts its kernels down on SIGTERM
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            for pid in orphans:
                if not process_gone(pid):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)
