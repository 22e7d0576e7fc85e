"""The one door between the host and a folder the kernel can write: ``Door``.

The kernel lives on between rounds and turns, runs as the user who started it, and can plant a link or
swap a file for one at any moment, also while the host is looking. So every host-side read or write of
a path inside a workspace goes through here, and nothing here trusts a check made before an open:

* a path is relative to the folder and plain (no ``..``, no absolute path, no NUL);
* it is opened from the folder's directory fd without following a symlink at any component:
  ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it, else a walk of
  ``O_NOFOLLOW | O_DIRECTORY`` opens, one component at a time (``_WALK_ONLY`` forces the walk);
* the opened fd is checked with ``fstat`` (a regular file; a FIFO or device is refused, and
  ``O_NONBLOCK`` keeps a FIFO from hanging the open), and read, streamed or written through that fd;
* a write goes to a temp file with a random name, created with ``O_EXCL``, then renamed over the
  entry in the same directory fd (a planted link is replaced, never written through);
* an append (a log the host keeps, eval's ``results.jsonl``) opens ``O_APPEND | O_NOFOLLOW | O_NONBLOCK``
  from the folder's fd and writes only to a regular file of one name; a folder is made with ``mkdirat``
  and checked by an ``O_NOFOLLOW`` open, so a planted link is never made into or written through;
* listings (artifacts, quota) walk the tree with ``scandir``, one folder at a time, each opened from the
  root's fd by the same no-link open and closed before the next: two descriptors at most, whatever the
  tree's width or depth (21,000 empty folders once held one each, hit the open-file limit and hid what
  lay below them). A walk never skips quietly: a folder it cannot open, an entry it cannot stat, more
  than ``MAX_ENTRIES`` entries or folders more than ``MAX_DEPTH`` deep, and its result says why it is
  not whole (``Found.unwalked``, ``usage``'s second value); the disk quota then stops the run.

The host's own records (notebooks in both views, a plan's state, report and figures, HTML pages) go
through here too, by ``write_record`` and ``read_record``: a record's folder is the user's choice, but
what is in it may have come from someone else (a zip, a tar or a git checkout of a colleague's run keeps
its links), so below that folder the same rules hold. One atomic writer, with one durability rule named
by its caller: ``durable`` fsyncs the file before the rename and the folder after it; without it a killed
process still loses nothing (the page cache holds the rename), only a power cut may.

Owns that and nothing else: what a caller does with the bytes is its business. Sync and blocking (call
it from a worker thread in async code). Raises ``WorkspaceFileError`` for a path that is refused or not
a regular file, ``FileNotFoundError`` for one that is not there, and ``OSError`` for the rest.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from ..errors import WorkspaceFileError

__all__ = [
    "CHUNK",
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "Door",
    "Found",
    "Listing",
    "WalkBounds",
    "read_record",
    "write_record",
    "write_records",
]

CHUNK = 1024 * 1024
Listing = dict[str, tuple[int, int]]  # relative path -> (size, mtime_ns), the shape of workspace snapshots
MAX_ENTRIES = 1_000_000  # entries one walk reads: past it a listing is partial and the disk quota stops the run
MAX_DEPTH = 256  # folders deep one walk descends (a path that deep is ~1 KB even with 2-letter names)
_HELD = 8  # folders a walk keeps open above the one it reads (so a deep tree is not re-resolved from the root)

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())
_WALK_ONLY = False  # tests set it to exercise the component walk where openat2 exists


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _libc_syscall() -> Callable[..., int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_long
    return function


_syscall = _libc_syscall() if _SYS_OPENAT2 is not None else None
_openat2_works: bool | None = None  # probed on first use


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
    assert _syscall is not None
    fd = _syscall(_SYS_OPENAT2, dir_fd, path.encode(), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


def _have_openat2(dir_fd: int) -> bool:
    global _openat2_works
    if _WALK_ONLY or _syscall is None:
        return False
    if _openat2_works is None:
        try:
            os.close(_openat2(dir_fd, ".", _DIR))
            _openat2_works = True
        except OSError as exc:  # ENOSYS: an older kernel; EPERM: a seccomp filter that refuses it
            _openat2_works = exc.errno not in (errno.ENOSYS, errno.EPERM)
    return _openat2_works


def plain_parts(relative: str) -> list[str]:
    """The components of a relative path. Raises ``WorkspaceFileError`` for one that is not plain."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise WorkspaceFileError(f"not a usable path: {relative!r}", path=str(relative))
    pure = PurePosixPath(relative)
    parts = [part for part in pure.parts if part not in ("", ".")]
    if pure.is_absolute() or ".." in parts:
        raise WorkspaceFileError(f"{relative!r} is outside the workspace", path=relative)
    return parts


class Door:
    """Reads and writes under ``root`` (a folder the kernel may write), never following a link in it.

    ``root`` itself is the host's choice (a run's workspace, a thread's folder) and is opened without
    following a link; every path handed to a method is relative to it.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"<Door {self.root}>"

    # ------------------------------------------------------------------ opening
    @contextmanager
    def _root_fd(self) -> Iterator[int]:
        fd = os.open(self.root, _DIR)
        try:
            yield fd
        finally:
            os.close(fd)

    def _open_at(self, root_fd: int, parts: list[str], flags: int, relative: str) -> int:
        """``parts`` under ``root_fd``, no link followed at any component."""
        try:
            if not parts:
                return os.dup(root_fd) if flags & os.O_DIRECTORY else os.open(".", flags, dir_fd=root_fd)
            if _have_openat2(root_fd):
                return _openat2(root_fd, "/".join(parts), flags)
            fd = os.dup(root_fd)
            try:
                for part in parts[:-1]:
                    next_fd = os.open(part, _DIR, dir_fd=fd)
                    os.close(fd)
                    fd = next_fd
                return os.open(parts[-1], flags, dir_fd=fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _refusal(exc, relative) from exc

    @contextmanager
    def _parent(self, relative: str, *, create: bool = False) -> Iterator[tuple[int, str]]:
        """The directory fd holding ``relative``'s last component, and that component's name."""
        parts = plain_parts(relative)
        if not parts:
            raise WorkspaceFileError(f"{relative!r} names the workspace itself, not a file in it", path=relative)
        with self._root_fd() as root_fd:
            fd = os.dup(root_fd)
            try:
                for index, part in enumerate(parts[:-1]):
                    if create:
                        try:
                            os.mkdir(part, 0o777, dir_fd=fd)
                        except FileExistsError:
                            pass
                    next_fd = self._open_at(fd, [part], _DIR, "/".join(parts[: index + 1]))
                    os.close(fd)
                    fd = next_fd
                yield fd, parts[-1]
            finally:
                os.close(fd)

    def _open_regular(self, relative: str) -> tuple[int, os.stat_result]:
        """A read-only fd of the regular file at ``relative`` and its ``fstat``; the caller closes it."""
        parts = plain_parts(relative)
        with self._root_fd() as root_fd:
            fd = self._open_at(root_fd, parts, _READ, relative)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise WorkspaceFileError(f"{relative!r} is not a regular file", path=relative)
        except BaseException:
            os.close(fd)
            raise
        return fd, info

    @contextmanager
    def open_file(self, relative: str) -> Iterator[tuple[int, os.stat_result]]:
        """An fd of the regular file at ``relative`` (read-only) and its ``fstat``, closed on exit."""
        fd, info = self._open_regular(relative)
        try:
            yield fd, info
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ reading
    def file_stat(self, relative: str) -> os.stat_result:
        """The ``fstat`` of the regular file at ``relative``."""
        with self.open_file(relative) as (_fd, info):
            return info

    def has_file(self, relative: str) -> bool:
        """Whether ``relative`` is a regular file reached without a link (False for anything refused)."""
        try:
            self.file_stat(relative)
        except (OSError, WorkspaceFileError):
            return False
        return True

    def read(self, relative: str, limit: int | None = None) -> bytes:
        """The file's bytes. Raises ``WorkspaceFileError`` when it is larger than ``limit``
        (``read_head`` keeps a head instead)."""
        with self.open_file(relative) as (fd, info):
            if limit is not None and info.st_size > limit:
                raise WorkspaceFileError(
                    f"{relative!r} is {info.st_size} bytes, over the {limit}-byte limit", path=relative
                )
            return _read_exactly(fd, info.st_size)

    def read_head(self, relative: str, limit: int | None = None) -> tuple[bytes, int]:
        """Up to ``limit`` bytes from the start of the file (all when None), and its size as opened."""
        with self.open_file(relative) as (fd, info):
            wanted = info.st_size if limit is None else min(limit, info.st_size)
            return _read_exactly(fd, wanted), info.st_size

    def stream(self, relative: str, chunk: int = CHUNK) -> tuple[int, Iterator[bytes]]:
        """The file's size and an iterator of its bytes, read from the fd opened now (closed at the end).

        The size is ``fstat``'s when opened; the iterator stops there even if the file grows."""
        fd, info = self._open_regular(relative)
        return info.st_size, _chunks(fd, info.st_size, chunk)

    # ------------------------------------------------------------------ writing
    def write(
        self, relative: str, data: bytes, *, mode: int | None = 0o644, make_dirs: bool = True, durable: bool = False
    ) -> int:
        """Write ``data`` as the file at ``relative`` (replacing whatever entry is there, a link included);
        return its size. Folders on the way are made (``make_dirs``) but never followed through a link.
        ``mode`` less the process's umask, as a plain create would; None: as the umask allows (``0o666`` less
        it). ``durable``: fsynced, and its folder too."""
        return self._replace(relative, lambda fd: _write_all(fd, data), mode=mode, make_dirs=make_dirs, durable=durable)

    def copy_in(self, source: str | os.PathLike[str], relative: str, *, mode: int = 0o644) -> int:
        """Copy the host file ``source`` (the caller's own, trusted path) to ``relative``; return its size.
        The bytes move in the OS (``sendfile``), without holding the GIL a chunk at a time: a copy beside
        busy Python threads is not slowed to one chunk per GIL switch interval."""
        with open(source, "rb") as handle:
            return self._replace(relative, lambda fd: _send_all(handle.fileno(), fd), mode=mode)

    def write_from(self, relative: str, chunks: Iterator[bytes], *, mode: int = 0o644, make_dirs: bool = True) -> int:
        """Write ``chunks`` to a new temp file (random name, ``O_EXCL``) beside ``relative``, then rename it
        over the entry: never through a planted link, never a half-written file. Returns the size."""
        return self._replace(
            relative, lambda fd: sum(_write_all(fd, chunk) for chunk in chunks), mode=mode, make_dirs=make_dirs
        )

    def _replace(
        self,
        relative: str,
        fill: Callable[[int], int],
        *,
        mode: int | None,
        make_dirs: bool = True,
        durable: bool = False,
        sync_folder: bool = True,
    ) -> int:
        """``fill(fd)`` writes a new temp file beside ``relative`` and returns its size; then it is renamed over
        the entry (``write_from``). ``mode`` None leaves the mode the umask gave; ``durable`` fsyncs the file
        before the rename and (``sync_folder``) the folder after it."""
        with self._parent(relative, create=make_dirs) as (dir_fd, name):
            temp = f".{name[:80]}.{secrets.token_hex(8)}.kernel-agent-partial"
            fd = os.open(
                temp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600 if mode is not None else 0o666,
                dir_fd=dir_fd,
            )
            try:
                try:
                    size = fill(fd)
                    if mode is not None:
                        os.fchmod(fd, mode & ~_umask())  # as a plain create would: serve's 077 keeps it private
                    if durable:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                if durable and sync_folder:
                    _fsync_quietly(dir_fd)
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=dir_fd)
                except OSError:
                    pass
                raise
            return size

    def append(self, relative: str, data: bytes, *, durable: bool = True) -> int:
        """Append ``data`` to the regular file at ``relative`` (made when missing), never through a link
        and never blocking on a FIFO: opened ``O_APPEND | O_NOFOLLOW | O_NONBLOCK`` from its folder's fd
        (folders on the way made, never followed), then ``fstat``-checked. A file with another name
        (a hard link: someone else's file) is refused too, since appending would change it. ``durable``:
        fsynced before this returns. Returns the bytes written."""
        with self._parent(relative, create=True) as (dir_fd, name):
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
            try:
                fd = os.open(name, flags, 0o666, dir_fd=dir_fd)
            except OSError as exc:
                raise _refusal(exc, relative) from exc
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise WorkspaceFileError(f"{relative!r} is not a regular file", path=relative)
                if info.st_nlink != 1:
                    raise WorkspaceFileError(
                        f"{relative!r} has another name (a hard link); not appended to", path=relative
                    )
                size = _write_all(fd, data)
                if durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
            return size

    def make_folder(self, relative: str, *, exclusive: bool = False) -> bool:
        """Make the folder ``relative`` (and the folders on the way), never following a link; True when it
        was made now, False when it already was a real folder. ``exclusive``: raise ``FileExistsError``
        when any entry of that name is there (a fresh folder or none). Raises ``WorkspaceFileError`` when
        the entry (or a folder on the way) is a link or not a folder."""
        with self._parent(relative, create=True) as (dir_fd, name):
            try:
                os.mkdir(name, 0o777, dir_fd=dir_fd)
                made = True
            except FileExistsError:
                if exclusive:
                    raise
                made = False
            fd = self._open_at(dir_fd, [name], _DIR, relative)  # a link or a file where it should be: refused
            os.close(fd)
            return made

    def remove(self, relative: str) -> bool:
        """Remove the entry ``relative`` itself (a file, or a link: never followed), reached without following
        a link on the way; True when it was there. Raises ``WorkspaceFileError`` for a link on the way, and
        ``OSError`` for a folder (``IsADirectoryError``) or a removal the system refuses."""
        with self._parent(relative) as (dir_fd, name):
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                return False
            return True

    def same_file(self, relative: str, other: os.stat_result) -> bool:
        """Whether ``relative`` is (not links to) the file ``other`` describes."""
        try:
            info = self.file_stat(relative)
        except (OSError, WorkspaceFileError):
            return False
        return (info.st_dev, info.st_ino) == (other.st_dev, other.st_ino)

    def entry_kind(self, relative: str) -> str | None:
        """What the entry at ``relative`` is without following it: "file", "dir", "link", "other", None."""
        try:
            with self._parent(relative) as (dir_fd, name):
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(info.st_mode):
            return "link"
        return "file" if stat.S_ISREG(info.st_mode) else "dir" if stat.S_ISDIR(info.st_mode) else "other"

    # ------------------------------------------------------------------ listing
    def listing(
        self, folder: str = ".", *, hidden: bool = False, limit: int = 100_000, bounds: WalkBounds | None = None
    ) -> Found:
        """Regular files under ``folder`` (recursive; links and what they lead to are not listed, hidden
        names skipped unless ``hidden``): at most ``limit`` of them, how many there were in all, and why the
        walk did not see every entry (``Found.unwalked``; ``Found.partial`` says either). Raises
        ``WorkspaceFileError`` for a ``folder`` refused, ``FileNotFoundError``/``OSError`` for one not opened."""
        found: Listing = {}
        total = 0
        walk = _Walk(self, folder, hidden=hidden, bounds=bounds or WalkBounds())
        for path, info in walk:
            if stat.S_ISREG(info.st_mode):
                total += 1
                if len(found) < limit:
                    found[path] = (info.st_size, info.st_mtime_ns)
        return Found(found, total, walk.unwalked)

    def usage(
        self, exclude: frozenset[str] = frozenset(), *, bounds: WalkBounds | None = None
    ) -> tuple[int, str | None]:
        """Bytes the entries under the root take on disk (folders themselves and ``exclude``, relative
        paths, left out; links counted, never followed), and why the walk did not see every entry (None: it
        did, the count is whole). Raises ``FileNotFoundError``/``OSError`` when the root cannot be opened."""
        total = 0
        walk = _Walk(self, ".", hidden=True, bounds=bounds or WalkBounds())
        for path, info in walk:
            if not stat.S_ISDIR(info.st_mode) and path not in exclude:
                total += info.st_blocks * 512
        return total, walk.unwalked


@dataclass(frozen=True)
class WalkBounds:
    """How much of a tree one walk takes on: ``entries`` in all (files, folders, links, anything), folders
    ``depth`` deep below where it starts. A tree past either is walked no further and the walk says so."""

    entries: int = MAX_ENTRIES
    depth: int = MAX_DEPTH


@dataclass(frozen=True)
class Found:
    """A listing: ``files`` (relative path -> (size, mtime_ns), at most the caller's limit), ``total`` regular
    files seen, and ``unwalked``: why the walk did not see every entry (None: it saw them all)."""

    files: Listing
    total: int
    unwalked: str | None = None

    @property
    def partial(self) -> bool:
        """Whether some file under the folder may be missing from ``files``."""
        return self.unwalked is not None or self.total > len(self.files)


class _Walk:
    """One walk of the tree under ``folder``, iterated once: (relative path, lstat) of every entry.

    Holds ``_HELD`` + 2 descriptors at most, whatever the tree's width or depth: the root's, the folders
    on the way down to the one read now (the nearest ``_HELD``, closed as the walk leaves them), and
    that one. The folders still to read are kept as name paths, not fds, and each is opened from the
    nearest open folder above it with the door's no-link open, so a folder swapped for a link is
    refused, never followed. Nothing is skipped quietly: an open or a stat that fails
    (a descriptor limit, a permission, the tree changing under the walk), a tree of more than
    ``bounds.entries`` entries or folders deeper than ``bounds.depth`` leaves ``unwalked`` saying why
    (the first reason); the walk goes on with the rest, but past the entry bound it stops."""

    def __init__(self, door: Door, folder: str, *, hidden: bool, bounds: WalkBounds) -> None:
        self.door, self.hidden, self.bounds = door, hidden, bounds
        self.start = [] if folder in ("", ".") else plain_parts(folder)
        self.folder = folder
        self.unwalked: str | None = None

    def _note(self, why: str) -> None:
        if self.unwalked is None:
            self.unwalked = why

    def __iter__(self) -> Iterator[tuple[str, os.stat_result]]:
        seen = 0
        with self.door._root_fd() as root_fd:
            os.close(self.door._open_at(root_fd, self.start, _DIR, self.folder))  # refused or missing: raised
            pending = [("/".join(self.start), 0)]  # (path, depth below the start): folders still to read
            held = [("", root_fd)]  # the folders above the one read now, opened (the root's first)
            try:
                while pending:
                    path, depth = pending.pop()
                    while len(held) > 1 and not path.startswith(held[-1][0] + "/"):
                        os.close(held.pop()[1])
                    entries, fd = self._read(held[-1], path)
                    if fd is not None:
                        held.append((path, fd))
                        if len(held) > _HELD + 1:  # the nearest ones are kept: the next folder is under them
                            os.close(held.pop(1)[1])
                    folders = []
                    for name, info in entries:
                        seen += 1
                        if seen > self.bounds.entries:
                            self._note(f"it holds more than {self.bounds.entries:,} entries, more than a walk reads")
                            return
                        inner = f"{path}/{name}" if path else name
                        yield inner, info
                        if stat.S_ISDIR(info.st_mode):
                            if depth >= self.bounds.depth:
                                self._note(f"its folders nest deeper than {self.bounds.depth} ({inner!r})")
                            else:
                                folders.append((inner, depth + 1))
                    pending.extend(reversed(folders))  # read in name order
            finally:
                for _path, fd in held[1:]:
                    os.close(fd)

    def _read(self, above: tuple[str, int], path: str) -> tuple[list[tuple[str, os.stat_result]], int | None]:
        """The entries of the folder ``path`` (hidden ones left out unless asked), each with its lstat, in
        name order, and its fd (the caller's to close; None when it failed). It is opened from ``above``,
        the nearest folder over it still open, by the rest of its name path, no link followed. Whatever
        fails is noted."""
        relative = path or "."
        rest = path[len(above[0]) + 1 :] if above[0] else path
        try:
            fd = self.door._open_at(above[1], rest.split("/") if rest else [], _DIR, relative)
        except (OSError, WorkspaceFileError) as exc:
            self._note(f"the folder {relative!r} could not be read ({_why(exc)})")
            return [], None
        try:
            with os.scandir(fd) as listed:
                names = sorted(entry.name for entry in listed if self.hidden or not entry.name.startswith("."))
            entries = []
            for name in names:
                try:
                    entries.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
                except OSError as exc:
                    self._note(f"{f'{path}/{name}' if path else name!r} could not be read ({_why(exc)})")
            return entries, fd
        except OSError as exc:
            os.close(fd)
            self._note(f"the folder {relative!r} could not be read ({_why(exc)})")
            return [], None
        except BaseException:
            os.close(fd)
            raise


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _umask() -> int:
    """The process's umask, read without changing it (setting it to read it back races other threads'
    creates); 0o022 where the kernel does not say (Linux before 4.7, other systems)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


# ---------------------------------------------------------------------- the host's own records
def _record_door(path: str | os.PathLike[str]) -> tuple[Door, str]:
    """A door on ``path``'s folder (the user's choice) and the file's name in it."""
    path = Path(path)
    if not path.name or path.name in (".", ".."):
        raise WorkspaceFileError(f"{str(path)!r} does not name a file", path=str(path))
    return Door(path.parent), path.name


def write_record(
    path: str | os.PathLike[str], data: bytes, *, durable: bool, mode: int | None = None, make_dirs: bool = True
) -> int:
    """Write the host's record ``path`` atomically: ``write_records`` of its folder and name; its size."""
    door, name = _record_door(path)
    try:
        return write_records(door.root, {name: data}, durable=durable, mode=mode)
    except FileNotFoundError:
        if not make_dirs or os.path.lexists(door.root):
            raise
    os.makedirs(door.root, exist_ok=True)  # the first record in a folder the user named: made, then written
    return write_records(door.root, {name: data}, durable=durable, mode=mode)


def write_records(
    folder: str | os.PathLike[str], files: dict[str, bytes], *, durable: bool, mode: int | None = None
) -> int:
    """Write each of ``files`` (a plain relative path under ``folder``, e.g. ``run_figures/a.png``) with
    ``Door.write``: a random ``O_EXCL`` temp file renamed over the entry, so a link planted at a name is
    replaced, never written through, and no link below ``folder`` is followed (folders on the way are
    made). The one durability rule: ``durable`` fsyncs each file before its rename and each folder
    holding them once, after the last rename. ``mode`` None: as the umask allows. Returns the bytes
    written. Raises ``WorkspaceFileError`` for a refused path, ``OSError`` for the rest (the files
    before the failing one are written)."""
    try:
        return _write_records(Door(folder), files, durable=durable, mode=mode)
    except OSError as exc:  # the folder itself a link: refused in words
        refusal = _refusal(exc, str(folder))
        if refusal is exc:
            raise
        raise refusal from exc


def _write_records(door: Door, files: dict[str, bytes], *, durable: bool, mode: int | None) -> int:
    total = 0
    for relative, data in files.items():
        total += door._replace(relative, partial(_write_all, data=data), mode=mode, durable=durable, sync_folder=False)
    if durable:
        for parent in dict.fromkeys(PurePosixPath(relative).parent.as_posix() for relative in files):
            with door._root_fd() as root_fd:
                fd = door._open_at(root_fd, [] if parent == "." else plain_parts(parent), _DIR, parent)
            try:
                _fsync_quietly(fd)
            finally:
                os.close(fd)
    return total


def read_record(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the host's record ``path``: a regular file reached without a link below its folder
    (a link, FIFO, device or socket is refused at once, never waited on), at most ``limit`` bytes.
    Raises ``WorkspaceFileError`` for a refused path or one over ``limit``, ``FileNotFoundError``, ``OSError``."""
    door, name = _record_door(path)
    try:
        return door.read(name, limit)
    except OSError as exc:  # the folder itself a link: refused in words
        refusal = _refusal(exc, str(path))
        if refusal is exc:
            raise
        raise refusal from exc


def _fsync_quietly(fd: int) -> None:
    """Make a rename in the folder ``fd`` durable; some filesystems cannot, which is fine."""
    try:
        os.fsync(fd)
    except OSError:
        pass


def _refusal(exc: OSError, relative: str) -> BaseException:
    """The words for an open the door refused (a link on the way, a way out), else ``exc`` itself."""
    if exc.errno == errno.ELOOP:
        return WorkspaceFileError(f"{relative!r} leads through a link; links there are not followed", path=relative)
    if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP, errno.EISDIR):  # a socket, a FIFO without a reader (a
        # non-blocking write open), a device without a driver, a folder opened to write: never opened
        return WorkspaceFileError(f"{relative!r} is not a regular file", path=relative)
    if exc.errno == errno.EXDEV:
        return WorkspaceFileError(f"{relative!r} is outside the workspace", path=relative)
    if exc.errno == errno.ENOTDIR:  # O_DIRECTORY | O_NOFOLLOW on a link, or a file where a folder should be
        return WorkspaceFileError(
            f"{relative!r} leads through a link or through a file that is not a folder", path=relative
        )
    return exc


def _read_exactly(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _chunks(fd: int, size: int, chunk: int) -> Iterator[bytes]:
    try:
        left = size
        while left > 0:
            data = os.read(fd, min(left, chunk))
            if not data:
                return
            left -= len(data)
            yield data
    finally:
        os.close(fd)


def _send_all(source: int, target: int) -> int:
    """Everything from the fd ``source`` to ``target``, copied by the OS; the bytes sent. Falls back to
    reads and writes where ``sendfile`` cannot (not a regular file on one side, an old kernel)."""
    sent = 0
    try:
        while True:
            count = os.sendfile(target, source, None, 1 << 30)
            if count == 0:
                return sent
            sent += count
    except OSError as exc:
        if sent or exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
    while chunk := os.read(source, CHUNK):
        sent += _write_all(target, chunk)
    return sent


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    return len(data)
