"""The run's workspace on disk: where it goes by default, where its records go, what each round changed.

Owns the default location of a run (``./agent-runs/<time>-<slug>``), the rule that the host's records of
a run (its notebooks, a plan's state and report) live *beside* the workspace and never in it (the kernel
can rewrite anything in its workspace, at any moment), and the before/after snapshots that turn into a
round's ``Artifact`` list.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import ConfigError
from ..result import Artifact
from .door import Door

__all__ = [
    "Snapshot",
    "changed_files",
    "check_outside",
    "default_workspace",
    "fresh_beside",
    "fresh_folder",
    "recorded_workspace",
    "records_beside",
    "resolve_outside_workspaces",
    "snapshot",
    "workspace_from",
    "workspace_holding",
]

_MAX_FILES = 20_000


class Snapshot(dict[str, tuple[int, int]]):
    """Size and mtime_ns of the workspace's files by relative path. ``partial``: why some file may be
    missing from it (too many files or entries, a folder the walk could not read), None when none is."""

    partial: str | None = None


def default_workspace(task: str, root: Path | None = None) -> Path:
    """A fresh folder for a run: ``<root or cwd>/agent-runs/<YYYYmmdd-HHMMSS>-<slug>``."""
    slug = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:40] or "run"
    return _fresh((root or Path.cwd()) / "agent-runs", f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}")


def _fresh(base: Path, name: str) -> Path:
    candidate, n = base / name, 2
    while os.path.lexists(candidate):
        candidate = base / f"{name}-{n}"
        n += 1
    return candidate


def fresh_folder(folder: Path) -> Path:
    """``folder``, else ``folder-2``, ``folder-3``, …: the first that does not exist yet."""
    return _fresh(folder.parent, folder.name)


def fresh_beside(notebook: Path) -> Path:
    """A new folder beside ``notebook`` for continuing its run: ``<stem>-<YYYYmmdd-HHMMSS>``."""
    stem = notebook.stem if notebook.suffix == ".ipynb" else notebook.name
    return _fresh(Path(os.path.abspath(notebook)).parent, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")


def records_beside(workspace: Path, suffix: str = ".ipynb", *, hidden: bool = False) -> Path:
    """Where the host's record of a run in ``workspace`` goes by default: beside it, named after it
    (``agent-runs/<run>`` → ``agent-runs/<run>.ipynb``), out of the kernel's reach. ``hidden``: a dot name
    (``.<run>.ipynb``), for a front end whose user sees another notebook (the chat's)."""
    folder = Path(os.path.abspath(workspace))
    return folder.parent / f"{'.' if hidden else ''}{folder.name or 'workspace'}{suffix}"


def workspace_holding(path: str | os.PathLike[str]) -> Path | None:
    """The run's workspace ``path`` lies in (the nearest ancestor, never ``path`` itself), else None.

    A folder is taken for a run's workspace when its record is beside it (``records_beside``: written
    by the host, out of the kernel's reach, so the kernel cannot hide its folder by deleting a marker)
    or when it sits in an ``agent-runs`` folder (the default layout, before its first record). A
    user's folder that happens to have a notebook of its name beside it counts too: the cost is only
    that links in it are not followed."""
    folder = Path(os.path.abspath(path))
    for ancestor in folder.parents:
        if ancestor.parent == ancestor:
            break
        if (
            ancestor.parent.name == "agent-runs"
            or os.path.lexists(records_beside(ancestor))
            or os.path.lexists(records_beside(ancestor, hidden=True))
        ):
            return ancestor
    return None


def resolve_outside_workspaces(path: str | os.PathLike[str]) -> str:
    """``os.path.realpath(path)``, except that a link lying inside a run's workspace is never followed.

    The analysed code can plant a link anywhere in its workspace (``out.csv -> /root/.ssh/id_rsa``); a
    host that follows it reads, as the user, whatever it names. Links elsewhere (the user's own) are
    followed as usual, hop by hop, so a chain of links is checked at every hop. Raises ``ConfigError``
    naming the link, and ``OSError`` (``ELOOP``) past 40 hops."""
    pending = list(reversed(Path(os.path.abspath(os.path.expanduser(path))).parts[1:]))
    current, hops = "/", 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except OSError:  # missing, or not a folder on the way: the caller's own check names it
            return os.path.join(candidate, *reversed(pending))
        if not is_link:
            current = candidate
            continue
        workspace = workspace_holding(candidate)
        if workspace is not None:
            raise ConfigError(
                f"{candidate} is a link inside the run workspace {workspace}, where the analysed code "
                "writes: links there are not followed; name the file it leads to instead"
            )
        hops += 1
        if hops > 40:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
        target = Path(os.readlink(candidate))
        current = "/" if target.is_absolute() else current
        pending.extend(reversed(target.parts[1:] if target.is_absolute() else target.parts))
    return current


def recorded_workspace(workspace: Path, notebook: Path) -> str:
    """The workspace as a notebook records it: relative to the notebook's folder when under it (a claim
    ``resume`` and ``replay`` may follow there, never further), else absolute (shown, never used)."""
    return workspace_from(notebook, workspace) or os.path.abspath(workspace)


def workspace_from(notebook: Path, workspace: Path) -> str | None:
    """The workspace as a plain relative path from the notebook's folder, when it is under it (a run's
    default layout); None otherwise."""
    folder, beside = Path(os.path.abspath(workspace)), Path(os.path.abspath(notebook)).parent
    if folder == beside or not folder.is_relative_to(beside):
        return None
    return folder.relative_to(beside).as_posix()


def check_outside(record: Path, workspace: Path) -> None:
    """Raise ``ConfigError`` when ``record`` (a notebook, a plan's state) would be inside ``workspace``,
    where the analysed code can rewrite it and so rewrite the run's history."""
    for resolve in (os.path.abspath, os.path.realpath):
        inner, outer = Path(resolve(record)), Path(resolve(workspace))
        if inner.is_relative_to(outer):
            raise ConfigError(
                f"the notebook {record} would be inside the workspace {workspace}, where the analysed code can "
                f"rewrite it; write it beside the workspace (the default: {records_beside(workspace)})"
            )


def snapshot(root: Path, exclude: Iterable[Path] = ()) -> Snapshot:
    """Size and mtime of every regular file under ``root`` (hidden names skipped, links neither listed
    nor followed, bounded in count), read through the door; ``partial`` says when some may be missing.
    ``exclude``: files the host itself writes."""
    skip = {os.path.abspath(path) for path in exclude}
    names = {
        Path(path).relative_to(os.path.abspath(root)).as_posix()
        for path in skip
        if Path(path).is_relative_to(os.path.abspath(root))
    }
    try:
        found = Door(root).listing(limit=_MAX_FILES + len(names))
    except FileNotFoundError:
        return Snapshot()
    taken = Snapshot((path, seen) for path, seen in found.files.items() if path not in names)
    if found.unwalked is not None:
        taken.partial = f"the workspace was not walked whole: {found.unwalked}"
    elif found.partial:
        taken.partial = f"it holds {found.total:,} files; only the first {len(found.files):,} are listed"
    return taken


def changed_files(before: Snapshot, after: Snapshot) -> tuple[Artifact, ...]:
    """Files created or modified between two snapshots, in path order."""
    artifacts = []
    for path in sorted(after):
        if path not in before:
            artifacts.append(Artifact(path, after[path][0], "created"))
        elif after[path] != before[path]:
            artifacts.append(Artifact(path, after[path][0], "modified"))
    return tuple(artifacts)
