"""The workspace's disk quota: ``workspace_usage`` and ``over_quota``.

Owns measuring what a run's workspace takes on disk and the words for going
over the quota. The agent measures once when the run starts and again after
every round, and ends the run (``stop_reason="disk_quota"``) when the
workspace has grown by more than ``config.kernel.disk_quota_mb``. A single file
is capped in the kernel itself by ``RLIMIT_FSIZE`` (``Limits.max_file_mb``,
set to at most the quota), so writing one huge file fails inside the round as
an ``OSError`` the model sees.

What this bounds and what it does not: the growth of the workspace between
rounds, counted in allocated blocks (a sparse file counts what it uses),
hidden files included, symlinks not followed. It does not stop many files
that are each under the per-file cap from filling the disk *during* one
round (the check comes after it), and it does not see writes outside the
workspace (``/tmp``, the home folder): a filesystem quota or the sandbox's
private tmpfs bounds those.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..errors import KernelAgentError
from ..kernel.door import Door

__all__ = ["MAX_ENTRIES", "over_quota", "workspace_usage"]

MB = 1 << 20
MAX_ENTRIES = 1_000_000  # a workspace with more entries counts as full: walking it would take too long


def workspace_usage(root: Path, exclude: Iterable[Path] = ()) -> int:
    """Bytes allocated on disk under ``root`` (through the door: no link followed), ``exclude`` left out.
    Never raises: a workspace that cannot be walked counts as empty, one with too many entries as full."""
    names = frozenset(_relative(root, path) for path in exclude)
    try:
        total, stopped = Door(root).usage(MAX_ENTRIES, names)
    except (OSError, KernelAgentError):
        return 0
    return max(total, 1 << 62) if stopped else total


def _relative(root: Path, path: Path) -> str:
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return ""


def over_quota(grown: int, quota_mb: int) -> str | None:
    """Why the run must stop when the workspace grew by ``grown`` bytes, or None within the quota."""
    if grown <= quota_mb * MB:
        return None
    return (
        f"the workspace grew by {grown / MB:,.0f} MB during the run, over its disk quota of {quota_mb:,} MB; "
        "the run stops here (the files are kept: delete what you do not need, or raise --disk-quota)"
    )
