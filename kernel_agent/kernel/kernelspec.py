"""Our kernelspec: where it lives, how sessions find it, how people install it.

The spec folder ``kernelspec/kernel-agent`` ships inside the wheel (as
``kernel_agent/kernelspec/kernel-agent``) and sits at the top of a source
checkout; sessions use it from there without any install.
``install_kernelspec`` copies it where Jupyter looks, for JupyterLab.
``choose_kernel`` checks the kernel a user names (``--kernel``: any installed
kernelspec; ``--python``: another environment) before anything starts, and
``launch_spec`` writes the spec one local kernel actually starts with: that
kernel's command behind our launcher (its rlimits), its cgroup join and its
bubblewrap sandbox.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_client.kernelspec import KernelSpecManager
from jupyter_core.paths import jupyter_path

from .._python import python_argv
from ..errors import ConfigError, KernelChoiceError
from ..records import PYTHON3_KERNELSPEC
from .inside.launcher import EXEC_FLAG
from .python_env import PythonEnvironment, probe_python
from .sandbox.bwrap import SandboxView, bwrap_argv, require_bwrap
from .sandbox.forked_kernel import HOLDER, INFO_FD, JOINED_FDS, KERNEL_PID, namespace_files
from .sandbox.network import network_prefix, require_pasta
from .sandbox.seccomp import require_filter
from .sandbox.template import TemplateKey, provisioner_metadata

if TYPE_CHECKING:
    from .sandbox.limits import Confinement

__all__ = [
    "KERNEL_NAME",
    "KernelChoice",
    "choose_kernel",
    "install_kernelspec",
    "installed_kernels",
    "kernel_spec_manager",
    "kernelspec_dir",
    "launch_spec",
    "launcher_argv",
]

KERNEL_NAME = "kernel-agent"
LAUNCHER = "kernel_agent.kernel.inside.launcher"
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
        manifest["argv"] = launcher_argv(manifest["argv"], sys.executable)
        (spec / "kernel.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        try:
            where = KernelSpecManager().install_kernel_spec(
                str(spec), kernel_name=KERNEL_NAME, user=user, prefix=prefix
            )
        except OSError as exc:
            raise ConfigError(f"could not install the {KERNEL_NAME} kernelspec: {exc}") from exc
    return Path(where)


@dataclass(frozen=True)
class KernelChoice:
    """The kernelspec a local kernel starts from, as the host checked it before starting anything.

    ``python`` is set for a Python kernel in another environment (``--python``, or a kernelspec whose
    command is another interpreter): the kernel then runs our launcher under that interpreter, with our
    in-kernel code and nothing else of ours on its path. ``command`` is set for a kernel of another
    kind (IRkernel, ...): its own argv, run confined by our launcher's ``--exec``. ``recorded`` is what
    a notebook's ``kernelspec`` metadata says, so the exported notebook opens in that kernel.
    """

    name: str
    display_name: str
    language: str
    python: PythonEnvironment | None = None
    command: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    read_paths: tuple[Path, ...] = ()

    @property
    def recorded(self) -> dict[str, str]:
        if self.name == KERNEL_NAME:  # our own spec is a plain Python kernel wherever the notebook opens
            return dict(PYTHON3_KERNELSPEC)
        return {"name": self.name, "display_name": self.display_name, "language": self.language}


def installed_kernels() -> list[str]:
    """The names of the kernelspecs Jupyter finds here (ours first)."""
    return sorted(kernel_spec_manager().find_kernel_specs(), key=lambda name: (name != KERNEL_NAME, name))


def choose_kernel(kernel_name: str = KERNEL_NAME, python: str | None = None) -> KernelChoice:
    """Check ``kernel_name`` (an installed kernelspec) and ``python`` (another environment's interpreter)
    before a kernel starts. Raises ``KernelChoiceError`` (a ``ConfigError`` and a ``KernelStartError``)
    saying what to do: an unknown kernel name (with the
    installed ones), a kernel whose program is not installed, a Python without ipykernel, or both given
    for a kernel that is not Python."""
    if kernel_name == KERNEL_NAME and python is None:
        return KernelChoice(KERNEL_NAME, "Python 3 (kernel-agent)", "python")
    try:
        spec = kernel_spec_manager().get_kernel_spec(kernel_name)
    except Exception as exc:  # NoSuchKernel is a KeyError; a broken kernel.json is a ValueError
        if kernel_name == "python3":  # what notebooks usually name: our Python, where ipykernel installed no spec
            return choose_kernel(KERNEL_NAME, python)
        installed = ", ".join(installed_kernels())
        raise KernelChoiceError(
            f"no Jupyter kernel named {kernel_name!r} here (installed: {installed}; see `jupyter kernelspec list`)"
        ) from exc
    argv = [arg.replace("{resource_dir}", spec.resource_dir) for arg in spec.argv]
    env = tuple(sorted((str(k), str(v)) for k, v in (spec.env or {}).items()))
    language = str(spec.language or "").lower()
    program = _python_program(argv[0]) if argv else None
    if kernel_name == KERNEL_NAME or program is not None or python is not None:
        if language not in ("python", ""):
            raise KernelChoiceError(
                f"--python picks a Python environment, but kernel {kernel_name!r} runs {spec.language}: "
                "give one of them"
            )
        interpreter = python or program or sys.executable
        other = None if os.path.abspath(interpreter) == os.path.abspath(sys.executable) else probe_python(interpreter)
        name = KERNEL_NAME if kernel_name == KERNEL_NAME else kernel_name
        return KernelChoice(
            name,
            spec.display_name,
            "python",
            python=other,
            env=env,
            read_paths=other.paths if other is not None else (),
        )
    found = shutil.which(argv[0]) if argv else None
    if found is None:
        raise KernelChoiceError(
            f"kernel {kernel_name!r} ({spec.display_name}) runs {argv[:1] or 'nothing'}, which is not "
            "installed here (not on PATH)"
        )
    command = (found, *argv[1:])
    return KernelChoice(
        kernel_name,
        spec.display_name,
        spec.language or "unknown",
        command=command,
        env=env,
        read_paths=_program_paths(found, spec.resource_dir),
    )


def _python_program(program: str) -> str | None:
    """The interpreter a kernelspec's command starts, when it is a Python one (``python``, ``python3.11``,
    ``/opt/conda/envs/x/bin/python``); a bare name is this process's (what jupyter_client does)."""
    if not re.fullmatch(r"python[0-9.]*", os.path.basename(program)):
        return None
    if os.sep not in program:
        return sys.executable
    return program


def _program_paths(program: str, resource_dir: str) -> tuple[Path, ...]:
    """What the sandbox must show read-only for a kernel of another kind: its program's folder (resolved,
    unless the system's folders already hold it) and the kernelspec's own folder."""
    found = {
        Path(os.path.realpath(program)).parent,
        Path(os.path.dirname(os.path.abspath(program))),
        Path(os.path.realpath(resource_dir)),
    }
    return tuple(sorted(p for p in found if not str(p).startswith(("/usr/", "/etc/"))))


def launcher_argv(spec_argv: list[str], interpreter: str, package_root: Path | None = None) -> list[str]:
    """Our kernelspec's command (``python -m <launcher> ARGS``) as we start it: the launcher by the absolute
    path of our boot script under ``interpreter``, isolated (``_python.python_argv``), then ``ARGS``.
    ``package_root``: the folder that holds the ``kernel_agent`` to run (another environment's, ``--python``)."""
    return python_argv(LAUNCHER, *launcher_arguments(spec_argv), interpreter=interpreter, package_root=package_root)


def launcher_arguments(argv: list[str]) -> list[str]:
    """What a kernel command passes our launcher: the arguments after its module's name (else after the program)."""
    return argv[argv.index(LAUNCHER) + 1 :] if LAUNCHER in argv else argv[1:]


def _write_filter(folder: Path) -> Path:
    """The sandbox's compiled system-call filter, written into ``folder`` (the kernel's launch spec), for
    the launch prefix to open. Raises ``SandboxUnavailableError`` when there is none to be had here."""
    program = folder / "seccomp.bpf"
    program.write_bytes(require_filter().code)
    return program


def launch_spec(
    folder: Path,
    choice: KernelChoice,
    confinement: Confinement,
    view: SandboxView,
    package_root: Path | None = None,
    template: TemplateKey | None = None,
) -> Path:
    """Write ``folder/<name>/kernel.json``: the chosen kernel, launched confined; return ``folder``.

    The command becomes ``[cgroup join, filter open] [pasta_launch ... --] [bwrap ... --] <the kernel's argv>``
    (``pasta_launch`` when the network is on; the one shell that joins the cgroups also opens the system-call
    filter, written beside ``kernel.json``, on the descriptor bwrap loads it from), where a Python kernel's argv is
    our launcher under its interpreter (``package_root``: the folder holding the ``kernel_agent`` it imports, for
    another environment) and another kernel's is our launcher's ``--exec`` before its own command (each isolated, by
    absolute path: ``launcher_argv``); a sandboxed kernel is interrupted by message (a SIGINT to bwrap would not
    reach it). ``template``: the kernel may be forked from a warmed template instead (``providers/forked.py``,
    named in the spec's metadata with the command that builds its sandbox); that command stays the fallback.
    Raises ``SandboxUnavailableError`` (strict mode, no working
    bwrap or no system-call filter).
    """
    spec = kernel_spec_manager().get_kernel_spec(KERNEL_NAME)
    manifest = spec.to_dict()
    if choice.command:
        argv = python_argv(LAUNCHER, EXEC_FLAG, *choice.command)
        manifest.update(display_name=choice.display_name, language=choice.language, interrupt_mode="signal")
    else:
        argv = [arg.replace("{resource_dir}", spec.resource_dir) for arg in spec.argv]
        interpreter = choice.python.executable if choice.python is not None else sys.executable
        argv = launcher_argv(argv, interpreter, package_root if choice.python is not None else None)
    manifest["env"] = {**manifest.get("env", {}), **dict(choice.env)}
    target = folder / KERNEL_NAME
    target.mkdir(parents=True)
    program = None
    if confinement.limits.sandbox == "strict":
        bwrap = require_bwrap()
        if template is not None and not view.network:
            holder = [
                *confinement.launch_prefix(
                    _write_filter(target), more=namespace_files(), also=KERNEL_PID, copies=((INFO_FD, 1),)
                ),
                *bwrap_argv(bwrap, view, joined=JOINED_FDS, info_fd=INFO_FD),
                *HOLDER,
            ]
            # The spec's own variables (MPLBACKEND) are read by the template's imports: part of its key.
            warmed = template.with_env(manifest["env"])
            manifest["metadata"] = {**manifest.get("metadata", {}), **provisioner_metadata(warmed, holder)}
        argv = [*bwrap_argv(bwrap, view), *argv]
        if view.network:  # a namespace of its own behind pasta, never the host's
            argv = [*network_prefix(require_pasta(bwrap)), *argv]
        program = _write_filter(target)
        manifest["interrupt_mode"] = "message"
    manifest["argv"] = [*confinement.launch_prefix(program), *argv]
    (target / "kernel.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return folder
