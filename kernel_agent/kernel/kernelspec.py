"""Our kernelspec: where it lives, how sessions find it, how people install it.

The spec folder ``kernelspec/kernel-agent`` ships inside the wheel (as
``kernel_agent/kernelspec/kernel-agent``) and sits at the top of a source
checkout; sessions use it from there without any install.
``install_kernelspec`` copies it where Jupyter looks, for JupyterLab.
``launch_spec`` writes the spec one local kernel actually starts with: the
named spec's command behind its cgroup join and its bubblewrap sandbox.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_core.paths import jupyter_path

from ..errors import ConfigError, KernelStartError
from .sandbox.bwrap import SandboxView, bwrap_argv, require_bwrap
from .sandbox.network import network_prefix, require_pasta

if TYPE_CHECKING:
    from .sandbox.limits import Confinement

__all__ = ["KERNEL_NAME", "install_kernelspec", "kernel_spec_manager", "kernelspec_dir", "launch_spec"]

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


def launch_spec(folder: Path, kernel_name: str, confinement: Confinement, view: SandboxView,
                python: str | None = None) -> Path:
    """Write ``folder/<kernel_name>/kernel.json``: the named spec, launched confined; return ``folder``.

    The command becomes ``[cgroup join] [pasta_launch ... --] [bwrap ... --] <the spec's argv>``
    (``pasta_launch`` when the network is on);
    a sandboxed kernel is interrupted by message (a SIGINT to bwrap would not
    reach it). Raises ``SandboxUnavailableError`` (strict mode, no working
    bwrap) and ``KernelStartError`` for an unknown kernel name.
    """
    try:
        spec = kernel_spec_manager().get_kernel_spec(kernel_name)
    except Exception as exc:  # NoSuchKernel is a KeyError; a broken kernel.json is a ValueError
        raise KernelStartError(f"no kernelspec named {kernel_name!r}: {exc}") from exc
    argv = [arg.replace("{resource_dir}", spec.resource_dir) for arg in spec.argv]
    if argv and argv[0] in {"python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"}:
        argv[0] = python or sys.executable  # what jupyter_client would do, were python still first
    elif python is not None and argv:  # a spec naming its own interpreter: --python says which one
        argv[0] = python
    manifest = spec.to_dict()
    if confinement.limits.sandbox == "strict":
        bwrap = require_bwrap()
        argv = [*bwrap_argv(bwrap, view), *argv]
        if view.network:  # a namespace of its own behind pasta, never the host's
            argv = [*network_prefix(require_pasta(bwrap)), *argv]
        manifest["interrupt_mode"] = "message"
    manifest["argv"] = [*confinement.launch_prefix(), *argv]
    target = folder / kernel_name
    target.mkdir(parents=True)
    (target / "kernel.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return folder
