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
hidden files included, symlinks not followed. A workspace the walk cannot
count whole (``door.MAX_ENTRIES`` entries, folders ``door.MAX_DEPTH`` deep, a
folder it cannot open) is over the quota too, with the reason (``unmeasured``):
it never passes for want of a count. It does not stop many files
that are each under the per-file cap from filling the disk *during* one
round (the check comes after it), and it does not see writes outside the
workspace (``/tmp``, the home folder): a filesystem quota or the sandbox's
private tmpfs bounds those.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ...errors import KernelAgentError
from ...kernel.door import MAX_ENTRIES, Door, WalkBounds

__all__ = ["MAX_ENTRIES", "over_quota", "unmeasured", "workspace_usage"]

MB = 1 << 20


def workspace_usage(
    root: Path, exclude: Iterable[Path] = (), bounds: WalkBounds | None = None
) -> tuple[int, str | None]:
    """Bytes allocated on disk under ``root`` (through the door: no link followed), ``exclude`` left out,
    and why that count is not whole (None: it is). Never raises: a missing workspace takes nothing; one
    that cannot be opened or walked whole says why."""
    names = frozenset(_relative(root, path) for path in exclude)
    try:
        return Door(root).usage(names, bounds=bounds)
    except FileNotFoundError:
        return 0, None
    except (OSError, KernelAgentError) as exc:
        return 0, f"the workspace could not be opened ({exc})"


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


def unmeasured(why: str) -> str:
    """Why the run must stop when its workspace could not be measured whole: ``why`` the walk said."""
    return (
        f"the workspace could not be measured for its disk quota: {why}; the run stops here (the files are kept: "
        "delete what you do not need, or turn the quota off with --disk-quota 0)"
    )
