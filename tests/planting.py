"""A folder planted with a module for every name a Python process could import, each leaving a marker.

For the tests of issue 48 (``test_host_python.py``, ``test_python_env.py``): a process started in such a
folder, or with it as its workspace, that imports anything from there writes ``MARKER``.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

__all__ = ["MARKER", "module_names", "plant"]

MARKER = "PLANTED-MODULE-RAN"


def module_names() -> set[str]:
    """Every top-level name a Python process here could import: the standard library's and every
    installed distribution's, with the start-up hooks."""
    names = set(sys.stdlib_module_names) | set(importlib.metadata.packages_distributions())
    names |= {"sitecustomize", "usercustomize", "kernel_agent"}
    return {name for name in names if name.isidentifier() and not name.startswith("__")}


def plant(folder: Path) -> Path:
    """Fill ``folder`` with a module for every importable name, and our package's own entry points, each
    appending its name to ``folder/MARKER`` when imported. Returns the marker's path."""
    marker = folder / MARKER
    body = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    folder.mkdir(parents=True, exist_ok=True)
    for name in module_names() - {"kernel_agent"}:
        (folder / f"{name}.py").write_text(body)
    for relative in (
        "kernel_agent/__init__.py",
        "kernel_agent/_boot.py",
        "kernel_agent/kernel/__init__.py",
        "kernel_agent/kernel/inside/__init__.py",
        "kernel_agent/kernel/inside/launcher.py",
        "kernel_agent/agent/__init__.py",
        "kernel_agent/agent/datafiles/describe_worker.py",
    ):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(body)
    return marker
