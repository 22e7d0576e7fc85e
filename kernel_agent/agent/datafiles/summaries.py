"""Per-format descriptions of one data file: ``file_kind`` and ``describe``.

Owns knowing the formats (the ``Kind`` a suffix names) and turning one file
into bounded markdown for the prompt: how a delimited table is written (its
separator when the suffix says otherwise, an encoding other than UTF-8, a
decimal comma, and the read arguments that follow), a table's shape, dtypes, date columns
stored as text (with their day/month order, ``dates.py``), missing values
and first rows, a JSON outline, an array's shape, a MATLAB file's variables
(via scipy when installed), a database's tables (``databases.py``: SQLite
and DuckDB, known by their header), a text's first lines. Cheap
even for big files: they are sampled and their rows counted by streaming.
Does not own checking input paths, copying them into the workspace or the
prompt's ``# Data`` section: see ``data.py``, whose ``summarize`` checks a
path and then calls ``describe``.

Reads files, never writes them. pandas, numpy and pyarrow are imported where
used, so importing this module stays cheap for the CLI.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ...errors import DataFileError
from .databases import DATABASE_SUFFIXES, database_kind, declared_database, describe_duckdb, describe_sqlite
from .dates import date_columns, describe_dates
from .dirty import dirty_lines
from .reading import count_lines, head, looks_binary, sample_lines, unpacked_size

if TYPE_CHECKING:  # imported where used: importing this module stays cheap for the CLI
    import numpy as np
    import pandas as pd

__all__ = [
    "DATA_SUFFIXES",
    "MAX_COLUMNS",
    "MAX_SUMMARY_CHARS",
    "Kind",
    "declared",
    "describe",
    "file_kind",
    "human_size",
]

Kind = Literal["csv", "tsv", "excel", "parquet", "json", "npy", "mat", "sqlite", "duckdb", "text", "other"]

MAX_SUMMARY_CHARS = 3_000  # per file
MAX_COLUMNS = 30  # columns listed with their dtypes
MAX_TABLE_COLUMNS = 10  # columns in the head(3) table
MAX_CELL_CHARS = 24
HEAD_ROWS = 3
FULL_READ_BYTES = 5_000_000  # bigger tables are sampled, not parsed whole
SAMPLE_ROWS = 2_000
MAX_JSON_BYTES = 16_000_000  # parsed whole into Python objects: about 10x that in memory
MAX_PARSED_COLUMNS = 1_000  # a 100k-column header is read this far (pandas is slow on very wide frames)
MAX_UNPACKED_BYTES = 100_000_000  # an xlsx that unpacks to more is a bomb, or too big to sample cheaply
MAX_DECODED_BYTES = 64_000_000  # a parquet file read whole decodes to at most this much (else: its first rows)
MAX_SHEETS = 3
TEXT_LINES = 8
MAX_MAT_VARIABLES = 20

_SUFFIX_KINDS: dict[str, Kind] = {
    ".csv": "csv", ".tsv": "tsv", ".tab": "tsv",
    ".xlsx": "excel", ".xlsm": "excel", ".xls": "excel",
    ".parquet": "parquet", ".pq": "parquet",
    ".json": "json", ".jsonl": "json", ".ndjson": "json", ".geojson": "json",
    ".npy": "npy", ".mat": "mat",
    ".txt": "text", ".md": "text", ".log": "text", ".rst": "text", ".yaml": "text",
    ".yml": "text", ".xml": "text", ".html": "text", ".toml": "text", ".ini": "text",
}  # fmt: skip
# The formats described by their kind (a database by its header); others are read as plain text.
DATA_SUFFIXES = (*_SUFFIX_KINDS, *DATABASE_SUFFIXES)
_LINE_JSON = {".jsonl", ".ndjson"}
# What pandas, pyarrow, openpyxl and numpy raise for a file they cannot parse.
_PARSE_ERRORS = (ValueError, OSError, ImportError, LookupError, EOFError, zipfile.BadZipFile)


def file_kind(path: str | os.PathLike[str]) -> Kind:
    """The kind of a data file: a database by its header's magic bytes (``sqlite``, ``duckdb``; a ``.db`` that
    is neither is not one), else from its suffix (``other`` when unknown). Raises nothing."""
    try:
        with open(path, "rb") as handle:
            found = database_kind(handle.read(16))
    except OSError:
        found = None
    return found or _SUFFIX_KINDS.get(Path(path).suffix.lower(), "other")


def describe(source: Path) -> str:
    """Markdown describing the data file ``source``, at most ``MAX_SUMMARY_CHARS`` long, parsed in this process.

    Only the confined worker calls this (``describe_worker.py``; the host calls ``describer.describe``):
    the bounds here keep an honest file cheap, not a hostile one harmless. ``source`` has been checked
    (an existing, readable regular file): ``data.summarize`` is the checked entry point and documents
    the output. Raises ``DataFileError`` if the file cannot be parsed as its kind says.
    """
    kind = file_kind(source)
    size = source.stat().st_size
    try:
        body = _SUMMARIZERS[kind](source, size)
    except _PARSE_ERRORS as exc:
        raise DataFileError(
            f"cannot read {source.name} as {kind}: {_reason(exc)}",
            path=str(source),
        ) from exc
    return _bounded(body, MAX_SUMMARY_CHARS)


def _delimited(path: Path, size: int, separator: str, label: str) -> str:
    import pandas as pd

    start = head(path)
    if looks_binary(start):
        return f"{label} · {human_size(size)} · binary data (NUL bytes), not {label} text: not parsed"
    whole = size <= FULL_READ_BYTES
    newline = _newline(start)
    sample = start if whole and size <= len(start) else sample_lines(start, newline)
    if sample is None and not whole:
        return (
            f"{label} · {human_size(size)} · no line break in its first {human_size(len(start))}: "
            "lines this long are not parsed for a summary"
        )
    first = (sample or start).split(newline, 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")
    written = max([separator, ",", ";", "\t", "|"], key=first.count)
    width = first.count(written) + 1
    read: dict[str, Any] = {"sep": written, "nrows": None if whole else SAMPLE_ROWS}
    if width > MAX_PARSED_COLUMNS:
        read["usecols"] = range(MAX_PARSED_COLUMNS)

    def source() -> Any:
        return path if whole else io.BytesIO(sample or b"")

    mixed = _encoding(sample or start, newline, read)
    try:
        frame = pd.read_csv(source(), **read)
    except UnicodeDecodeError:  # past the head of a whole file
        mixed = _encoding(path.read_bytes(), newline, read)
        frame = pd.read_csv(source(), **read)
    if written != "," and _decimal_comma(frame):
        read["decimal"] = ","
        frame = pd.read_csv(source(), **read)
    rows = len(frame) if whole else count_lines(path, size, newline)[0] - 1
    note = _written(read, separator, width, mixed)
    if newline == b"\r":  # pandas reads these as they are; the model should know why other tools may not
        note = ", ".join(filter(None, ["lines end with a carriage return only (old Mac style)", note]))
    return _table(label, size, frame, rows, exact=whole, note=note)


def _encoding(data: bytes, newline: bytes, read: dict[str, Any]) -> tuple[int, ...]:
    """Set ``read``'s encoding for text that is not all UTF-8; return the numbers of the lines that are not
    when the rest has UTF-8 characters (a mixed file: latin-1 would turn its ``Zürich`` into ``ZÃ¼rich``,
    so it is read as UTF-8 with those lines' odd bytes replaced). A file with no UTF-8 character is read as
    latin-1. A multi-byte character cut at the data's end is still UTF-8."""
    bad, utf8 = [], False
    lines = data.split(newline)
    for number, line in enumerate(lines, start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            if number < len(lines) or exc.start < len(line) - 3 or exc.reason != "unexpected end of data":
                bad.append(number)
        else:
            utf8 = utf8 or not text.isascii()
    if not bad:
        return ()
    if not utf8:
        read["encoding"] = "latin-1"
        return ()
    read["encoding"], read["encoding_errors"] = "utf-8", "replace"
    return tuple(bad)


def _newline(start: bytes) -> bytes:
    """What ends the lines of a text table: ``\\n`` (also for ``\\r\\n``), or ``\\r`` alone (old Mac files)."""
    return b"\r" if b"\r" in start and b"\n" not in start else b"\n"


_SEPARATORS = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe"}
_DECIMAL_COMMA = re.compile(r"^\s*[-+]?\d+,\d+\s*$")


def _decimal_comma(frame: pd.DataFrame) -> bool:
    """Whether some text column holds numbers written with a decimal comma (``3,14``) and nothing else."""
    for name in frame.columns:
        if frame[name].dtype.kind in "OSU" or str(frame[name].dtype) in ("str", "string"):
            values = [str(v) for v in frame[name].dropna().head(500)]
            if values and all(_DECIMAL_COMMA.match(v) for v in values):
                return True
    return False


def _written(read: dict[str, Any], default: str, width: int, mixed: Sequence[int] = ()) -> str:
    """How the file is written, as the model must read it: separator, encoding (``mixed``: the lines of a
    UTF-8 file that are not), decimal mark."""
    facts, how = [], []
    if read["sep"] != default:
        facts.append(f"{_SEPARATORS[read['sep']]}-separated")
        how.append(f"sep={read['sep']!r}")
    if mixed:
        shown = ", ".join(map(str, mixed[:8])) + (", …" if len(mixed) > 8 else "")
        facts.append(
            f"mixed encodings: UTF-8 but for {len(mixed):,} line(s) in another (line {shown}; likely cp1252), so "
            "do not read it as latin-1, which garbles its UTF-8 text (Zürich → ZÃ¼rich); encoding_errors='replace' "
            "shows those lines' odd bytes as �, and decoding each line as UTF-8, else cp1252, keeps them"
        )
        how.append("encoding_errors='replace'")
    elif read.get("encoding"):
        facts.append(f"encoding {read['encoding']} (not UTF-8)")
        how.append(f"encoding={read['encoding']!r}")
    if read.get("decimal"):
        facts.append("decimal comma")
        how.append("decimal=','")
    if width > MAX_PARSED_COLUMNS:
        facts.append(f"{width:,} columns: the first {MAX_PARSED_COLUMNS:,} read")
    if how:
        facts.append(f"read it with {', '.join(how)}")
    return ", ".join(facts)


def _csv(path: Path, size: int) -> str:
    return _delimited(path, size, ",", "CSV")


def _tsv(path: Path, size: int) -> str:
    return _delimited(path, size, "\t", "TSV")


def _excel(path: Path, size: int) -> str:
    import pandas as pd

    unpacked = unpacked_size(path)  # a 250 KB xlsx can unpack to a million rows
    if unpacked is not None and unpacked > MAX_UNPACKED_BYTES:
        return (
            f"Excel workbook · {human_size(size)}, unpacking to {human_size(unpacked)}: too big to open "
            "for a summary (read it in the kernel, e.g. with `pd.read_excel(..., nrows=...)`)"
        )
    whole = (unpacked or size) <= FULL_READ_BYTES
    with pd.ExcelFile(path) as book:
        names = [str(name) for name in book.sheet_names]
        shown = ", ".join(f"`{name}`" for name in names[:20]) + (" …" if len(names) > 20 else "")
        parts = [f"Excel workbook · {human_size(size)} · {len(names)} sheet(s): {shown}"]
        for name in names[:MAX_SHEETS]:
            frame = pd.read_excel(book, sheet_name=name, nrows=None if whole else SAMPLE_ROWS)
            parts.append(_table(f"Sheet `{name}`", None, frame, len(frame), exact=whole))
    if len(names) > MAX_SHEETS:
        parts.append(f"({len(names) - MAX_SHEETS} more sheet(s) not described.)")
    return "\n\n".join(parts)


def _parquet(path: Path, size: int) -> str:
    import pyarrow.parquet as pq  # optional dependency: its ImportError becomes a DataFileError

    # Streamed a MB at a time (not a row group's column chunks read whole first): a sample reads what it needs.
    with pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False) as parquet:
        rows = parquet.metadata.num_rows
        # Read whole only when small decoded: a 426 KB file of zeros declares 100 M rows (800 MB in pandas).
        if size <= FULL_READ_BYTES and _decoded_bytes(parquet) <= MAX_DECODED_BYTES:
            frame = parquet.read(use_threads=False).to_pandas(use_threads=False)
        else:  # the first batch only: pyarrow decodes a row group's pages as it goes
            first = next(parquet.iter_batches(batch_size=SAMPLE_ROWS, use_threads=False), None)
            empty = parquet.schema_arrow.empty_table()
            frame = (empty if first is None else first).to_pandas(use_threads=False)
    return _table("Parquet", size, frame, rows, exact=True, sampled=len(frame) < rows)


def _decoded_bytes(parquet: Any) -> int:
    """About what reading ``parquet`` whole takes in memory, from its metadata: 8 bytes a value (a pointer or a
    number), plus what its column chunks unpack to (the strings). A claim the confined worker's limits back."""
    metadata = parquet.metadata
    unpacked: int = sum(
        metadata.row_group(g).column(c).total_uncompressed_size
        for g in range(metadata.num_row_groups)
        for c in range(metadata.num_columns)
    )
    rows: int = metadata.num_rows
    columns: int = metadata.num_columns
    return 8 * rows * max(columns, 1) + unpacked


def _parquet_declared(parquet: Any, size: int) -> str:
    metadata = parquet.metadata
    schema = parquet.schema_arrow
    columns = ", ".join(f"`{_one_line(field.name)[:40]}` {field.type}" for field in list(schema)[:MAX_COLUMNS])
    more = f", … and {len(schema) - MAX_COLUMNS} more" if len(schema) > MAX_COLUMNS else ""
    return (
        f"Parquet · {human_size(size)} · {metadata.num_rows:,} {_plural(metadata.num_rows, 'row')} × "
        f"{len(schema)} {_plural(len(schema), 'column')} declared ({columns}{more})"
    )


def declared(source: Path) -> str:
    """What ``source`` says it is, from its metadata only (parquet's footer, a zip's directory): its kind and
    size, and for parquet its declared rows and columns, for a workbook its unpacked size. What the host
    shows when a description passes its budget. Raises nothing."""
    size = source.stat().st_size
    kind = file_kind(source)
    plain = f"{_LABELS[kind]} · {human_size(size)}"
    try:
        if kind in ("sqlite", "duckdb"):
            return " · ".join(filter(None, [plain, declared_database(kind, head(source, 100))]))
        if kind == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetFile(source) as parquet:
                return _parquet_declared(parquet, size)
        if kind == "excel":
            unpacked = unpacked_size(source)
            return plain if unpacked is None else f"{plain}, unpacking to {human_size(unpacked)}"
    except Exception:  # a file that cannot say what it is: its kind and size say enough
        return plain
    return plain


_LABELS: dict[Kind, str] = {
    "csv": "CSV", "tsv": "TSV", "excel": "Excel workbook", "parquet": "Parquet", "json": "JSON",
    "npy": "NumPy array", "mat": "MATLAB file", "sqlite": "SQLite database", "duckdb": "DuckDB database",
    "text": "Text", "other": "File",
}  # fmt: skip


def _json(path: Path, size: int) -> str:
    import pandas as pd

    if path.suffix.lower() in _LINE_JSON:
        whole = size <= FULL_READ_BYTES
        start = head(path)
        sample = sample_lines(start)
        if looks_binary(start) or (sample is None and not whole):
            return f"JSON Lines · {human_size(size)} · binary or no line break in its first MB: not parsed"
        source = path if whole else io.BytesIO(sample or b"")
        frame = pd.read_json(source, lines=True, nrows=None if whole else SAMPLE_ROWS)
        rows = len(frame) if whole else count_lines(path, size)[0]
        return _table("JSON Lines", size, frame, rows, exact=whole)
    if size > MAX_JSON_BYTES:
        return f"JSON · {human_size(size)} · too big to parse for a summary; starts with:\n" + _preview(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    frame = _records(document)
    if frame is not None:
        return _table("JSON records", size, frame, len(frame), exact=True)
    lines = _outline(document, depth=0)
    return f"JSON · {human_size(size)} · nested; outline:\n" + "\n".join(lines)


def _records(document: Any) -> pd.DataFrame | None:
    """A table when the JSON is a list of objects or an object of equal-length lists."""
    import pandas as pd

    if isinstance(document, list) and document and all(isinstance(item, dict) for item in document):
        return pd.DataFrame(document)
    if (
        isinstance(document, dict)
        and document
        and all(isinstance(v, list) for v in document.values())
        and len({len(v) for v in document.values()}) == 1
    ):
        return pd.DataFrame(document)
    return None


def _outline(value: Any, depth: int, max_keys: int = 15) -> list[str]:
    pad = "  " * depth
    if isinstance(value, dict):
        lines = [f"{pad}- object with {len(value)} key(s)"]
        for key, item in list(value.items())[:max_keys]:
            inner = _outline(item, depth + 1) if depth < 3 else [f"{pad}  - {_json_type(item)}"]
            lines.append(f"{pad}  - `{key}`: " + inner[0].strip().removeprefix("- "))
            lines.extend(inner[1:])
        if len(value) > max_keys:
            lines.append(f"{pad}  - … {len(value) - max_keys} more key(s)")
        return lines
    if isinstance(value, list):
        kinds = sorted({_json_type(item) for item in value[:1000]})
        head = f"{pad}- list of {len(value)} " + (" | ".join(kinds) if kinds else "items")
        if value and isinstance(value[0], dict | list) and depth < 3:
            return [head, *_outline(value[0], depth)[1:]]
        return [head]
    return [f"{pad}- {_json_type(value)}"]


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "list", str: "str", bool: "bool", int: "int", float: "float"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _npy(path: Path, size: int) -> str:
    import numpy as np

    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = reader(handle)
    lines = [f"NumPy array · {human_size(size)} · shape {shape} · dtype {dtype}"]
    if dtype.hasobject:
        return "\n".join([*lines, "Object array: loading it needs `np.load(..., allow_pickle=True)`."])
    array = np.load(path, mmap_mode=None if size <= FULL_READ_BYTES else "r")
    lines.append(f"First values: {np.array2string(np.asarray(array.flat[:8]), threshold=8, precision=4)}")
    if size <= FULL_READ_BYTES and np.issubdtype(array.dtype, np.number):
        lines.extend(_array_stats(array))
    return "\n".join(lines)


def _mat(path: Path, size: int) -> str:
    lines = [f"MATLAB file · {human_size(size)}"]
    # v5 and v7.3 files open with a 116-byte text header; v4 files have none.
    header = head(path, 116).split(b"\x00")[0].decode("latin-1").strip()
    if header.startswith("MATLAB"):
        lines.append(f"Header: {_one_line(header)}")
    try:
        import scipy.io
        from scipy.io.matlab import MatReadError
    except ImportError:
        return "\n".join([*lines, "Variables not listed: scipy is not installed (scipy.io.loadmat reads .mat)."])
    try:
        variables = scipy.io.whosmat(str(path))
        names = [name for name, _, _ in variables[:MAX_MAT_VARIABLES]]
        # Small files are read for their numbers; big ones are only listed (whosmat reads headers).
        values = scipy.io.loadmat(str(path), variable_names=names) if size <= FULL_READ_BYTES and names else {}
    except NotImplementedError:  # scipy reads up to v7.2; v7.3 files are HDF5
        return "\n".join([*lines, "MATLAB v7.3 (HDF5) file: read it with h5py; scipy.io.loadmat cannot."])
    except MatReadError as exc:
        raise ValueError(str(exc)) from exc
    lines.append(f"{len(variables)} {_plural(len(variables), 'variable')}; load with `scipy.io.loadmat(path)`:")
    for name, shape, kind in variables[:MAX_MAT_VARIABLES]:
        lines.append(f"- `{name}`: {kind} {' x '.join(map(str, shape))}{_mat_stats(values.get(name))}")
    if len(variables) > MAX_MAT_VARIABLES:
        lines.append(f"- ... and {len(variables) - MAX_MAT_VARIABLES} more")
    return "\n".join(lines)


def _mat_stats(value: Any) -> str:
    import numpy as np

    if not isinstance(value, np.ndarray) or not np.issubdtype(value.dtype, np.number):
        return ""
    stats = _array_stats(value.astype(float, copy=False)) if not np.iscomplexobj(value) else []
    return f" · {stats[0]}" if stats else ""


def _array_stats(array: np.ndarray) -> list[str]:
    import numpy as np

    if array.size == 0:
        return []
    nan = int(np.isnan(array).sum()) if np.issubdtype(array.dtype, np.floating) else 0
    if nan == array.size:
        return [f"all {nan:,} values are NaN"] if nan else []
    stats = f"min {np.nanmin(array):.4g} · max {np.nanmax(array):.4g} · mean {np.nanmean(array):.4g}"
    return [stats + (f" · {nan:,} NaN" if nan else "")]


def _sqlite(path: Path, size: int) -> str:
    return f"{declared(path)}\n" + describe_sqlite(path, MAX_SUMMARY_CHARS - 200)


def _duckdb(path: Path, size: int) -> str:
    try:
        body = describe_duckdb(path, MAX_SUMMARY_CHARS - 200)
    except ImportError:  # the describer's environment lacks the extra: what the header says is all there is
        return (
            f"{declared(path)} · tables not listed: the duckdb package is not installed where files are "
            "described (the `databases` extra: pip install 'kernel-agent[databases]')"
        )
    return f"{declared(path)}\n{body}"


def _plain(path: Path, size: int) -> str:
    with open(path, "rb") as handle:
        start = handle.read(8192)
    text = start.decode("utf-8", errors="replace")
    if path.suffix.lower() in DATABASE_SUFFIXES:  # named like a database, yet its header is neither
        shown = f"File · {human_size(size)} · named like a database, but not a SQLite or DuckDB file (no such header)"
        return shown if b"\x00" in start or not start else f"{shown}; as text:\n" + _preview(path)
    if b"\x00" in start or text.count("\ufffd") > len(text) // 100:
        return f"Binary file · {human_size(size)} (not previewed)"
    if not start:
        return "Empty text file"
    lines, exact = count_lines(path, size)
    count = f"{lines:,}" if exact else f"≈{lines:,}"
    return f"Text · {human_size(size)} · {count} line(s); first lines:\n" + _preview(path)


def _preview(path: Path) -> str:
    # From the first 64 KB only: one line can be gigabytes long.
    text = head(path, 65536).decode("utf-8", errors="replace")
    lines = [line[:200] for line in text.split("\n")[:TEXT_LINES]]
    if lines and not lines[-1]:
        lines.pop()
    body = "\n".join(lines)
    fence = "````" if "```" in body else "```"
    return f"{fence}text\n{body}\n{fence}"


_SUMMARIZERS: dict[Kind, Callable[[Path, int], str]] = {
    "csv": _csv, "tsv": _tsv, "excel": _excel, "parquet": _parquet,
    "json": _json, "npy": _npy, "mat": _mat, "sqlite": _sqlite, "duckdb": _duckdb, "text": _plain, "other": _plain,
}  # fmt: skip


def _table(
    label: str, size: int | None, frame: pd.DataFrame, rows: int, *,
    exact: bool, note: str = "", sampled: bool | None = None,
) -> str:  # fmt: skip
    sampled = (not exact) if sampled is None else sampled
    count = f"{rows:,}" if exact else f"≈{rows:,}"
    head = " · ".join(filter(None, [label, None if size is None else human_size(size), note]))
    lines = [f"{head} · {count} {_plural(rows, 'row')} × {frame.shape[1]} {_plural(frame.shape[1], 'column')}"]
    columns = [f"`{name}` {dtype}" for name, dtype in frame.dtypes.items()]
    listed = ", ".join(columns[:MAX_COLUMNS])
    more = f", … and {len(columns) - MAX_COLUMNS} more columns (not listed)" if len(columns) > MAX_COLUMNS else ""
    lines.append(f"Columns: {listed}{more}")
    dates = describe_dates(date_columns(frame))
    if dates:
        lines.append(dates)
    missing = frame.isna().sum()
    missing = missing[missing > 0]
    where = f" (in the first {len(frame):,} rows read)" if sampled else ""
    if len(missing):
        shown = ", ".join(f"`{name}` {int(n):,}" for name, n in missing.head(MAX_COLUMNS).items())
        lines.append(f"Missing values{where}: {shown}" + (" …" if len(missing) > MAX_COLUMNS else ""))
    dirty = dirty_lines(frame)  # issue 38: numeric-looking text columns and missing-like tokens, named
    if not len(missing) and len(frame):
        tokens = any(line.startswith("Missing-like") or "(missing-like)" in line for line in dirty)
        lines.append(
            f"No missing values as pandas reads them{where}, but some cells hold missing-like text (below)."
            if tokens
            else f"No missing values{where}."
        )
    lines += dirty
    if len(frame):
        first = min(HEAD_ROWS, len(frame))
        lines.append(f"First {first} rows:" if first > 1 else "First row:")
        lines.append(_markdown_table(frame.head(HEAD_ROWS)))
    return "\n".join(lines)


def _markdown_table(frame: pd.DataFrame) -> str:
    shown = frame.iloc[:, :MAX_TABLE_COLUMNS]

    def cell(value: Any) -> str:
        text = "" if _is_missing(value) else _one_line(str(value))
        text = text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"
        return text.replace("|", "\\|")

    rows = [[cell(name) for name in shown.columns], ["---"] * shown.shape[1]]
    rows += [[cell(value) for value in record] for record in shown.itertuples(index=False)]
    table = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    if frame.shape[1] > MAX_TABLE_COLUMNS:
        table += f"\n(first {MAX_TABLE_COLUMNS} of {frame.shape[1]} columns shown)"
    return table


def _is_missing(value: Any) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # lists and arrays in cells
        return False


def human_size(size: float) -> str:
    """``size`` bytes for people: ``512 B``, ``1.5 KB``, ``3.2 MB``, one decimal. Raises nothing.

    The one rule for sizes everywhere (summaries, the CLI, the web page, DeepAnalyze's ``"size": "21.1KB"``):
    a KB is 1,024 bytes, an MB 1,024 KB, as memory limits and DeepAnalyze's own file blocks count them.
    """
    if size < 1024:
        return f"{int(size)} B"
    units = ("KB", "MB", "GB")
    step = 0
    size /= 1024
    while size >= 1024 and step < len(units) - 1:
        size /= 1024
        step += 1
    return f"{size:.1f} {units[step]}"


def _reason(exc: BaseException, limit: int = 200) -> str:
    """A parser's complaint, short: long lists (pandas names every missing column) elided, one line, bounded."""
    text = _LONG_LIST.sub("[…]", _one_line(str(exc))) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


_LONG_LIST = re.compile(r"[\[{(][^\]})]{60,}[\]})]?")


def _plural(count: int, word: str) -> str:
    return word if count == 1 else f"{word}s"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _bounded(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text.rfind("\n", 0, limit - 80)
    cut = cut if cut > 0 else limit - 80
    return text[:cut] + f"\n… (summary cut here: {len(text) - cut:,} more characters not shown)"
