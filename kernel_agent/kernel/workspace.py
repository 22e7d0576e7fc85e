"""The run's workspace on disk: where it goes by default and what each round changed.

Owns the default location of a run (``./agent-runs/<time>-<slug>``) and the
before/after snapshots that turn into a round's ``Artifact`` list. Files
the agent itself writes (the notebooks) are excluded by the caller.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from ..result import Artifact
from .door import Door

__all__ = ["Snapshot", "changed_files", "default_workspace", "snapshot"]

Snapshot = dict[str, tuple[int, int]]
_MAX_FILES = 20_000


def default_workspace(task: str, root: Path | None = None) -> Path:
    """A fresh folder for a run: ``<root or cwd>/agent-runs/<YYYYmmdd-HHMMSS>-<slug>``."""
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:40] or "run"
    base = (root or Path.cwd()) / "agent-runs"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = base / f"{stamp}-{slug}"
    n = 2
    while candidate.exists():
        candidate = base / f"{stamp}-{slug}-{n}"
        n += 1
    return candidate


def snapshot(root: Path, exclude: Iterable[Path] = ()) -> Snapshot:
    """Size and mtime of every regular file under ``root`` (hidden names skipped, links neither listed
    nor followed, bounded in count), read through the door. ``exclude``: files the host itself writes."""
    skip = {os.path.abspath(path) for path in exclude}
    names = {Path(path).relative_to(os.path.abspath(root)).as_posix() for path in skip
             if Path(path).is_relative_to(os.path.abspath(root))}
    try:
        listing, _ = Door(root).listing(limit=_MAX_FILES + len(names))
    except FileNotFoundError:
        return {}
    return {path: found for path, found in listing.items() if path not in names}


def changed_files(before: Snapshot, after: Snapshot) -> tuple[Artifact, ...]:
    """Files created or modified between two snapshots, in path order."""
    artifacts = []
    for path in sorted(after):
        if path not in before:
            artifacts.append(Artifact(path, after[path][0], "created"))
        elif after[path] != before[path]:
            artifacts.append(Artifact(path, after[path][0], "modified"))
    return tuple(artifacts)
