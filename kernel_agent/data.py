"""The data files of a run: ``DataFile``, ``prepare_data``, ``summarize``, ``data_summary``, ``preload_code``.

Owns checking the input paths, copying them read-only into the workspace,
describing each file for the prompt (bounded markdown, cheap even for big
files) and the kernel's setup cell with its ``data`` helper. Does not own the
kernel session that runs that cell, nor the rest of the prompt.

Everything here is a function of its inputs and the files it reads; only
``prepare_data`` writes (into the workspace).
"""

from __future__ import annotations

import json
import keyword
import os
import re
import shutil
import unicodedata
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigError, DataFileError

if TYPE_CHECKING:  # imported where used: importing this module stays cheap for the CLI
    import numpy as np
    import pandas as pd

__all__ = [
    "DataFile",
    "Kind",
    "data_attributes",
    "data_summary",
    "file_kind",
    "identifier",
    "preload_code",
    "preload_description",
    "prepare_data",
    "summarize",
]

Kind = Literal["csv", "tsv", "excel", "parquet", "json", "npy", "text", "other"]

MAX_SUMMARY_CHARS = 3_000  # per file
MAX_SECTION_CHARS = 24_000  # the whole "# Data" section
MAX_COLUMNS = 30  # columns listed with their dtypes
MAX_TABLE_COLUMNS = 10  # columns in the head(3) table
MAX_CELL_CHARS = 24
HEAD_ROWS = 3
FULL_READ_BYTES = 5_000_000  # bigger tables are sampled, not parsed whole
SAMPLE_ROWS = 2_000
MAX_JSON_BYTES = 64_000_000
MAX_SHEETS = 3
TEXT_LINES = 8
SEED = 0

_SUFFIX_KINDS: dict[str, Kind] = {
    ".csv": "csv", ".tsv": "tsv", ".tab": "tsv",
    ".xlsx": "excel", ".xlsm": "excel", ".xls": "excel",
    ".parquet": "parquet", ".pq": "parquet",
    ".json": "json", ".jsonl": "json", ".ndjson": "json", ".geojson": "json",
    ".npy": "npy",
    ".txt": "text", ".md": "text", ".log": "text", ".rst": "text", ".yaml": "text",
    ".yml": "text", ".xml": "text", ".html": "text", ".toml": "text", ".ini": "text",
}  # fmt: skip
_LINE_JSON = {".jsonl", ".ndjson"}
# What pandas, pyarrow, openpyxl and numpy raise for a file they cannot parse.
_PARSE_ERRORS = (ValueError, OSError, ImportError, LookupError, EOFError, zipfile.BadZipFile)


@dataclass(frozen=True)
class DataFile:
    """A data file of the run: ``name`` in the workspace, copied from ``source``."""

    name: str
    source: str
    kind: Kind
    size: int
    summary: str = field(default="", repr=False)

    def __repr__(self) -> str:
        return f"<DataFile {self.name} [{self.kind}, {_human_size(self.size)}]>"


# --- preparing the workspace ------------------------------------------------------------------


def prepare_data(
    paths: Iterable[str | os.PathLike[str]], workspace: str | os.PathLike[str]
) -> tuple[DataFile, ...]:
    """Check every path, then copy each into ``workspace`` as a read-only file of the same name.

    Nothing is copied until every file has been checked and summarised. A file
    that already *is* the workspace file is left as it is (neither copied nor
    made read-only: it is the user's own file); an earlier read-only copy of
    the same name is replaced.

    Raises ``DataFileError`` for a path that is missing, a directory, not a
    regular file, unreadable or unparseable, for two inputs with the same file
    name, and for a workspace entry of that name that is a directory.
    Raises ``ConfigError`` if the workspace cannot be created.
    """
    if isinstance(paths, str | os.PathLike):  # one path, not an iterable of characters
        paths = [paths]
    sources = [_checked_source(path) for path in paths]
    _check_unique_names(sources)
    target = Path(workspace).expanduser()
    for source in sources:
        if (target / source.name).is_dir():
            raise DataFileError(
                f"cannot copy {source.name} into the workspace: {target / source.name} is a directory",
                path=str(source),
            )
    summaries = [summarize(source) for source in sources]
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the workspace {target}: {exc.strerror or exc}") from exc
    return tuple(_install(source, target, summary) for source, summary in zip(sources, summaries))


def _checked_source(path: str | os.PathLike[str]) -> Path:
    source = Path(path).expanduser()
    if not source.exists():
        raise DataFileError(f"data file not found: {source}", path=str(source))
    if source.is_dir():
        raise DataFileError(f"{source} is a directory, not a data file", path=str(source))
    if not source.is_file():
        raise DataFileError(f"{source} is not a regular file", path=str(source))
    try:
        with open(source, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise DataFileError(
            f"cannot read data file {source}: {exc.strerror or exc}", path=str(source)
        ) from exc
    return Path(os.path.abspath(source))


def _check_unique_names(sources: Sequence[Path]) -> None:
    seen: dict[str, Path] = {}
    for source in sources:
        if source.name in seen:
            raise DataFileError(
                f"two data files are named {source.name!r} ({seen[source.name]} and {source}); "
                "rename one: both would be copied to the same workspace file",
                path=str(source),
            )
        seen[source.name] = source


def _install(source: Path, workspace: Path, summary: str) -> DataFile:
    destination = workspace / source.name
    size = source.stat().st_size
    done = DataFile(source.name, str(source), file_kind(source), size, summary)
    if destination.exists() and os.path.samefile(source, destination):
        return done
    partial = workspace / f".{source.name}.kernel-agent-partial"
    try:
        shutil.copy2(source, partial)
        os.chmod(partial, 0o444)
        os.replace(partial, destination)  # also replaces an earlier read-only copy
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise DataFileError(
            f"cannot copy {source} into {workspace}: {exc.strerror or exc}", path=str(source)
        ) from exc
    return done


# --- per-file summaries -----------------------------------------------------------------------


def file_kind(path: str | os.PathLike[str]) -> Kind:
    """The kind of a data file, from its suffix (``other`` when unknown). Raises nothing."""
    return _SUFFIX_KINDS.get(Path(path).suffix.lower(), "other")


def summarize(path: str | os.PathLike[str]) -> str:
    """Markdown describing one data file for the prompt, at most ``MAX_SUMMARY_CHARS`` long.

    Tables (CSV, TSV, Excel, Parquet, JSON records) give their shape, columns
    with dtypes, missing values and the first rows; bigger files are sampled
    (the first ``SAMPLE_ROWS`` rows) and their rows counted by streaming.
    Nested JSON gives its outline, NPY its shape and dtype, text its first
    lines, binary files their size.

    Raises ``DataFileError`` if the file is missing, unreadable, or cannot be
    parsed as its kind says.
    """
    source = _checked_source(path)
    kind = file_kind(source)
    size = source.stat().st_size
    try:
        body = _SUMMARIZERS[kind](source, size)
    except _PARSE_ERRORS as exc:
        raise DataFileError(
            f"cannot read {source.name} as {kind}: {_one_line(str(exc)) or type(exc).__name__}",
            path=str(source),
        ) from exc
    return _bounded(body, MAX_SUMMARY_CHARS)


def _delimited(path: Path, size: int, separator: str, label: str) -> str:
    import pandas as pd

    separator = _separator(path, separator)
    whole = size <= FULL_READ_BYTES
    read: dict[str, Any] = {"sep": separator, "nrows": None if whole else SAMPLE_ROWS}
    note = f"separator {separator!r}" if separator not in {",", "\t"} else ""
    try:
        frame = pd.read_csv(path, **read)
    except UnicodeDecodeError:
        frame = pd.read_csv(path, encoding="latin-1", **read)
        note = ", ".join(filter(None, [note, "not UTF-8: read as latin-1"]))
    rows = len(frame) if whole else _count_lines(path) - 1
    return _table(label, size, frame, rows, exact=whole, note=note)


def _csv(path: Path, size: int) -> str:
    return _delimited(path, size, ",", "CSV")


def _tsv(path: Path, size: int) -> str:
    return _delimited(path, size, "\t", "TSV")


def _excel(path: Path, size: int) -> str:
    import pandas as pd

    whole = size <= FULL_READ_BYTES
    with pd.ExcelFile(path) as book:
        names = [str(name) for name in book.sheet_names]
        shown = ", ".join(f"`{name}`" for name in names[:20]) + (" …" if len(names) > 20 else "")
        parts = [f"Excel workbook · {_human_size(size)} · {len(names)} sheet(s): {shown}"]
        for name in names[:MAX_SHEETS]:
            frame = pd.read_excel(book, sheet_name=name, nrows=None if whole else SAMPLE_ROWS)
            parts.append(_table(f"Sheet `{name}`", None, frame, len(frame), exact=whole))
    if len(names) > MAX_SHEETS:
        parts.append(f"({len(names) - MAX_SHEETS} more sheet(s) not described.)")
    return "\n\n".join(parts)


def _parquet(path: Path, size: int) -> str:
    import pyarrow.parquet as pq  # optional dependency: its ImportError becomes a DataFileError

    with pq.ParquetFile(path) as parquet:
        rows = parquet.metadata.num_rows
        if size <= FULL_READ_BYTES:
            frame = parquet.read().to_pandas()
        else:
            first = next(parquet.iter_batches(batch_size=SAMPLE_ROWS), None)
            empty = parquet.schema_arrow.empty_table()
            frame = (empty if first is None else first).to_pandas()
    return _table("Parquet", size, frame, rows, exact=True, sampled=len(frame) < rows)


def _json(path: Path, size: int) -> str:
    import pandas as pd

    if path.suffix.lower() in _LINE_JSON:
        whole = size <= FULL_READ_BYTES
        frame = pd.read_json(path, lines=True, nrows=None if whole else SAMPLE_ROWS)
        rows = len(frame) if whole else _count_lines(path)
        return _table("JSON Lines", size, frame, rows, exact=whole)
    if size > MAX_JSON_BYTES:
        return f"JSON · {_human_size(size)} · too big to parse for a summary; starts with:\n" + _preview(path)
    document = json.loads(path.read_text(encoding="utf-8"))
    frame = _records(document)
    if frame is not None:
        return _table("JSON records", size, frame, len(frame), exact=True)
    lines = _outline(document, depth=0)
    return f"JSON · {_human_size(size)} · nested; outline:\n" + "\n".join(lines)


def _records(document: Any) -> pd.DataFrame | None:
    """A table when the JSON is a list of objects or an object of equal-length lists."""
    import pandas as pd

    if isinstance(document, list) and document and all(isinstance(item, dict) for item in document):
        return pd.DataFrame(document)
    if isinstance(document, dict) and document and all(isinstance(v, list) for v in document.values()):
        if len({len(v) for v in document.values()}) == 1:
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
    lines = [f"NumPy array · {_human_size(size)} · shape {shape} · dtype {dtype}"]
    if dtype.hasobject:
        return "\n".join([*lines, "Object array: loading it needs `np.load(..., allow_pickle=True)`."])
    array = np.load(path, mmap_mode=None if size <= FULL_READ_BYTES else "r")
    lines.append(f"First values: {np.array2string(np.asarray(array.flat[:8]), threshold=8, precision=4)}")
    if size <= FULL_READ_BYTES and np.issubdtype(array.dtype, np.number):
        lines.extend(_array_stats(array))
    return "\n".join(lines)


def _array_stats(array: np.ndarray) -> list[str]:
    import numpy as np

    if array.size == 0:
        return []
    nan = int(np.isnan(array).sum()) if np.issubdtype(array.dtype, np.floating) else 0
    if nan == array.size:
        return [f"all {nan:,} values are NaN"] if nan else []
    stats = f"min {np.nanmin(array):.4g} · max {np.nanmax(array):.4g} · mean {np.nanmean(array):.4g}"
    return [stats + (f" · {nan:,} NaN" if nan else "")]


def _plain(path: Path, size: int) -> str:
    with open(path, "rb") as handle:
        start = handle.read(8192)
    text = start.decode("utf-8", errors="replace")
    if b"\x00" in start or text.count("\ufffd") > len(text) // 100:
        return f"Binary file · {_human_size(size)} (not previewed)"
    if not start:
        return "Empty text file"
    lines = _count_lines(path)
    return f"Text · {_human_size(size)} · {lines:,} line(s); first lines:\n" + _preview(path)


def _preview(path: Path) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = [line.rstrip("\n")[:200] for _, line in zip(range(TEXT_LINES), handle)]
    body = "\n".join(lines)
    fence = "````" if "```" in body else "```"
    return f"{fence}text\n{body}\n{fence}"


_SUMMARIZERS: dict[Kind, Callable[[Path, int], str]] = {
    "csv": _csv, "tsv": _tsv, "excel": _excel, "parquet": _parquet,
    "json": _json, "npy": _npy, "text": _plain, "other": _plain,
}  # fmt: skip


def _table(
    label: str, size: int | None, frame: pd.DataFrame, rows: int, *,
    exact: bool, note: str = "", sampled: bool | None = None,
) -> str:  # fmt: skip
    sampled = (not exact) if sampled is None else sampled
    count = f"{rows:,}" if exact else f"≈{rows:,}"
    head = " · ".join(filter(None, [label, None if size is None else _human_size(size), note]))
    lines = [f"{head} · {count} {_plural(rows, 'row')} × {frame.shape[1]} {_plural(frame.shape[1], 'column')}"]
    columns = [f"`{name}` {dtype}" for name, dtype in frame.dtypes.items()]
    listed = ", ".join(columns[:MAX_COLUMNS])
    more = f", … and {len(columns) - MAX_COLUMNS} more columns (not listed)" if len(columns) > MAX_COLUMNS else ""
    lines.append(f"Columns: {listed}{more}")
    missing = frame.isna().sum()
    missing = missing[missing > 0]
    where = f" (in the first {len(frame):,} rows read)" if sampled else ""
    if len(missing):
        shown = ", ".join(f"`{name}` {int(n):,}" for name, n in missing.head(MAX_COLUMNS).items())
        lines.append(f"Missing values{where}: {shown}" + (" …" if len(missing) > MAX_COLUMNS else ""))
    elif len(frame):
        lines.append(f"No missing values{where}.")
    if len(frame):
        shown = min(HEAD_ROWS, len(frame))
        lines.append(f"First {shown} rows:" if shown > 1 else "First row:")
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


def _separator(path: Path, default: str) -> str:
    """The default, unless the header line splits more often on another usual separator."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        header = handle.readline(65536)
    return max([default, ",", ";", "\t", "|"], key=header.count)


def _count_lines(path: Path) -> int:
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def _human_size(size: float) -> str:
    if size < 1000:
        return f"{int(size)} B"
    for unit in ("KB", "MB", "GB"):
        size /= 1000
        if size < 1000:
            break
    return f"{size:.1f} {unit}"


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


# --- the prompt section and the setup cell ----------------------------------------------------


def identifier(file_name: str) -> str:
    """A Python identifier for a file's stem: ``"2024 sales-final.csv"`` → ``file_2024_sales_final``.

    Lower-case, runs of other characters become ``_``, a leading digit gets
    ``file_``, a keyword gets a trailing ``_`` (``class.csv`` → ``class_``).
    Raises nothing.
    """
    stem = unicodedata.normalize("NFKC", Path(file_name).stem).lower()
    chars = [char if f"a{char}".isidentifier() else "_" for char in stem]
    name = re.sub(r"_+", "_", "".join(chars)).strip("_") or "file"
    if not name[0].isidentifier():
        name = f"file_{name}"
    return f"{name}_" if keyword.iskeyword(name) else name


def data_attributes(files: Iterable[DataFile | str]) -> dict[str, str]:
    """Attribute name → file name for the ``data`` helper, in the files' order.

    A clash adds the suffix (``sales.csv``, ``sales.xlsx`` → ``sales``,
    ``sales_xlsx``), then a number. Raises nothing.
    """
    names: dict[str, str] = {}
    for item in files:
        file_name = item.name if isinstance(item, DataFile) else str(item)
        base = identifier(file_name)
        suffix = identifier("x" + Path(file_name).suffix.replace(".", "_"))[1:].strip("_")
        candidates = [base, f"{base}_{suffix}" if suffix else base]
        candidates += [f"{base}_{n}" for n in range(2, len(names) + 3)]
        names[next(c for c in candidates if c not in names)] = file_name
    return names


def data_summary(files: Sequence[DataFile]) -> str:
    """The body of the prompt's ``# Data`` section: each file's summary under its name and ``data`` attribute.

    The heading itself is left to the protocol, which adds ``# Data`` above
    this text. The text stays within ``MAX_SECTION_CHARS``: past it, files get
    a one-line entry, then are only counted. Raises nothing.
    """
    if not files:
        return "No data files were given."
    parts = [
        f"The working directory holds {len(files)} data file(s), read-only copies (write new files "
        "beside them). `data.<name>` is each file's path relative to the working directory."
    ]
    used = len(parts[0])
    for index, (attribute, file) in enumerate(zip(data_attributes(files), files)):
        heading = f"## {file.name} · `data.{attribute}`"
        entry = f"{heading}\n{file.summary}"
        if used + len(entry) > MAX_SECTION_CHARS:
            entry = f"{heading}\n{file.kind} · {_human_size(file.size)} (summary left out: prompt too long)"
        if used + len(entry) > MAX_SECTION_CHARS:
            parts.append(f"… and {len(files) - index} more file(s) not listed.")
            break
        parts.append(entry)
        used += len(entry) + 2
    return "\n\n".join(parts)


_SETUP = """\
%matplotlib inline
%config InlineBackend.figure_formats = ["png"]
import random
from types import SimpleNamespace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
{seaborn}
random.seed({seed})
np.random.seed({seed})
pd.set_option("display.max_columns", 30)
pd.set_option("display.width", 120)


class DataFiles(SimpleNamespace):
    \"\"\"This run's data files: paths relative to the working directory.\"\"\"

    def __repr__(self):
        return "DataFiles(" + ", ".join(f"{{k}}={{v!r}}" for k, v in vars(self).items()) + ")"


data = DataFiles({arguments})
data
"""
_SEABORN = """
try:
    import seaborn as sns
except ImportError:
    pass  # seaborn is optional
"""


def preload_code(files: Sequence[DataFile | str], *, seaborn: bool = True) -> str:
    """The kernel's setup cell, also the exported notebook's first code cell.

    It imports ``pd``, ``np``, ``plt`` (and ``sns`` when installed and
    ``seaborn`` is true), shows figures inline as PNG, fixes the ``random``
    and ``numpy`` seeds, and defines ``data``, whose attributes are the data
    files' relative paths. The first two lines are IPython magics (they start
    with ``%``); the rest is plain Python. Raises nothing.
    """
    pairs = [f"{name}={json.dumps(file, ensure_ascii=False)}" for name, file in data_attributes(files).items()]
    arguments = ", ".join(pairs)
    if len(pairs) > 1 or len(arguments) > 60:
        arguments = "\n" + "".join(f"    {pair},\n" for pair in pairs)
    return _SETUP.format(seaborn=_SEABORN if seaborn else "", seed=SEED, arguments=arguments)


def preload_description(files: Sequence[DataFile | str], *, seaborn: bool = True) -> str:
    """One line for the system prompt saying what the setup cell defined. Raises nothing."""
    attributes = data_attributes(files)
    if attributes:
        name, file = next(iter(attributes.items()))
        helper = f"`data` holds the data files' paths (e.g. `data.{name}` == {json.dumps(file, ensure_ascii=False)})"
    else:
        helper = "`data` is empty (no data files)"
    library = ", seaborn as sns (if installed)" if seaborn else ""
    return (
        f"pandas as pd, numpy as np, matplotlib.pyplot as plt{library} are imported; figures show "
        f"inline as PNG (end a plot with plt.show()); the random and numpy seeds are {SEED}; {helper}."
    )
