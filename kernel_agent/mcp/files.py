"""The workspace's files as MCP tools see them: ``list_files``, ``read_file``, ``write_file``.

Owns path confinement (every path is resolved and must stay inside the
workspace; symlinks out of it are refused) and the bounds on what one call
reads or lists. Knows nothing of MCP or kernels: it returns plain values and
raises ``WorkspaceFileError`` for a path the client may not use.
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..errors import WorkspaceFileError

__all__ = ["FileEntry", "FileRead", "list_files", "read_file", "resolve_inside", "write_file"]

MAX_LIST = 500
MAX_READ_CHARS = 20_000
MAX_IMAGE_BYTES = 5_000_000
MAX_WRITE_BYTES = 50_000_000
_IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp"}
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


def resolve_inside(workspace: Path, relative: str) -> Path:
    """``relative`` resolved under ``workspace``. Raises ``WorkspaceFileError`` when it leaves it."""
    root = workspace.resolve()
    if not relative or "\x00" in relative:
        raise WorkspaceFileError(f"not a usable path: {relative!r}", path=relative)
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise WorkspaceFileError(f"{relative!r} is outside the workspace", path=relative)
    return target


def list_files(workspace: Path, folder: str = ".", limit: int = MAX_LIST) -> tuple[list[FileEntry], int]:
    """Files under ``folder`` (recursive, sorted), at most ``limit``; and how many there were in all.

    Raises ``WorkspaceFileError`` for a folder outside the workspace or not a folder.
    """
    base = resolve_inside(workspace, folder)
    if not base.is_dir():
        raise WorkspaceFileError(f"{folder!r} is not a folder in the workspace", path=folder)
    root = workspace.resolve()
    found: list[FileEntry] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            total += 1
            if len(found) < limit:
                path = Path(dirpath) / name
                found.append(FileEntry(path.relative_to(root).as_posix(), _size(path)))
    return found, total


def read_file(workspace: Path, relative: str, max_chars: int = MAX_READ_CHARS) -> FileRead:
    """Read one workspace file: images as base64, text bounded to ``max_chars`` (head kept).

    Raises ``WorkspaceFileError`` for a path outside the workspace, a missing
    file, a folder, or an image too large to send.
    """
    path = resolve_inside(workspace, relative)
    if not path.is_file():
        raise WorkspaceFileError(f"no file {relative!r} in the workspace", path=relative)
    size = path.stat().st_size
    mime = _IMAGE_TYPES.get(path.suffix.lower())
    if mime is not None:
        if size > MAX_IMAGE_BYTES:
            raise WorkspaceFileError(f"{relative!r} is {size} bytes, over the {MAX_IMAGE_BYTES}-byte image limit", path=relative)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return FileRead(relative, "image", data=data, mime_type=mime, size=size)
    with path.open("rb") as handle:
        head = handle.read(max_chars * 4 + 4)
    if b"\x00" in head[:8192]:
        return FileRead(relative, "binary", size=size)
    text = head.decode("utf-8", errors="replace")
    truncated = len(text) > max_chars or len(head) < size
    return FileRead(relative, "text", text=text[:max_chars], size=size, truncated=truncated)


def write_file(workspace: Path, relative: str, content: str, encoding: Literal["text", "base64"] = "text") -> FileEntry:
    """Write ``content`` to a workspace file (folders created); return its entry.

    Raises ``WorkspaceFileError`` for a path outside the workspace, bad base64,
    content over ``MAX_WRITE_BYTES``, or a file that cannot be written.
    """
    path = resolve_inside(workspace, relative)
    try:
        data = base64.b64decode(content, validate=True) if encoding == "base64" else content.encode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise WorkspaceFileError(f"content for {relative!r} is not valid base64: {exc}", path=relative) from exc
    if len(data) > MAX_WRITE_BYTES:
        raise WorkspaceFileError(f"{len(data)} bytes is over the {MAX_WRITE_BYTES}-byte upload limit", path=relative)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise WorkspaceFileError(f"cannot write {relative!r}: {exc}", path=relative) from exc
    return FileEntry(path.relative_to(workspace.resolve()).as_posix(), len(data))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
