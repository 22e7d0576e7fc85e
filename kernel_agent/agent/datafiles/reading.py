"""Bounded reads of a data file for its summary: ``head``, ``count_lines``, ``unpacked_size``.

Owns the limits that keep a summary cheap whatever the file holds: a 2 GB
file with no line break, binary garbage behind a ``.csv`` suffix, a small
xlsx that unpacks to gigabytes. Every function reads at most a fixed number
of bytes (or only a zip's directory) and never parses; ``summaries.py``
decides what to say about what they find.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

__all__ = ["COUNT_BYTES", "HEAD_BYTES", "count_lines", "head", "looks_binary", "sample_lines", "unpacked_size"]

HEAD_BYTES = 1 << 20  # what a sampled table is parsed from: its first MB, cut at a line break
COUNT_BYTES = 256 << 20  # lines are counted in this much, then extrapolated (≈ 70 ms)
COUNT_CHUNK = 1 << 20  # read and counted a MB at a time


def head(path: Path, limit: int = HEAD_BYTES) -> bytes:
    """The first ``limit`` bytes of ``path``. Raises ``OSError``."""
    with open(path, "rb") as handle:
        return handle.read(limit)


def sample_lines(data: bytes, newline: bytes = b"\n") -> bytes | None:
    """``data`` cut after its last line break (whole lines only); None when it has none. Raises nothing."""
    cut = data.rfind(newline)
    return data[: cut + 1] if cut >= 0 else None


def looks_binary(data: bytes) -> bool:
    """Whether ``data`` holds NUL bytes, which no text table (CSV, TSV, JSON Lines) has. Raises nothing."""
    return b"\x00" in data


def count_lines(path: Path, size: int, newline: bytes = b"\n") -> tuple[int, bool]:
    """The number of lines in ``path`` and whether it is exact; ``newline`` is what ends a line
    (``b"\\r"`` for a file written with old Mac line endings).

    Files over ``COUNT_BYTES`` are counted in their first ``COUNT_BYTES`` and
    extrapolated by size, so a huge file costs a bounded time. Raises ``OSError``.
    """
    count, last, read = 0, newline, 0
    with open(path, "rb") as handle:
        while read < COUNT_BYTES and (chunk := handle.read(min(COUNT_CHUNK, COUNT_BYTES - read))):
            count += _newlines(chunk, newline) if size > COUNT_CHUNK else chunk.count(newline)
            last, read = chunk[-1:], read + len(chunk)
    if read < size:
        return (round(count * size / read) if read else 0), False
    return count + (last != newline), True


def _newlines(chunk: bytes, newline: bytes) -> int:
    """Line breaks in ``chunk``, counted by numpy: 3–4x faster than ``bytes.count`` (which is not
    vectorised for one byte), ~13 ms instead of ~45 ms for 50 MB. numpy comes with pandas, a dependency."""
    import numpy as np

    return int(np.count_nonzero(np.frombuffer(chunk, np.uint8) == newline[0]))


def unpacked_size(path: Path) -> int | None:
    """The total uncompressed size a zip archive (xlsx) declares; None when it is not a zip.

    Reads only the archive's directory. Raises ``OSError``.
    """
    if not zipfile.is_zipfile(path):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            return sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        return None
