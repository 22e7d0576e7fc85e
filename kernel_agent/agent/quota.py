"""The workspace's disk quota: ``workspace_usage`` and ``over_quota``.

Owns measuring what a run's workspace takes on disk and the words for going
over the quota. The agent measures once when the run starts and again after
every round, and ends the run (``stop_reason="disk_quota"``) when the
workspace has grown by more than ``AgentConfig.disk_quota_mb``. A single file
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

__all__ = ["MAX_ENTRIES", "over_quota", "workspace_usage"]

MB = 1 << 20
MAX_ENTRIES = 1_000_000  # a workspace with more entries counts as full: walking it would take too long


def workspace_usage(root: Path, exclude: Iterable[Path] = ()) -> int:
    """Bytes allocated on disk under ``root`` (not following symlinks), ``exclude`` left out. Never raises."""
    skip = {os.path.abspath(p) for p in exclude}
    total, seen, stack = 0, 0, [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return max(total, 1 << 62)
            try:
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif os.path.abspath(entry.path) not in skip:
                total += stat.st_blocks * 512
    return total


def over_quota(grown: int, quota_mb: int) -> str | None:
    """Why the run must stop when the workspace grew by ``grown`` bytes, or None within the quota."""
    if grown <= quota_mb * MB:
        return None
    return (
        f"the workspace grew by {grown / MB:,.0f} MB during the run, over its disk quota of {quota_mb:,} MB; "
        "the run stops here (the files are kept: delete what you do not need, or raise --disk-quota)"
    )
