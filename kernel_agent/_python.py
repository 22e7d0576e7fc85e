"""The one rule for every Python process we start: ``python_argv``, ``script_argv``, ``code_argv``.

A process we start never imports from a folder a kernel or a stranger could fill. Each runs isolated
(``-I``: neither the current folder nor a script's folder on ``sys.path``, no ``PYTHON*`` variables, no
user site-packages, so no ``usercustomize``), and its entry is a file of ours named by an absolute path,
never ``-m`` from wherever it happens to start: ``python_argv`` runs a module of ours through
``_boot.py``, which puts the folder holding *this* ``kernel_agent`` first on ``sys.path`` (a kernel in
another environment, ``--python``, names ours through a folder of its session's that holds only the
package); ``script_argv`` runs a standalone script of ours (``-S`` too when it needs no site-packages).
The host's own processes also start in ``NEUTRAL_CWD``, a folder no kernel can write. What no rule of ours
reaches is the interpreter that runs *us*: ``relative_pythonpath`` names the ``PYTHONPATH`` entries it took
relative to the folder it started in, for the CLI to warn of.
``tests/test_planted_modules.py`` finds every place that starts one and plants a module for every name
it imports. Pure; standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["BOOT", "NEUTRAL_CWD", "code_argv", "python_argv", "relative_pythonpath", "script_argv"]

BOOT = Path(__file__).resolve().with_name("_boot.py")
NEUTRAL_CWD = "/"  # where the host's own Python processes start: not a workspace, not the user's folder


def python_argv(module: str, *args: str, interpreter: str | None = None, package_root: Path | None = None) -> list[str]:
    """``[interpreter, -I, <root>/kernel_agent/_boot.py, module, *args]``: ``module`` (ours) run as
    ``__main__`` with ``package_root`` (default: the folder holding this package) first on its path."""
    boot = BOOT if package_root is None else Path(os.path.abspath(package_root)) / "kernel_agent" / BOOT.name
    return [interpreter or sys.executable, "-I", str(boot), module, *args]


def script_argv(script: str | os.PathLike[str], *args: str, site: bool = True) -> list[str]:
    """``[this interpreter, -I, [-S,] /abs/script, *args]``: a standalone script of ours, isolated."""
    flags = ["-I"] if site else ["-I", "-S"]
    return [sys.executable, *flags, os.path.abspath(script), *args]


def code_argv(interpreter: str, code: str, args: Sequence[str] = ()) -> list[str]:
    """``[interpreter, -I, -c, code, *args]``: a one-off probe of an interpreter, isolated."""
    return [interpreter, "-I", "-c", code, *args]


def relative_pythonpath(environ: Mapping[str, str] = os.environ) -> list[str]:
    """``PYTHONPATH``'s entries relative to the folder this process started in (``.``, ``src``, an empty one:
    the folder itself), which the interpreter put on ``sys.path`` before any code of ours ran, so a
    ``json.py`` there was imported first; none when it ignored the variable (``-I``, ``-E``). Raises nothing."""
    value = environ.get("PYTHONPATH", "")
    if sys.flags.ignore_environment or not value:
        return []
    return [entry for entry in value.split(os.pathsep) if not os.path.isabs(entry)]
