"""A DeepAnalyze-style executor: a fresh ``python file.py`` for every call.

Mirrors DeepAnalyze's ``API/utils.py:execute_code_safe`` as described in
``shared/research/ANCHORS.md`` §1.1: write the code to a temporary ``.py``
file in the workspace, run it with ``MPLBACKEND=Agg`` and a 120 s timeout,
hand back stdout and stderr joined, remove the file. Nothing survives
between calls, so every step re-imports and re-reads what it needs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["execute"]

TIMEOUT_S = 120.0


def execute(code: str, workspace: Path, timeout: float = TIMEOUT_S) -> str:
    """Run ``code`` in a new interpreter with ``workspace`` as cwd; return what it printed."""
    fd, path = tempfile.mkstemp(suffix=".py", dir=workspace)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(code)
        try:
            done = subprocess.run(
                [sys.executable, path],
                cwd=workspace,
                env={**os.environ, "MPLBACKEND": "Agg"},
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return f"[Timeout]: the code ran longer than {timeout:g} s"
        return done.stdout + done.stderr
    finally:
        os.unlink(path)
