"""What the host hands the kernel process at start: the variables it sets and the rlimits they carry.

Both sides read this module: the host (``sandbox/limits.py``) writes the
variables, the launcher takes them out of its environment before the
analysed code can see them. Standard library only, like all of ``inside/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

__all__ = ["CGROUP_ENV", "CONFINEMENT_FAILED", "CPU_HARD_GRACE_S", "LIMITS_ENV", "MB", "OWNER_ENV", "Rlimits"]

LIMITS_ENV = "KERNEL_AGENT_LIMITS"
CGROUP_ENV = "KERNEL_AGENT_CGROUP"  # set when the kernel's command joins a pids cgroup
# The pid of the kernel's owner, kept in the kernel's /proc/<pid>/environ so that leftovers can be
# told by owner even inside a sandbox (where jupyter_client's JPY_PARENT_PID must be unset).
OWNER_ENV = "KERNEL_AGENT_OWNER"
CONFINEMENT_FAILED = 97  # the launcher's exit code when a confinement cannot be set up
MB = 1024 * 1024
CPU_HARD_GRACE_S = 5  # SIGKILL this long after SIGXCPU, should the code ignore SIGXCPU


@dataclass(frozen=True)
class Rlimits:
    """The per-process limits the launcher sets (``None``: not set). The host's ``Limits`` says what each means."""

    memory_mb: int | None = None
    cpu_seconds: int | None = None
    max_processes: int | None = None
    max_file_mb: int | None = None

    @classmethod
    def from_env(cls, text: str | None) -> Rlimits:
        """Read the host's ``Limits.to_env()`` text (its other settings are the host's business).
        Raises ``ValueError`` for text that is not a JSON object of positive whole numbers or nulls."""
        if not text:
            return cls()
        values = json.loads(text)
        if not isinstance(values, dict):
            raise ValueError(f"{LIMITS_ENV} is not a JSON object: {text!r}")
        picked = {f.name: values.get(f.name) for f in fields(cls)}
        for name, value in picked.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"{LIMITS_ENV}: {name} must be a positive whole number or null, not {value!r}")
        return cls(**picked)
