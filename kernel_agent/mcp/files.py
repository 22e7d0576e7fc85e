"""The workspace's files as MCP tools see them: ``list_files``, ``read_file``, ``write_file``.

Owns the bounds on what one call reads or lists. Every path goes through the
door (``kernel/door.py``): relative to the workspace, opened from its directory
fd without following a link at any component, so a kernel that swaps a folder
for a link while a tool runs gains nothing. Knows nothing of MCP or kernels:
it returns plain values and raises ``WorkspaceFileError`` for a path the client
may not use. Blocking: the server calls these in a worker thread.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import WorkspaceFileError
from ..kernel.door import Door, plain_parts

__all__ = ["FileEntry", "FileRead", "list_files", "read_file", "read_head", "write_file"]

MAX_LIST = 500
MAX_READ_CHARS = 20_000
MAX_IMAGE_BYTES = 5_000_000
MAX_WRITE_BYTES = 50_000_000
_IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
_SKIP_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", ".venv"}


@dataclass(frozen=True)
class FileEntry:
    """One file in the workspace (path relative to it, size in bytes)."""

    path: str
    size: int


@dataclass(frozen=True)
class FileRead:
    """What ``read_file`` found: text (bounded, ``truncated`` says so) or an image (base64)."""

    path: str
    kind: Literal["text", "image", "binary"]
    text: str = ""
    data: str = ""
    mime_type: str = ""
    size: int = 0
    truncated: bool = False


def list_files(workspace: Path, folder: str = ".", limit: int = MAX_LIST) -> tuple[list[FileEntry], int, str | None]:
    """Files under ``folder`` (recursive, sorted), at most ``limit``; how many there were in all; and why
    the walk did not see every entry (None: it did; ``door.Found.unwalked``).
    Links are not listed nor followed. Raises ``WorkspaceFileError`` for a folder outside the workspace,
    reached through a link, or not a folder."""
    try:
        found = Door(workspace).listing(folder, hidden=True)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise WorkspaceFileError(f"{folder!r} is not a folder in the workspace", path=folder) from exc
    paths = sorted(p for p in found.files if not set(p.split("/")[:-1]) & _SKIP_DIRS)
    return [FileEntry(p, found.files[p][0]) for p in paths[:limit]], len(paths), found.unwalked


def read_head(workspace: Path, relative: str, limit: int) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of a workspace file and its whole size. Raises ``WorkspaceFileError`` for a
    path that is refused (outside, through a link), missing or not a regular file."""
    try:
        return Door(workspace).read_head(relative, limit)
    except FileNotFoundError as exc:
        raise WorkspaceFileError(f"no file {relative!r} in the workspace", path=relative) from exc
    except OSError as exc:
        raise WorkspaceFileError(f"cannot read {relative!r}: {exc.strerror or exc}", path=relative) from exc


def read_file(workspace: Path, relative: str, max_chars: int = MAX_READ_CHARS) -> FileRead:
    """Read one workspace file: images as base64, text bounded to ``max_chars`` (head kept).

    Raises ``WorkspaceFileError`` for a path outside the workspace or through a link, a missing
    file, a folder, or an image too large to send.
    """
    mime = _IMAGE_TYPES.get(Path(relative).suffix.lower())
    head, size = read_head(workspace, relative, MAX_IMAGE_BYTES if mime else max_chars * 4 + 4)
    if mime is not None:
        if size > MAX_IMAGE_BYTES:
            raise WorkspaceFileError(
                f"{relative!r} is {size} bytes, over the {MAX_IMAGE_BYTES}-byte image limit", path=relative
            )
        return FileRead(relative, "image", data=base64.b64encode(head).decode("ascii"), mime_type=mime, size=size)
    if b"\x00" in head[:8192]:
        return FileRead(relative, "binary", size=size)
    text = head.decode("utf-8", errors="replace")
    truncated = len(text) > max_chars or len(head) < size
    return FileRead(relative, "text", text=text[:max_chars], size=size, truncated=truncated)


def write_file(workspace: Path, relative: str, content: str, encoding: Literal["text", "base64"] = "text") -> FileEntry:
    """Write ``content`` to a workspace file (folders created); return its entry.

    Raises ``WorkspaceFileError`` for a path outside the workspace or through a link, bad base64,
    content over ``MAX_WRITE_BYTES``, or a file that cannot be written.
    """
    parts = plain_parts(relative)
    try:
        data = base64.b64decode(content, validate=True) if encoding == "base64" else content.encode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise WorkspaceFileError(f"content for {relative!r} is not valid base64: {exc}", path=relative) from exc
    if len(data) > MAX_WRITE_BYTES:
        raise WorkspaceFileError(f"{len(data)} bytes is over the {MAX_WRITE_BYTES}-byte upload limit", path=relative)
    try:
        Door(workspace).write(relative, data)
    except OSError as exc:
        raise WorkspaceFileError(f"cannot write {relative!r}: {exc.strerror or exc}", path=relative) from exc
    return FileEntry("/".join(parts), len(data))
