"""What the install tests share: an environment as a new user's shell has it (no venv of ours on PATH)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["clean_environment"]


def clean_environment() -> dict[str, str]:
    """This environment without a configured model or kernel-agent setting, and without our venv on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNEL_AGENT_", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if Path(sys.prefix) not in Path(p).parents
    )
    return env
