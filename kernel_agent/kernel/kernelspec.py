"""Our kernelspec: where it lives, how sessions find it, how people install it.

The spec folder ``kernelspec/kernel-agent`` ships inside the wheel (as
``kernel_agent/kernelspec/kernel-agent``) and sits at the top of a source
checkout; sessions use it from there without any install.
``install_kernelspec`` copies it where Jupyter looks, for JupyterLab.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_core.paths import jupyter_path

from ..errors import ConfigError

__all__ = ["KERNEL_NAME", "install_kernelspec", "kernel_spec_manager", "kernelspec_dir"]

KERNEL_NAME = "kernel-agent"
_PACKAGE = Path(__file__).resolve().parent.parent


def kernelspec_dir() -> Path:
    """The folder holding ``kernel-agent/kernel.json`` (wheel first, then source checkout)."""
    for candidate in (_PACKAGE / "kernelspec", _PACKAGE.parent / "kernelspec"):
        if (candidate / KERNEL_NAME / "kernel.json").is_file():
            return candidate
    raise ConfigError(f"the {KERNEL_NAME} kernelspec is missing from the installation (looked in {_PACKAGE})")


def kernel_spec_manager() -> KernelSpecManager:
    """A spec manager that finds our spec first, then every installed one."""
    return KernelSpecManager(kernel_dirs=[str(kernelspec_dir()), *jupyter_path("kernels")])


def install_kernelspec(*, user: bool = False, prefix: str | None = None) -> Path:
    """Install our spec for Jupyter (``--user`` or ``--prefix``); return where it went.

    The installed spec names this interpreter by its absolute path (as
    ipykernel's own install does): a Jupyter running from another environment
    would otherwise start its own ``python``, which lacks kernel_agent.
    Raises ``ConfigError`` when Jupyter refuses (e.g. no permission).
    """
    with tempfile.TemporaryDirectory(prefix="kernelspec-staging-") as staging:
        spec = Path(staging) / KERNEL_NAME
        shutil.copytree(kernelspec_dir() / KERNEL_NAME, spec)
        manifest = json.loads((spec / "kernel.json").read_text(encoding="utf-8"))
        manifest["argv"][0] = sys.executable
        (spec / "kernel.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:
            where = KernelSpecManager().install_kernel_spec(
                str(spec), kernel_name=KERNEL_NAME, user=user, prefix=prefix
            )
        except OSError as exc:
            raise ConfigError(f"could not install the {KERNEL_NAME} kernelspec: {exc}") from exc
    return Path(where)
