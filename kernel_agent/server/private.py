"""The service's files are its owner's alone: owner-only modes under the data dir and for the database file.

Owns ``PRIVATE_UMASK`` (``serve`` and ``kernel-agent keys`` set it as they start, so every file the process
and its kernels make is ``0600`` and every folder ``0700``, whatever umask they were started with),
``private_folder`` (a folder made ``0700`` whatever the umask), ``private_database`` (the embedded SQLite
file made ``0600`` before SQLite makes it; SQLite gives its ``-wal`` and ``-shm`` the database's mode) and
``tighten`` (a data dir an older version made readable by others, taken back at start). Every tenant's
tasks, code, outputs and uploads are under the data dir, so no other local user may read any of it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sqlalchemy.engine import URL

__all__ = ["PRIVATE_UMASK", "private_database", "private_folder", "tighten"]

PRIVATE_UMASK = 0o077
_OTHERS = 0o077  # the group's and everyone else's bits


def private_folder(path: Path) -> None:
    """Make ``path`` and its missing parents as ``0700`` folders (the mode is given each one: ``os.makedirs``
    gives it only the last); an existing one is left as it is."""
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile (another replica, another request)
            pass


def private_database(url: URL) -> None:
    """The embedded SQLite file of ``url`` made (empty, ``0600``) before SQLite opens it; nothing for a
    server database or a file that exists (``tighten`` takes an older one back)."""
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return
    path = Path(url.database)
    private_folder(path.parent)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass


def tighten(root: Path, url: URL) -> int:
    """Take the group's and others' bits off every file and folder under the data dir ``root`` and off the
    embedded database and its journals; return how many entries changed (blocking).

    The kernels' workspaces are entered no deeper than their folder (0700 keeps everyone else out of what
    the analysed code wrote there, and the host never walks into a workspace but through the door): so every
    entry changed here is one the service made, where no kernel could plant a link; links are skipped."""
    entries: list[Path] = [root]
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        entries += [Path(url.database + suffix) for suffix in ("", "-wal", "-shm", "-journal")]
    for folder, folders, files in os.walk(root):
        here = Path(folder)
        entries += [here / name for name in (*folders, *files)]
        if here.parent.name == "threads" and here.parent.parent == root:
            folders[:] = [name for name in folders if name != "workspace"]  # the folder itself is listed above
    return sum(_tighten_one(path) for path in entries)


def _tighten_one(path: Path) -> int:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return 0
    if stat.S_ISLNK(info.st_mode) or not stat.S_IMODE(info.st_mode) & _OTHERS:
        return 0
    path.chmod(stat.S_IMODE(info.st_mode) & ~_OTHERS)
    return 1
