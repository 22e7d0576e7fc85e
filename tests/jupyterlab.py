"""A real JupyterLab for the browser tests: started on 127.0.0.1 with a token and a temp root, once per module.

Its config, data and runtime folders are private temp dirs, so the developer's
settings, kernels and open tabs never leak in; our kernelspec is installed into
its data dir the way users do it (``kernel-agent kernelspec install --user``).
``expose_app_in_browser`` lets a test drive JupyterLab's own commands
(``notebook:run-cell``, …), the ones its menus and keys call.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_notebook
from ports import listening_port

_START_S = 90.0  # bound on JupyterLab's start on a loaded 2-core machine


def saved_cells(path: Path) -> list[dict[str, Any]] | None:
    """The cells of the notebook Jupyter saved at ``path``; None while a save is under way (Jupyter's
    atomic writing keeps a backup and writes the file in place, so a reader can see it empty or cut)."""
    try:
        cells: list[dict[str, Any]] = json.loads(path.read_text())["cells"]
        return cells
    except (ValueError, KeyError):
        return None


@dataclass
class JupyterLab:
    """A running JupyterLab: its URL, token, notebook root and private data dir."""

    process: subprocess.Popen[bytes]
    port: int
    token: str
    root: Path
    data_dir: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}?reset&token={self.token}"

    def notebook(self, name: str, cells: list[str]) -> Path:
        """Write a notebook of code cells into the root (stock Python 3 kernel)."""
        nb = new_notebook(cells=[new_code_cell(source) for source in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
        path = self.root / name
        nbformat.write(nb, path)
        return path

    def api(self, path: str, body: Any = None) -> Any:
        """GET ``/api/<path>``, or POST ``body`` (JSON) there when given; the JSON answer (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/{path}",
            data=data,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = response.read()
        return json.loads(answer) if answer else None

    def open_kernel(self, notebook: str, kernel: str = "python3") -> str:
        """What opening ``notebook`` in JupyterLab does: a session with a kernel for it; the kernel's id."""
        session = self.api(
            "sessions", {"path": notebook, "type": "notebook", "name": notebook, "kernel": {"name": kernel}}
        )
        return str(session["kernel"]["id"])

    def interrupt(self, kernel_id: str) -> None:
        """JupyterLab's stop button (Kernel > Interrupt): the REST interrupt of that kernel."""
        self.api(f"kernels/{kernel_id}/interrupt", {})

    def connection_file(self, kernel_id: str) -> Path:
        return self.data_dir.parent / "runtime" / f"kernel-{kernel_id}.json"


def start_jupyterlab(
    extra_env: dict[str, str] | None = None, extra_args: tuple[str, ...] = (), *, collaborative: bool = False
) -> tuple[JupyterLab, Path]:
    """Start JupyterLab and wait until it answers; return it and the temp folder to remove afterwards.
    ``extra_env`` is added to its environment (e.g. the model for the chat persona), ``extra_args`` to its
    command line. Real-time collaboration (jupyter-collaboration, installed for the chat persona) is off
    unless ``collaborative``: a stock JupyterLab, as most ``%%agent`` users have."""
    base = Path(tempfile.mkdtemp(prefix="lab-"))  # a short path: it is the lab's TMPDIR (kernels' ipc sockets)
    root, data = base / "notebooks", base / "data"
    root.mkdir()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "JUPYTER_DATA_DIR": str(data),
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        # the lab's temp dir is its own, removed with it: what its kernels' %%agent runs leave when the lab
        # shuts them down (runtime dirs whose owner is gone) goes with the lab, not into the test run's
        "TMPDIR": str(base),
        "IPYTHONDIR": str(base / "ipython"),
        "JUPYTERLAB_SETTINGS_DIR": str(base / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    env.update(extra_env or {})
    try:
        subprocess.run(
            [str(Path(sys.executable).with_name("kernel-agent")), "kernelspec", "install", "--user"],
            env=env,
            check=True,
            capture_output=True,
        )
    except subprocess.CalledProcessError:
        shutil.rmtree(base, ignore_errors=True)
        raise
    news = base / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false"}))  # no "get Jupyter news?" toast, no news fetch
    token = secrets.token_hex(16)
    log = open(base / "jupyterlab.log", "wb")  # noqa: SIM115 - closed with the process below
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            "--ServerApp.port=0",  # the OS picks a free port: read back once it listens
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
            *(["--allow-root"] if os.geteuid() == 0 else []),
            *([] if collaborative else ["--YDocExtension.disable_rtc=True"]),
            *extra_args,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
    )
    log.close()
    try:
        port = listening_port(process, _START_S)
    except RuntimeError:
        log_text = (base / "jupyterlab.log").read_text()[-3000:]
        stop_jupyterlab(JupyterLab(process, 0, token, root, data), base)
        raise RuntimeError(f"JupyterLab did not start: {log_text}") from None
    lab = JupyterLab(process, port, token, root, data)
    deadline = time.monotonic() + _START_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited: {(base / 'jupyterlab.log').read_text()[-3000:]}")
        try:
            lab.api("status")
            return lab, base
        except OSError:
            if time.monotonic() > deadline:
                stop_jupyterlab(lab, base)
                raise RuntimeError("JupyterLab did not answer in time") from None
            time.sleep(0.2)  # polling a server another process is starting


def stop_jupyterlab(lab: JupyterLab, base: Path) -> None:
    """Stop JupyterLab (it shuts its kernels down on SIGTERM) and remove its folders."""
    if lab.process.poll() is None:
        lab.process.send_signal(signal.SIGTERM)
        try:
            lab.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            lab.process.kill()
            lab.process.wait()
    shutil.rmtree(base, ignore_errors=True)
