"""A thread's replayable bundle: its notebooks and the data files they read, as one zip (``write_bundle``).

Owns what goes into the zip and how each part is read. The zip holds one folder named after the
thread: ``THREAD.ipynb``, ``THREAD.clean.ipynb``, the data files the notebook names (its metadata's
``data_files``) and a ``README.txt``, so that ``kernel-agent replay THREAD/THREAD.ipynb --check``
replays it on any machine (replay reads the data files beside the notebook).

Every byte is read through a door, never following a link: the notebooks from the thread's records
folder, each data file from the upload it came from (the store's, which no kernel sees) or, when that
upload was deleted, from the thread's workspace. Only plain names go in (``claims.plain_name``); what
the kernel wrote is never listed, so none of its names reach the zip. The whole is bounded
(``MAX_BUNDLE_BYTES``). No HTTP: ``app.py`` serves what this writes.
"""

from __future__ import annotations

import os
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import KernelAgentError, ServiceError
from ..kernel.door import Door
from ..notebook.claims import plain_name
from ..notebook.export import clean_path
from ..notebook.load import MAX_NOTEBOOK_BYTES, parse_json
from ..notebook.metadata import RunMetadata, read_block
from .blobs import NOTEBOOK
from .records import ThreadRecord
from .store import Store

__all__ = ["MAX_BUNDLE_BYTES", "Bundle", "spooled", "write_bundle"]

MAX_BUNDLE_BYTES = 2 * 1024**3  # the notebooks and data files together, before compression
_CHUNK = 1 << 20
_README = """The notebook of the kernel-agent thread {thread} and the data files it reads.

Replay it on any machine with kernel-agent installed (from the folder holding this one):

    kernel-agent replay {thread}/{thread}.ipynb --check

{thread}.ipynb holds every attempt; {thread}.clean.ipynb only what worked.
"""


@dataclass(frozen=True)
class Bundle:
    """What went into a written zip: its entries (folder/name), the data files whose bytes were not
    found (deleted upload and workspace copy), and the zip's size."""

    entries: tuple[str, ...]
    missing: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class _Part:
    name: str
    door: Door
    relative: str


def write_bundle(store: Store, thread: ThreadRecord, target: IO[bytes], limit: int = MAX_BUNDLE_BYTES) -> Bundle:
    """Write ``thread``'s bundle as a zip into ``target`` (a seekable binary file). Blocking: run it in a
    thread. Raises ``ServiceError`` 404 when the thread has no notebook yet, 413 when the parts add up
    to more than ``limit`` bytes (nothing useful is written then)."""
    records = Door(store.thread_dir(thread.id))
    notebooks = [
        _Part(f"{thread.id}.ipynb", records, NOTEBOOK),
        _Part(f"{thread.id}.clean.ipynb", records, clean_path(Path(NOTEBOOK)).name),
    ]
    notebooks = [part for part in notebooks if records.has_file(part.relative)]
    if not notebooks:
        raise ServiceError(f"thread {thread.id} has no notebook yet", status=404)
    names: dict[str, None] = {}
    for part in notebooks:
        names.update(dict.fromkeys(_data_files(records, part.relative)))
    data, missing = _data_parts(store, thread, list(names))
    parts = notebooks + data
    _check_size(thread.id, sum(_size(part) for part in parts), limit)  # refused before anything is written
    folder = thread.id
    entries = []
    left = limit
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(_info(f"{folder}/README.txt"), _readme(folder, missing))
        entries.append(f"{folder}/README.txt")
        for part in parts:
            entry = f"{folder}/{part.name}"
            left -= _copy(part, archive, entry, left)
            entries.append(entry)
    return Bundle(tuple(entries), tuple(missing), target.tell())


def _check_size(thread_id: str, total: int, limit: int) -> None:
    if total > limit:
        raise ServiceError(
            f"thread {thread_id}'s notebooks and data files are over the {limit}-byte bundle limit "
            f"({total} bytes): download the notebook and the data files one by one",
            status=413,
        )


def _data_files(records: Door, relative: str) -> list[str]:
    """The plain data file names the notebook's metadata claims (others are dropped: never a path)."""
    try:  # parsed as every record of ours is read back: bounded in depth, a NotebookError otherwise
        raw = parse_json(records.read(relative, MAX_NOTEBOOK_BYTES).decode("utf-8"), "notebook", relative)
    except (OSError, KernelAgentError, ValueError):
        return []
    meta = read_block(raw.get("metadata") if isinstance(raw, dict) else None, RunMetadata)
    return [name for name in meta.data_files if plain_name(name)] if meta is not None else []


def _data_parts(store: Store, thread: ThreadRecord, names: list[str]) -> tuple[list[_Part], list[str]]:
    """Each named data file from its upload (the thread's latest of that name), else from the workspace."""
    uploads: dict[str, _Part] = {}
    for run in (store.run(run_id) for run_id in thread.runs):
        for file_id in run.file_ids if run is not None else ():
            record = store.file(file_id)
            if record is not None:
                path = store.file_content(record)
                uploads[record.filename] = _Part(record.filename, Door(path.parent), path.name)
    workspace = Door(store.workspace(thread.id))
    parts, missing = [], []
    for name in names:
        part = uploads.get(name)
        if part is not None and part.door.has_file(part.relative):
            parts.append(part)
        elif workspace.has_file(name):
            parts.append(_Part(name, workspace, name))
        else:
            missing.append(name)
    return parts, missing


def _size(part: _Part) -> int:
    return part.door.file_stat(part.relative).st_size


def _info(entry: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(entry, time.localtime()[:6])
    info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--: never a link when unzipped
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _copy(part: _Part, archive: zipfile.ZipFile, entry: str, left: int) -> int:
    """Copy the part's bytes as opened now (a file that grows meanwhile is cut at that size) into
    ``entry``; return its size. Raises ``ServiceError`` 413 when that size is more than the ``left``
    bytes the bundle may still hold (a workspace file the kernel grew since it was measured)."""
    with part.door.open_file(part.relative) as (fd, opened):
        size = opened.st_size
        if size > left:
            raise ServiceError(f"{part.name} grew past the bundle limit while the bundle was written", status=413)
        info = _info(entry)
        info.file_size = size
        with archive.open(info, "w", force_zip64=size > zipfile.ZIP64_LIMIT) as sink:
            remaining = size
            while remaining > 0 and (block := os.read(fd, min(remaining, _CHUNK))):
                sink.write(block)
                remaining -= len(block)
    return size


def _readme(folder: str, missing: list[str]) -> str:
    text = _README.format(thread=folder)
    if missing:
        text += (
            "\nNot included (no longer on the server): "
            + ", ".join(missing)
            + ". Put them beside the notebook before replaying.\n"
        )
    return text


def spooled(target: IO[bytes], chunk: int = _CHUNK) -> Iterator[bytes]:
    """The bytes of a written bundle from its start, then the file closed (a temp file vanishes)."""
    try:
        target.seek(0)
        while block := target.read(chunk):
            yield block
    finally:
        target.close()
