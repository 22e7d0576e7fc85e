"""Issue 48's benchmark: the workspace walk, bounded in descriptors, against the walk it replaced.
``NAME`` and ``PARTS`` for ``run.py``.

The walk lists a round's files and measures the disk quota (``Door.listing``, ``Door.usage``). The one
before issue 48 (kept below as ``_old_walk``, as it was) held an open fd for every folder still to read,
so 21,000 empty folders ran the process out of descriptors and it skipped what lay below; the new one
holds two at most and opens each folder by its name path from the root's fd (``openat2`` without links,
one syscall; else one ``O_NOFOLLOW`` open per component).

* ``files``: 2,000 files in 40 folders (a round's artifact listing): the usage walk, new vs old.
* ``folders``: 20,000 empty folders in one (wide, where the old walk held 20,000 fds at once), then
  20,000 folders as 200 chains of 100 (deep: the new walk re-opens each by a longer path).

Each side runs alternately on the same tree after a warm-up (dentry cache warm on both). Both count
every entry here (the old walk under a raised open-file limit): the rows compare cost, not coverage.
"""

from __future__ import annotations

import os
import resource
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench_door import _alternate
from report import Row, scaled

from kernel_agent.kernel.door import _DIR, Door

NAME = "walk"


def _old_walk(door: Door, *, hidden: bool = True) -> Iterator[tuple[str, os.stat_result]]:
    """``Door._walk`` before issue 48, as it was: one open fd per folder still to read, and a folder
    whose open failed (EMFILE included) skipped without a word."""
    with door._root_fd() as root_fd:
        start = door._open_at(root_fd, [], _DIR, ".")
    stack = [(start, "")]
    try:
        while stack:
            fd, prefix = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    listed = sorted(entries, key=lambda entry: entry.name)
                for entry in listed:
                    if not hidden and entry.name.startswith("."):
                        continue
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    path = f"{prefix}/{entry.name}" if prefix else entry.name
                    yield path, info
                    if stat.S_ISDIR(info.st_mode):
                        try:
                            stack.append((os.open(entry.name, _DIR, dir_fd=fd), path))
                        except OSError:
                            continue
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)


def _old_usage(door: Door) -> tuple[int, int]:
    total = count = 0
    for _path, info in _old_walk(door):
        count += 1
        if not stat.S_ISDIR(info.st_mode):
            total += info.st_blocks * 512
    return total, count


def _new_usage(door: Door) -> tuple[int, int]:
    total, unwalked = door.usage()
    if unwalked is not None:
        raise AssertionError(f"the walk was not whole: {unwalked}")
    return total, 0


def _compare(root: Path, label: str, entries: int, rounds: int) -> Row:
    door = Door(root)
    if _old_usage(door)[1] != entries:
        raise AssertionError("the old walk missed entries (raise the open-file limit)")
    if _new_usage(door)[0] != _old_usage(door)[0]:
        raise AssertionError("the walks counted different bytes")
    ours, theirs = _alternate(lambda: _new_usage(door), lambda: _old_usage(door), rounds, 1)
    return Row(f"workspace walk of {label}: bounded fds vs one fd per pending folder", ours, theirs, max_ratio=1.5)


def _raised_fd_limit(wanted: int) -> None:
    """The old walk needs a descriptor per pending folder: let it have them, so both walk the whole tree."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (min(wanted, hard) if hard != resource.RLIM_INFINITY else wanted, hard)
        )


def files(quick: int) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="kernel-agent-bench-walk-") as folder:
        root = Path(folder)
        count = scaled(quick, 2000, 2000, 200)
        for n in range(count):
            path = root / f"folder{n % 40}" / f"file{n}.csv"
            path.parent.mkdir(exist_ok=True)
            path.write_text("x\n")
        label = f"{count:,} files in 40 folders"
        return [_compare(root, label, count + 40, scaled(quick, 15, 5, 1))]


def folders(quick: int) -> list[Row]:
    count = scaled(quick, 20_000, 20_000, 500)
    _raised_fd_limit(count + 256)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernel-agent-bench-walk-") as folder:
        root = Path(folder)
        for n in range(count):
            os.mkdir(root / f"d{n}")
        rows.append(_compare(root, f"{count:,} empty folders in one", count, scaled(quick, 7, 3, 1)))
    with tempfile.TemporaryDirectory(prefix="kernel-agent-bench-walk-") as folder:
        root = Path(folder)
        chains, depth = count // 100, 100
        for chain in range(chains):
            os.makedirs(root.joinpath(f"c{chain}", *(f"n{level}" for level in range(depth - 1))))
        label = f"{chains * depth:,} folders as {chains} chains {depth} deep"
        rows.append(_compare(root, label, chains * depth, scaled(quick, 7, 3, 1)))
    return rows


PARTS = {"files": files, "folders": folders}
