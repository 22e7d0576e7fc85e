"""The data files of a run: ``DataFile``, ``check_data`` and ``prepare_data``, ``summarize``, ``data_summary``,
``preload_code``.

Owns checking the input paths, copying them read-only into the workspace,
the prompt's ``# Data`` section and the kernel's setup cell with its ``data``
helper. Does not own describing one file's contents (``summaries.py``, whose
``file_kind`` and ``Kind`` are re-exported here), the kernel session that
runs the setup cell, nor the rest of the prompt.

Everything here is a function of its inputs and the files it reads; only
``CheckedData.install`` (``prepare_data``'s copy) writes, into the workspace.
"""

from __future__ import annotations

import errno
import inspect
import json
import keyword
import os
import re
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ...errors import ConfigError, DataFileError, KernelAgentError, StorageError, WorkspaceFileError
from ...kernel.door import Door
from ...kernel.workspace import resolve_outside_workspaces, workspace_holding
from ...notebook.claims import DataSources
from .describer import describe, start_describer
from .summaries import MAX_COLUMNS, MAX_SUMMARY_CHARS, Kind, file_kind, human_size

__all__ = [
    "MAX_COLUMNS",
    "MAX_SECTION_CHARS",
    "MAX_SUMMARY_CHARS",
    "DataFile",
    "Kind",
    "data_attributes",
    "CheckedData",
    "check_data",
    "data_summary",
    "file_kind",
    "identifier",
    "preload_code",
    "preload_description",
    "opened_beside",
    "prepare_data",
    "sql_setup",
    "with_sql",
    "stage_recorded",
    "summarize",
    "warm_describer",
]

MAX_SECTION_CHARS = 24_000  # the whole "# Data" section
DATABASE_KINDS = ("sqlite", "duckdb")  # data files ``sql()`` also queries, by their ``data`` name
SEED = 0


@dataclass(frozen=True)
class DataFile:
    """A data file of the run: ``name`` in the workspace, copied from ``source``."""

    name: str
    source: str
    kind: Kind
    size: int
    summary: str = field(default="", repr=False)

    def __repr__(self) -> str:
        return f"<DataFile {self.name} [{self.kind}, {human_size(self.size)}]>"


# --- preparing the workspace ------------------------------------------------------------------


def prepare_data(
    paths: Iterable[str | os.PathLike[str]], workspace: str | os.PathLike[str], *, described: bool = True
) -> tuple[DataFile, ...]:
    """Check every path, then copy each into ``workspace`` as a read-only file of the same name.

    Nothing is copied until every file has been checked and (``described``) summarised; without
    ``described`` the files come back without summaries. A file that already *is* the workspace
    file is left as it is (neither copied nor made read-only: it is the user's own file); an
    earlier read-only copy of the same name is replaced. (The agent uses ``check_data`` instead,
    to copy and describe at once while its kernel starts.)

    Raises ``DataFileError`` for a path that is missing, a directory, not a
    regular file, unreadable or unparseable, for two inputs with the same file
    name, and for a workspace entry of that name that is a directory.
    Raises ``ConfigError`` if the workspace cannot be created.
    """
    with check_data(paths, workspace) as checked:
        summaries = checked.summaries() if described else None
        checked.install()
        return checked.with_summaries(summaries) if summaries is not None else checked.files


def check_data(paths: Iterable[str | os.PathLike[str]], workspace: str | os.PathLike[str]) -> CheckedData:
    """The user-named data files ``paths``, checked, for ``workspace`` (nothing written there yet).

    Raises ``DataFileError`` for a path that is missing, a directory, not a regular file or
    unreadable, for two inputs with the same file name, and for a workspace entry of that name that
    is a directory. Close the result (a context manager) when done with it."""
    if isinstance(paths, str | os.PathLike):  # one path, not an iterable of characters
        paths = [paths]
    private = _Scratch()
    try:
        sources = [_checked_source(path, private) for path in paths]
        _check_unique_names(sources)
        target = Path(workspace).expanduser()
        door = Door(target)
        for source in sources:
            if target.is_dir() and door.entry_kind(source.name) == "dir":
                raise DataFileError(
                    f"cannot copy {source.name} into the workspace: {target / source.name} is a directory",
                    path=str(source.shown),
                )
    except BaseException:
        private.cleanup()
        raise
    return CheckedData(tuple(sources), target, private)


class CheckedData:
    """Checked data files (``check_data``) on their way into a workspace.

    Each is read from where it was checked, never from the workspace (which a kernel may reach): the
    user's file (their own links followed) or a private copy of one that lies in a run's workspace,
    kept until ``close``. ``files`` are the run's ``DataFile``s without summaries; ``install`` copies
    them in, ``summaries`` describes them. The two read the files only, so they may run at once in
    two threads (the agent does both while its kernel starts); ``close`` once both are done."""

    def __init__(self, sources: tuple[_Source, ...], workspace: Path, private: _Scratch) -> None:
        self._sources = sources
        self.workspace = workspace
        self._private = private
        self._made: list[Path] = []  # the folders make_workspace created, deepest first
        self._copied: list[Path] = []  # the copies install made
        self.files = tuple(DataFile(s.name, str(s.shown), file_kind(s.read), s.info.st_size) for s in sources)

    def __repr__(self) -> str:
        return f"<CheckedData {[f.name for f in self.files]} -> {self.workspace}>"

    def __enter__(self) -> CheckedData:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove the private copies. Idempotent."""
        self._private.cleanup()

    def make_workspace(self) -> None:
        """Create the workspace folder (and its parents). Raises ``ConfigError`` when it cannot be."""
        missing = [folder for folder in (self.workspace, *self.workspace.parents) if not os.path.lexists(folder)]
        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
            self._made += missing  # called again by install: what the first call made stays ours
        except OSError as exc:
            message = f"cannot create the workspace {self.workspace}: {exc.strerror or exc}"
            if exc.errno in _STORAGE_ERRNOS:
                raise StorageError(message, path=str(self.workspace)) from exc
            raise ConfigError(message) from exc

    def install(self) -> None:
        """Create the workspace and copy each file in, read-only (see ``prepare_data``). Raises
        ``ConfigError`` when the workspace cannot be created, ``DataFileError`` when a copy fails,
        ``StorageError`` when the disk does (full, over quota, I/O error)."""
        self.make_workspace()
        for source in self._sources:
            if _install(source, self.workspace):
                self._copied.append(self.workspace / source.name)

    def discard(self) -> None:
        """Undo what ``install`` and ``make_workspace`` did, for a run that never started: remove the copies
        they made, then each folder they created that is now empty. Nothing else is touched: a folder that
        holds anything more (the user's, the kernel's) stays. Never raises."""
        door = Door(self.workspace)
        for copy in self._copied:
            try:
                door.remove(copy.name)  # the entry itself: a link planted there goes, never followed
            except (OSError, WorkspaceFileError):
                pass
        self._copied = []
        for folder in self._made:
            try:
                folder.rmdir()  # only an empty one
            except OSError:
                break  # its parents are not empty either
        self._made = []

    def summaries(self) -> tuple[str, ...]:
        """Each file's summary (``summarize``), in order. Raises ``DataFileError`` for a file that cannot be
        read as its kind says."""
        return tuple(describe(source.read) for source in self._sources)

    @property
    def reads(self) -> tuple[Path, ...]:
        """Where each file's bytes are read (host paths of the user's or ours, never a workspace's)."""
        return tuple(source.read for source in self._sources)

    def check_unchanged(self) -> None:
        """Raise ``DataFileError`` when a file changed (size or modification time) since it was checked: its
        copies and description, each read separately, might then differ."""
        for source in (source for source in self._sources if not source.private):
            try:
                now = os.stat(source.read)
            except OSError as exc:
                raise DataFileError(
                    f"cannot read data file {source.shown}: {exc.strerror or exc}", path=str(source.shown)
                ) from exc
            if (now.st_size, now.st_mtime_ns) != (source.info.st_size, source.info.st_mtime_ns):
                raise DataFileError(
                    f"the data file {source.shown} changed while it was being copied; "
                    "run again once nothing is writing it",
                    path=str(source.shown),
                )

    def with_summaries(self, summaries: Sequence[str]) -> tuple[DataFile, ...]:
        """``files`` with these summaries."""
        return tuple(replace(f, summary=summary) for f, summary in zip(self.files, summaries, strict=True))


def warm_describer() -> None:
    """Start this process's confined describer ahead (``describer.py``: its worker imports pandas and pays
    the first parse, ~0.5 s), so the first run does not wait for it. Blocking (call it in a thread);
    raises nothing."""
    try:
        start_describer()
    except KernelAgentError:  # a warm-up: the run that follows says what is wrong, if anything
        pass


def stage_recorded(sources: DataSources, names: Iterable[str], workspace: Path) -> tuple[DataFile, ...]:
    """Copy a notebook's recorded data files into ``workspace`` from where its claims allow
    (``notebook/claims.py``: through the door, never a path as given) and describe them.

    Missing files are left out (the rebuild's code reports them). The summaries are made from private
    copies read back through the door: ``workspace`` may be a live kernel's (the service's, ``resume
    --workspace``), which can swap a name for a link at any moment. Raises ``ConfigError`` when the
    workspace cannot be created, ``DataFileError`` for a file that cannot be read as its kind says.
    """
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the workspace {workspace}: {exc.strerror or exc}") from exc
    staged = [name for name in names if sources.copy(name, workspace)]
    door = Door(workspace)
    described = []
    with tempfile.TemporaryDirectory(prefix="kernel-agent-describe-") as private:
        for name in staged:
            try:
                size, chunks = door.stream(name)
                Door(private).write_from(name, chunks)
            except (OSError, KernelAgentError) as exc:
                raise _copy_failed(f"cannot read the data file {name} in {workspace}: {exc}", exc, path=name) from exc
            copy = Path(private) / name
            described.append(DataFile(name, os.path.abspath(workspace / name), file_kind(copy), size, summarize(copy)))
    return tuple(described)


@dataclass(frozen=True)
class _Source:
    """A checked data file: ``shown`` as the user named it (absolute), ``read`` where its bytes are read
    (the file itself, or a private copy of one inside a run's workspace), ``info`` the file's own stat."""

    shown: Path
    read: Path
    info: os.stat_result
    private: bool = False  # ``read`` is our own copy (nobody else writes it)

    @property
    def name(self) -> str:
        return self.shown.name


class _Scratch:
    """A private temp folder made on first use (only a data file inside a run's workspace needs one)."""

    def __init__(self) -> None:
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    def path(self) -> Path:
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="kernel-agent-data-")
        return Path(self._folder.name)

    def cleanup(self) -> None:
        """Remove the folder, if made. Idempotent."""
        if self._folder is not None:
            self._folder.cleanup()


def _checked_source(path: str | os.PathLike[str], private: _Scratch) -> _Source:
    """Check a user-named data file. Links are followed (a user's own), except links inside a run's
    workspace, which the analysed code may have planted (``workspace.resolve_outside_workspaces``); a
    file that lies in a workspace is read once through the door into ``private`` (the kernel may swap
    it for a link at any moment), and everything after reads that copy."""
    source = Path(path).expanduser()
    shown = Path(os.path.abspath(source))
    try:
        real = Path(resolve_outside_workspaces(source))
    except ConfigError as exc:
        raise DataFileError(str(exc), path=str(source)) from exc
    except OSError as exc:
        raise DataFileError(f"cannot read data file {source}: {exc.strerror or exc}", path=str(source)) from exc
    if not real.exists():
        raise DataFileError(f"data file not found: {source}", path=str(source))
    if real.is_dir():
        raise DataFileError(f"{source} is a directory, not a data file", path=str(source))
    if not real.is_file():
        raise DataFileError(f"{source} is not a regular file", path=str(source))
    workspace = workspace_holding(real)
    try:
        if workspace is not None:
            return _private_copy(shown, real, workspace, private)
        with open(real, "rb") as handle:
            handle.read(1)
            return _Source(shown, real, os.fstat(handle.fileno()))
    except OSError as exc:  # a private copy can fill the disk
        raise _copy_failed(f"cannot read data file {source}: {exc.strerror or exc}", exc, path=str(source)) from exc


def _private_copy(shown: Path, real: Path, workspace: Path, private: _Scratch) -> _Source:
    relative = real.relative_to(workspace).as_posix()
    door, copy = Door(workspace), Path(tempfile.mkdtemp(dir=private.path())) / shown.name
    try:
        info = door.file_stat(relative)
        _size, chunks = door.stream(relative)
        Door(copy.parent).write_from(copy.name, chunks)
    except WorkspaceFileError as exc:
        raise DataFileError(
            f"cannot read data file {shown} in the run workspace {workspace}: {exc}", path=str(shown)
        ) from exc
    return _Source(shown, copy, info, private=True)


def _check_unique_names(sources: Sequence[_Source]) -> None:
    seen: dict[str, Path] = {}
    for source in sources:
        if source.name in seen:
            raise DataFileError(
                f"two data files are named {source.name!r} ({seen[source.name]} and {source.shown}); "
                "rename one: both would be copied to the same workspace file",
                path=str(source.shown),
            )
        seen[source.name] = source.shown


def _install(source: _Source, workspace: Path) -> bool:
    """Copy ``source`` into ``workspace``; False when the workspace already holds that very file."""
    door = Door(workspace)  # the kernel may have planted a link at the name, or at any temp name
    if door.same_file(source.name, source.info):
        return False
    try:
        door.copy_in(source.read, source.name, mode=0o444)  # also replaces an earlier read-only copy
    except (OSError, WorkspaceFileError) as exc:
        raise _copy_failed(
            f"cannot copy {source.shown} into {workspace}: {getattr(exc, 'strerror', None) or exc}",
            exc,
            path=str(source.shown),
        ) from exc
    return True


# A write that failed for the host's storage, not for the file: a full disk, a quota, an I/O error.
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})


def _copy_failed(message: str, exc: BaseException, *, path: str) -> KernelAgentError:
    """The error for a copy of a data file that failed with ``exc``: ``StorageError`` when the host's storage
    failed (the machine's to fix), else ``DataFileError`` (the file's, the user's)."""
    if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
        return StorageError(message, path=path)
    return DataFileError(message, path=path)


def summarize(path: str | os.PathLike[str]) -> str:
    """Markdown describing one data file for the prompt, at most ``MAX_SUMMARY_CHARS`` long.

    Tables (CSV, TSV, Excel, Parquet, JSON records) give their shape, columns
    with dtypes, missing values and the first rows; bigger files are sampled
    (the first ``summaries.SAMPLE_ROWS`` rows) and their rows counted by streaming.
    Nested JSON gives its outline, NPY its shape and dtype, text its first
    lines, binary files their size.

    Raises ``DataFileError`` if the file is missing, unreadable, or cannot be
    parsed as its kind says.
    """
    private = _Scratch()
    try:
        return describe(_checked_source(path, private).read)
    finally:
        private.cleanup()


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


def data_summary(files: Sequence[DataFile], *, opens: Callable[[DataFile, str], str] | None = None) -> str:
    """The body of the prompt's ``# Data`` section: each file's summary under its name and ``data`` attribute,
    then ``opens(file, attribute)`` when it says something (the kernel language's line that opens a database
    file read-only, ``Language.opens``; the attribute is also its ``sql()`` source name).

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
    for index, (attribute, file) in enumerate(zip(data_attributes(files), files, strict=True)):
        heading = f"## {file.name} · `data.{attribute}`"
        line = f"\n{opened}" if opens is not None and (opened := opens(file, attribute)) else ""
        entry = f"{heading}\n{file.summary}{line}"
        if used + len(entry) > MAX_SECTION_CHARS:
            entry = f"{heading}\n{file.kind} · {human_size(file.size)} (summary left out: prompt too long){line}"
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


def opened_beside(setup: str, workspace: str | None) -> str:
    """``setup`` with its first steps for a notebook opened in Jupyter, in any kernel (the user's own included).

    First, before any import: the kernel's working folder is taken off the import path, and Python
    processes the cells start are told the same (``PYTHONSAFEPATH``), so every module, ours and the
    model's, comes from where it is installed; a file the run's code wrote (``pandas.py``, a ``numpy/``
    folder) is never imported in its place. Then, after the leading magics, when ``workspace`` is given
    (the run's folder, relative to the notebook's, where Jupyter starts the kernel): go into it, where the
    data files and the files the code wrote are. That step is a no-op in the agent's own kernel (already
    there) and in ``replay`` (the data is staged where it starts). Raises nothing."""
    lines = setup.splitlines(keepends=True)
    magics = 0
    while magics < len(lines) and lines[magics].startswith("%"):
        magics += 1
    guard = (
        "import os\nimport sys\n\n"
        "# Modules come from where they are installed, never from this folder or the run's (its code wrote files\n"
        "# there): off the import path, here and in the Python processes the cells start.\n"
        "sys.path[:] = [path for path in sys.path if os.path.abspath(path) != os.getcwd()]\n"
        'os.environ["PYTHONSAFEPATH"] = "1"\n'
    )
    step = (
        f"if os.path.isdir({json.dumps(workspace)}):  # opened in Jupyter beside the run's workspace: work there\n"
        f"    os.chdir({json.dumps(workspace)})\n"
        if workspace
        else ""
    )
    return guard + "".join(lines[:magics]) + step + "".join(lines[magics:])


def sql_setup(files: Sequence[DataFile | str], live: Sequence[str] = ()) -> str:
    """The setup cell's ``sql(query, source=None)``: the kernel side of the live sources' broker, as the text of
    ``kernel/inside/sql_client.py`` itself (so the notebook replays where kernel-agent is not installed), with
    its sources: the database files among ``files``, by their ``data`` name (opened read-only in the kernel),
    and the ``live`` ones' names. Raises nothing."""
    from ...kernel.inside import sql_client

    client = inspect.getsource(sql_client).replace("from __future__ import annotations\n", "")  # mid-cell
    databases = {
        name: file.name
        for name, file in zip(data_attributes(files), files, strict=True)
        if isinstance(file, DataFile) and file.kind in DATABASE_KINDS
    }
    lines = [
        "# sql(query, source=None): this run's databases as pandas DataFrames (kernel-agent's client, below)",
        client.rstrip(),
        "",
        f"FILE_SOURCES.update({json.dumps(databases, ensure_ascii=False)})",
        f"LIVE_SOURCES[:] = {json.dumps(list(live), ensure_ascii=False)}",
    ]
    return "\n".join(lines) + "\n"


def with_sql(setup: str, files: Sequence[DataFile], live: Sequence[str] = ()) -> str:
    """A Python setup cell with ``sql()`` defined (``sql_setup``) when there is something to query: a live
    source (``live``, their names) or a database file among ``files``; else ``setup`` as it is. The definition
    goes before the cell's last line when that shows ``data`` (it stays the cell's output), else after it."""
    if not live and not any(f.kind in DATABASE_KINDS for f in files):
        return setup
    sql = sql_setup(files, live)
    head, _, last = setup.rstrip().rpartition("\n")
    if last.strip() == "data":
        return f"{head.rstrip()}\n\n\n{sql.rstrip()}\n\n\n{last}\n"
    return f"{setup.rstrip()}\n\n\n{sql}"


def data_helper_words(files: Sequence[DataFile | str], *, kind: str = "holds", access: str = ".") -> str:
    """What the setup cell's ``data`` is, with an example: ``data.sales`` (Python), ``data$sales`` (R)."""
    attributes = data_attributes(files)
    if not attributes:
        return "`data` is empty (no data files)"
    name, file = next(iter(attributes.items()))
    return f"`data` {kind} the data files' paths (e.g. `data{access}{name}` == {json.dumps(file, ensure_ascii=False)})"


def preload_description(files: Sequence[DataFile | str], *, seaborn: bool = True) -> str:
    """One line for the system prompt saying what the setup cell defined. Raises nothing."""
    helper = data_helper_words(files)
    library = ", seaborn as sns (if installed)" if seaborn else ""
    return (
        f"pandas as pd, numpy as np, matplotlib.pyplot as plt{library} are imported; figures show "
        f"inline as PNG (end a plot with plt.show()); the random and numpy seeds are {SEED}; {helper}."
    )
