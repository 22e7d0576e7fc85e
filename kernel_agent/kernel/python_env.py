"""Another Python environment for the kernel (``--python PATH``): what it is, checked before any model call.

Owns probing an interpreter once per process (its prefixes and version, whether ipykernel is there),
the read-only paths the sandbox must show for it, and the one folder that puts our in-kernel code
(``kernel/inside/``, standard library only) on its path without the agent's own packages. The kernel
then runs that environment's packages, confined as any other: its prefix read-only, everything else
as today. Raises ``ConfigError`` with what to do when the interpreter is missing or lacks ipykernel.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .._python import NEUTRAL_CWD, code_argv
from ..errors import ConfigError

__all__ = ["PythonEnvironment", "inside_path", "probe_python", "require_setup_packages"]

_PACKAGE = Path(__file__).resolve().parents[1]  # kernel_agent/
_PROBE = (
    "import importlib.util, json, sys; print(json.dumps({'prefix': sys.prefix, 'base': sys.base_prefix, "
    "'exec_prefix': sys.exec_prefix, 'version': sys.version.split()[0], "
    "'ipykernel': importlib.util.find_spec('ipykernel') is not None, "
    "'has': [m for m in ('pandas', 'numpy', 'matplotlib') if importlib.util.find_spec(m)]}))"
)


@dataclass(frozen=True)
class PythonEnvironment:
    """A Python interpreter the kernel can run in."""

    executable: str
    prefix: str
    base_prefix: str
    exec_prefix: str
    version: str
    has: frozenset[str] = frozenset()  # of pandas, numpy, matplotlib: what the agent's setup cell imports

    @property
    def paths(self) -> tuple[Path, ...]:
        """What the sandbox shows read-only for it: its prefixes and the interpreter's folder."""
        found = {
            self.prefix,
            self.base_prefix,
            self.exec_prefix,
            os.path.dirname(self.executable),
            os.path.dirname(os.path.realpath(self.executable)),
        }
        return tuple(sorted(Path(os.path.realpath(p)) for p in found if p))


@functools.lru_cache(maxsize=16)
def probe_python(path: str) -> PythonEnvironment:
    """Ask the interpreter at ``path`` what it is (cached per process). Raises ``ConfigError`` for a path
    that is not a runnable Python, or one without ipykernel."""
    executable = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(executable) or not os.access(executable, os.X_OK):
        raise ConfigError(
            f"--python {path}: no such interpreter (give the path of a python executable, e.g. "
            "/opt/conda/envs/x/bin/python)"
        )
    try:
        done = subprocess.run(
            code_argv(executable, _PROBE), cwd=NEUTRAL_CWD, capture_output=True, text=True, timeout=60, check=False
        )
        facts = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise ConfigError(f"--python {path} did not answer as a Python interpreter: {exc}") from exc
    if not facts["ipykernel"]:
        raise ConfigError(
            f"ipykernel is not installed in {facts['prefix']}: {executable} -m pip install ipykernel "
            "there, then try again"
        )
    return PythonEnvironment(
        executable, facts["prefix"], facts["base"], facts["exec_prefix"], facts["version"], frozenset(facts["has"])
    )


def require_setup_packages(path: str) -> PythonEnvironment:
    """``probe_python``, and a ``ConfigError`` unless pandas, numpy and matplotlib are there too (the
    agent's setup cell imports them)."""
    environment = probe_python(path)
    missing = sorted({"pandas", "numpy", "matplotlib"} - environment.has)
    if missing:
        raise ConfigError(
            f"{', '.join(missing)} not installed in {environment.prefix}, and the analysis setup cell "
            f"needs them: {environment.executable} -m pip install {' '.join(missing)} there "
            "(or pass preload=False)"
        )
    return environment


def inside_path(folder: Path) -> Path:
    """A folder in ``folder`` (a session's runtime dir) holding only ``kernel_agent`` as a link to our
    package: the other interpreter runs our launcher through it (``_python.python_argv``'s
    ``package_root``), importing our in-kernel code (``kernel/inside/``, standard library only) and
    nothing else of the agent's environment."""
    target = folder / "pythonpath"
    target.mkdir(exist_ok=True)
    link = target / "kernel_agent"
    if not link.is_symlink():
        link.symlink_to(_PACKAGE, target_is_directory=True)
    return target
