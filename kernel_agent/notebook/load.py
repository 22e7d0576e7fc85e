"""Read exported notebooks back: ``read_notebook``, ``load_run``, ``LoadedRun``.

Owns turning cells into ``Round`` values again, for resuming a run and for
showing any notebook. Tolerant of hand edits: the cells are the truth for
code, reasoning and outputs, ``metadata["kernel_agent"]`` fills in the rest
(read through ``metadata.py``'s schema), and missing or mistyped metadata falls back to defaults. A notebook without
our metadata at all reads as one round per code cell. The layout itself is
``export.py``'s.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, get_args

from .._nbformat import NotebookNode, nbformat
from ..errors import NotebookError, WorkspaceFileError
from ..kernel.door import read_record
from ..kernel.rebuild import RebuildCell
from ..records import Round, Run, RunInfo, Usage
from ..result import ErrorInfo, ExecutionResult, Status, strip_ansi
from ..shapes import ErrorShape
from .claims import check_data_files
from .export import GUARD_HEADER, guard_source
from .metadata import METADATA_KEY, CellMetadata, NotebookMetadata, record_fields, workspace_path

__all__ = [
    "MAX_DEPTH",
    "MAX_NOTEBOOK_BYTES",
    "LoadedRun",
    "notebook_from_text",
    "parse_json",
    "load_resumable",
    "load_run",
    "read_json_record",
    "read_notebook",
]

MAX_NOTEBOOK_BYTES = 256 * 1024 * 1024  # a notebook or plan state read whole into memory
MAX_DEPTH = 100  # nesting of lists and objects; ours is under 10, an output's JSON rarely 20

_STATUSES = frozenset(get_args(Status))
# What a record read back takes from the cells or works out, not from its metadata's field of that name.
_RUN_GIVEN = frozenset({"info", "turns", "rounds", "usage", "notebook_path", "setup_result"})
_ROUND_GIVEN = frozenset({"index", "reply", "reasoning", "code", "result"})
_RESULT_GIVEN = frozenset({"status", "outputs", "execution_count", "error", "code"})
_INFO_GIVEN = frozenset({"workspace", "setup_code", "language_info", "kernelspec"})
_GUARD_LINE = re.compile(re.escape(GUARD_HEADER).replace(re.escape("{status}"), "([A-Za-z_-]+)"))


@dataclass(frozen=True)
class LoadedRun:
    """A run read back from its notebook.

    ``rebuild_code`` is the setup cell's code followed by the code of every
    cell that ran ok, in order: running it rebuilds the kernel's state.
    ``rebuild_cells`` is every executed cell with its round (0: setup) and
    recorded status, for a ``RebuildPlan`` that reports what is lost.
    ``view`` is ``full``, ``clean``, or ``""`` for a notebook we did not write.
    """

    run: Run
    rebuild_code: tuple[str, ...] = ()
    view: str = ""
    version: str = ""
    path: Path | None = field(default=None, compare=False)
    rebuild_cells: tuple[RebuildCell, ...] = ()

    @property
    def info(self) -> RunInfo:
        return self.run.info

    @property
    def rounds(self) -> tuple[Round, ...]:
        return self.run.rounds

    def __repr__(self) -> str:
        return f"<LoadedRun [{self.view or 'foreign'}] {len(self.run.rounds)} rounds from {self.path}>"


def read_json_record(path: str | os.PathLike[str], what: str, limit: int = MAX_NOTEBOOK_BYTES) -> Any:
    """The JSON document in the host's record ``path`` (a notebook, a plan state), read through the door
    (``read_record``: a regular file reached without a link, never waited on) and bounded: at most
    ``limit`` bytes and ``MAX_DEPTH`` levels of nesting. Raises ``NotebookError`` with a one-line reason
    otherwise, or when it is missing, unreadable or not JSON; ``what`` names it in the message."""
    return _read_json(Path(path), what, limit)[1]


def _read_json(path: Path, what: str, limit: int = MAX_NOTEBOOK_BYTES) -> tuple[str, Any]:
    """``read_json_record``'s document and the text it was parsed from."""
    try:
        data = read_record(path, limit)
    except WorkspaceFileError as exc:
        raise NotebookError(f"cannot read the {what} {path}: {exc}", path=str(path)) from exc
    except OSError as exc:
        raise NotebookError(f"cannot read the {what} {path}: {exc.strerror or exc}", path=str(path)) from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotebookError(f"cannot read the {what} {path}: not UTF-8 ({exc.reason})", path=str(path)) from exc
    return text, parse_json(text, what, str(path))


def parse_json(text: str, what: str, label: str) -> Any:
    """``text`` as JSON, at most ``MAX_DEPTH`` levels deep. Raises ``NotebookError`` (one line) otherwise."""
    try:
        document = json.loads(text)
    except RecursionError as exc:
        raise NotebookError(f"{label} is not a usable {what}: nested too deeply", path=label) from exc
    except ValueError as exc:
        raise NotebookError(f"{label} is not a {what}: not JSON ({exc})", path=label) from exc
    if _too_deep(document, MAX_DEPTH):
        raise NotebookError(f"{label} is not a usable {what}: nested deeper than {MAX_DEPTH} levels", path=label)
    return document


def _too_deep(document: Any, limit: int) -> bool:
    """Whether ``document`` nests lists and objects deeper than ``limit`` (walked without recursion)."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def read_notebook(path: str | os.PathLike[str]) -> NotebookNode:
    """The notebook at ``path`` as nbformat v4 (older versions are converted).

    Lenient about schema details a hand edit may break (missing cell ids). Bounded: read through the
    door (a link, FIFO, device or socket is refused at once), at most ``MAX_NOTEBOOK_BYTES`` and
    ``MAX_DEPTH`` levels deep. Raises ``NotebookError`` (a one-line reason) when the file is missing,
    unreadable, too large, too deep, or not a notebook.
    """
    path = Path(path)
    text, raw = _read_json(path, "notebook")
    return _notebook(text, raw, str(path))


def notebook_from_text(text: str, label: str) -> NotebookNode:
    """``read_notebook`` for a notebook's text already read (``label`` names it in errors): as bounded,
    as lenient. Raises ``NotebookError``."""
    return _notebook(text, parse_json(text, "notebook", label), label)


def _notebook(text: str, raw: Any, label: str) -> NotebookNode:
    if not isinstance(raw, dict) or not isinstance(raw.get("nbformat"), int):
        raise NotebookError(f"{label} is not a notebook: no 'nbformat' version", path=label)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # missing/duplicate cell ids do not matter for reading
            nb = nbformat.reads(text, as_version=4, capture_validation_error={})
    except Exception as exc:  # nbformat raises assorted errors (KeyError, ValidationError, ...) on malformed input
        reason = " ".join(str(exc).split())[:300]
        raise NotebookError(f"{label} is not a readable notebook: {reason}", path=label) from exc
    if not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{label} is not a notebook: no list of cells", path=label)
    return nb


def load_run(path: str | os.PathLike[str]) -> LoadedRun:
    """Rebuild the ``Run`` recorded in the notebook at ``path`` (either view).

    Results are rebuilt from the cell outputs, so ``to_llm_text()`` works.
    A workspace recorded relative to the notebook is returned absolute.
    Raises ``NotebookError`` when ``path`` is not a notebook.
    """
    path = Path(path)
    nb = read_notebook(path)
    notebook = NotebookMetadata.read(nb.metadata)
    meta = notebook.kernel_agent
    setup: tuple[NotebookNode, CellMetadata] | None = None
    groups: list[_Group] = []
    for cell in nb.cells:
        raw = _mapping(cell.get("metadata", {}).get(METADATA_KEY))
        cell_meta = CellMetadata.read(raw)
        role = cell_meta.role or ("code" if cell.get("cell_type") == "code" else "reasoning")
        if cell.get("cell_type") == "code" and role == "setup" and setup is None:
            setup = (cell, cell_meta)
        elif cell.get("cell_type") in ("code", "markdown") and role not in ("header", "question"):
            _add_cell(groups, cell, role, cell_meta, raw)
    rounds = tuple(_round(group, number) for group, number in zip(groups, _numbers(groups), strict=True))
    setup_result = _result(*setup) if setup is not None else None
    setup_code = _code(*setup) if setup is not None else ""
    turns = tuple(turn.record() for turn in meta.turns)
    info = _info(notebook, path, setup_code)
    if len(turns) > 1:
        info = replace(info, question=turns[-1].task)
    run = Run(
        info=info,
        turns=turns[:-1],
        rounds=rounds,
        usage=meta.usage.record() if "usage" in meta.model_fields_set else sum((r.usage for r in rounds), Usage()),
        notebook_path=path,
        setup_result=setup_result,
        **record_fields(meta, Run, _RUN_GIVEN),
    )
    cells = [RebuildCell(setup_code, 0)] if setup_code.strip() else []
    cells += [
        RebuildCell(r.code, r.index, r.result.status)
        for r in rounds
        if r.code and r.code.strip() and r.result is not None and r.result.status != "cancelled"
    ]
    return LoadedRun(
        run,
        tuple(c.code for c in cells if c.status == "ok"),
        view=meta.view,
        version=meta.version,
        path=path,
        rebuild_cells=tuple(cells),
    )


def load_resumable(path: str | os.PathLike[str]) -> LoadedRun:
    """``load_run``, refusing what resuming must not act on.

    Resuming re-executes the notebook's code and copies its data files, so a
    notebook kernel-agent did not write, or one whose recorded data files are
    not plain file names (an absolute path, ``..``, a sub-folder: a way to
    read or overwrite files outside the workspace), raises ``NotebookError``
    before anything runs. Also raises what ``load_run`` raises.
    """
    loaded = load_run(path)
    if not loaded.view:
        raise NotebookError(
            f"{path} is not a kernel-agent run (it has no {METADATA_KEY!r} metadata), so it cannot be resumed; "
            "nothing was run or changed",
            path=str(path),
        )
    check_data_files(loaded.info.data_files, path)
    return loaded


@dataclass
class _Group:
    """The cells of one round while reading: markdown first, at most one code cell last."""

    number: int | None = None
    reasoning: list[str] = field(default_factory=list)
    code_cell: NotebookNode | None = None
    raw: dict[str, Any] = field(default_factory=dict)  # the cells' metadata, merged in order

    @property
    def meta(self) -> CellMetadata:
        return CellMetadata.read(self.raw)


def _add_cell(groups: list[_Group], cell: NotebookNode, role: str, meta: CellMetadata, raw: dict[str, Any]) -> None:
    number = meta.round
    if role == "answer" and number is None:
        return
    current = groups[-1] if groups else None
    if (
        current is None
        or current.code_cell is not None
        or (number is not None and current.number is not None and number != current.number)
    ):
        current = _Group()
        groups.append(current)
    if current.number is None:
        current.number = number
    current.raw.update(raw)
    if cell.cell_type == "code":
        current.code_cell = cell
    elif role == "reasoning":
        current.reasoning.append(cell.source)


def _numbers(groups: list[_Group]) -> list[int]:
    """Recorded round numbers where they keep increasing; the next free number elsewhere (hand-added cells)."""
    numbers, last = [], 0
    for group in groups:
        last = group.number if group.number is not None and group.number > last else last + 1
        numbers.append(last)
    return numbers


def _round(group: _Group, number: int) -> Round:
    meta = group.meta
    reasoning = "\n\n".join(part for part in group.reasoning if part.strip())
    cell = group.code_cell
    code = _code(cell, meta) if cell is not None else None
    reply = meta.reply
    if reply is None:  # hand-made round: a plain markdown reply
        reply = reasoning + (f"\n\n```python\n{code}\n```" if code is not None else "")
    return Round(
        index=number,
        reply=reply,
        reasoning=reasoning,
        code=code,
        result=_result(cell, meta) if cell is not None else None,
        **record_fields(meta, Round, _ROUND_GIVEN),
    )


def _result(cell: NotebookNode, meta: CellMetadata) -> ExecutionResult | None:
    """The cell's result, or None for code that never ran (no status, no count, no outputs)."""
    outputs = tuple(_plain(out) for out in cell.get("outputs", []))
    count = cell.get("execution_count")
    recorded = meta.status
    if recorded not in _STATUSES and count is None and not outputs:
        return None
    errors = [out for out in outputs if out.get("output_type") == "error"]
    status: Status
    if recorded in ("cancelled", "timeout", "died"):  # recorded once, read back as recorded: an interrupt's
        status = recorded  # KeyboardInterrupt traceback is how the cell ended, not an error of its code
    elif errors or (recorded == "error" and count is None and not outputs):  # or its outputs were stripped
        status = "error"
    else:
        status = "ok"
    return ExecutionResult(
        status=status,
        outputs=outputs,
        execution_count=count if _is_int(count) else None,
        error=_error(errors, meta.error) if status == "error" else None,
        code=_code(cell, meta),
        **record_fields(meta, ExecutionResult, _RESULT_GIVEN),
    )


def _code(cell: NotebookNode, meta: CellMetadata) -> str:
    """What the cell runs: what it shows. The export keeps the original of a commented-out (guarded)
    cell in its metadata (``kernel_agent.code``); that copy is used only when the cell shows exactly it,
    commented out under the guard's line. Any other metadata code is never run: the source is."""
    original = meta.code
    source = cell.get("source")
    source = source if isinstance(source, str) else ""
    if isinstance(original, str) and original != source and shows_guarded(source, original):
        return original
    return source


def shows_guarded(source: str, original: str) -> bool:
    """Whether ``source`` is exactly ``original`` commented out under the guard's line (``guard_source``):
    the lines the comment shows, uncommented, are ``original`` character for character (but for
    trailing newlines, which run the same)."""
    first, _, rest = source.partition("\n")
    match = _GUARD_LINE.fullmatch(first)
    if match is None or guard_source(original, match.group(1)) != source:
        return False
    shown = [line[2:] if line.startswith("# ") else line[1:] for line in rest.split("\n")] if rest else []
    return "\n".join(shown) == original.rstrip("\n")


def _error(errors: list[dict[str, Any]], recorded: ErrorShape | None) -> ErrorInfo:
    if errors:
        out = errors[-1]
        lines = tuple(strip_ansi(str(line)) for line in _list(out.get("traceback")))
        return ErrorInfo(_str(out.get("ename")), _str(out.get("evalue")), lines)
    recorded = recorded or ErrorShape()
    return ErrorInfo(recorded.ename or "Error", recorded.evalue)


def _info(notebook: NotebookMetadata, path: Path, setup_code: str) -> RunInfo:
    meta = notebook.kernel_agent
    return RunInfo(
        workspace=workspace_path(meta.workspace, str(path.parent)),
        setup_code=setup_code,
        language_info=_plain(notebook.language_info or {"name": "python"}),
        kernelspec=notebook.kernelspec.record(),
        **record_fields(meta, RunInfo, _INFO_GIVEN),
    )


def _plain(value: Any) -> Any:
    """NotebookNode (a dict subclass with attribute access) -> plain JSON values."""
    return json.loads(json.dumps(value))


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
