"""A real Jupyter Enterprise Gateway on 127.0.0.1 for the tests: ``EnterpriseGateway``, and its venv.

Enterprise Gateway 3.3 pins ``jupyter_client<7`` and ``jupyter_server<2``, which
clash with ours (``jupyter_client>=8.6``), so it cannot join the ``test`` extra.
It gets a venv of its own, ``<the test venv>/enterprise-gateway``, built once
from ``enterprise-gateway-requirements.txt`` (``make install`` builds it; the
fixture builds it too when it is missing or the pins changed) and reused.

The gateway runs as ``KernelGateway`` does (free port, token, clean
environment, own folders, no kernel left on exit), with one kernelspec,
``python3``: this venv's ipykernel under Enterprise Gateway's default
``LocalProcessProxy``, so its kernels are local processes on loopback. It
authorizes one ``KERNEL_USERNAME`` only (``USERNAME``): a client that does not
send it is refused, whoever runs the tests.

``python tests/enterprise_gateway.py`` builds (or checks) the venv and prints its path.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import subprocess
import sys
from pathlib import Path

from gateway import KernelGateway

REQUIREMENTS = Path(__file__).with_name("enterprise-gateway-requirements.txt")
VENV = Path(sys.prefix) / "enterprise-gateway"
USERNAME = "kernel-agent-tests"
_LOCAL_PROXY = "enterprise_gateway.services.processproxies.processproxy.LocalProcessProxy"


def enterprise_gateway_python() -> Path:
    """The venv's interpreter, building the venv first if it is missing or was built from other pins.

    A lock keeps two test runs from building it at once. Raises ``CalledProcessError`` if pip fails.
    """
    wanted = REQUIREMENTS.read_text()
    stamp = VENV / ".installed"
    with open(f"{VENV}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.is_file() or stamp.read_text() != wanted:
            shutil.rmtree(VENV, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
            subprocess.run(
                [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)], check=True
            )
            stamp.write_text(wanted)
    return VENV / "bin" / "python"


class EnterpriseGateway(KernelGateway):
    """``with EnterpriseGateway() as gateway:`` as ``KernelGateway``; clients must send ``KERNEL_USERNAME=USERNAME``."""

    username = USERNAME

    def _command(self) -> list[str]:
        return [
            str(enterprise_gateway_python()),
            "-m",
            "enterprise_gateway",
            "--EnterpriseGatewayApp.ip=127.0.0.1",
            f"--EnterpriseGatewayApp.port={self.port}",
            "--EnterpriseGatewayApp.port_retries=0",
            "--EnterpriseGatewayApp.list_kernels=True",
            "--EnterpriseGatewayApp.default_kernel_name=python3",
            f"--EnterpriseGatewayApp.authorized_users={USERNAME}",
        ]

    def _environment(self) -> dict[str, str]:
        env = super()._environment()
        del env["KG_AUTH_TOKEN"]
        share = self.folder / "share" / "jupyter"
        spec = share / "kernels" / "python3"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                    "display_name": "Python 3 (kernel-agent tests)",
                    "language": "python",
                    "metadata": {"process_proxy": {"class_name": _LOCAL_PROXY}},
                }
            )
        )
        return {**env, "EG_AUTH_TOKEN": self.token, "JUPYTER_PATH": str(share)}


if __name__ == "__main__":
    print(enterprise_gateway_python())
