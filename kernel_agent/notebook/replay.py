"""Re-execute an exported notebook and check it against what it recorded: ``replay``, ``ReplayReport``.

Owns the replay (nbclient in a fresh kernel whose cwd is a temporary folder
holding copies of the data files, removed afterwards) and the comparison of
outputs. The comparison helpers (``normalise_text``, ``compare_outputs``) are
pure. Never prints: front ends render ``ReplayReport.to_text()``.

What "the same" means: streams are compared per stream name (stdout,
stderr) after joining; other outputs in order, by kind, MIME types and
``text/plain``; PNG images by count and size (±1 px); errors by ``ename``.
Text is normalised first by the documented rule list in ``normalise``
(memory addresses, durations, clock times and dates near the recording or
the replay, temporary and workspace paths).

A ``%%agent`` cell is never run again: the kernel gets ``recorded.REPLAY_ENV``
and the cells' recorded outputs (``recorded.py``), and the magic shows them
with one line saying so. Such a cell is ``recorded`` when it showed exactly
what it recorded (compared as above, with what the magic makes of each
recorded output), else a mismatch.
"""

from __future__ import annotations

import copy
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from .._loop import LoopThread, in_thread
from .._nbformat import NotebookNode
from ..errors import KernelAgentError, NotebookError, SandboxUnavailableError
from ..kernel.door import Door
from ..kernel.interface import EXEC_TIMEOUT_S
from ..kernel.providers.local import LocalProvider
from ..kernel.sandbox.limits import Limits
from ..result import png_size
from .claims import DataSources, check_data_files, plain
from .export import SKIP_TAG
from .load import read_notebook
from .metadata import CellMetadata, KernelspecShape, PlanCellMetadata, RunMetadata, read_block, read_cell
from .normalise import normalise_text
from .recorded import (
    CELLS_FILE,
    HANDOVER_DIR,
    REPLAY_ENV,
    REPLAYED_NOTE,
    RecordedCell,
    cell_key,
    handover_bytes,
    is_agent_cell,
    is_notice,
    run_claim,
    shown_recorded,
)

__all__ = [
    "CellCheck",
    "CheckStatus",
    "ReplayReport",
    "async_replay",
    "compare_outputs",
    "normalise_text",
    "recorded_sources",
    "replay",
]

CheckStatus = Literal["match", "mismatch", "skipped", "error", "executed", "expected", "recorded"]


@dataclass(frozen=True)
class CellCheck:
    """The replay of one code cell. ``index`` is the cell's position in the notebook; ``round`` 0 is setup."""

    index: int
    round: int | None
    status: CheckStatus
    detail: str = ""
    task: str | None = None  # a plan notebook's cell: the id of the task it belongs to

    @property
    def where(self) -> str:
        """``setup``, ``round 3``, ``task clean`` (a plan's), or ``-`` for a cell we did not write."""
        if self.round == 0:
            return "setup"
        if self.round is not None:
            return f"round {self.round}"
        return f"task {self.task}" if self.task else "-"


@dataclass(frozen=True)
class ReplayReport:
    """What a replay found, cell by cell. ``ok`` is True when nothing mismatched or failed.

    ``checked`` is False for ``replay(check=False)``: executed cells then have
    status ``executed``. ``notebook`` is the executed notebook.
    """

    path: Path
    cells: tuple[CellCheck, ...]
    checked: bool = True
    duration_s: float = 0.0
    notebook: NotebookNode | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return all(cell.status not in ("mismatch", "error") for cell in self.cells)

    def counts(self) -> dict[str, int]:
        """How many cells had each status, in a fixed order, zeros left out."""
        order: tuple[CheckStatus, ...] = ("match", "recorded", "executed", "expected", "mismatch", "error", "skipped")
        found = {status: sum(cell.status == status for cell in self.cells) for status in order}
        return {status: n for status, n in found.items() if n}

    def to_text(self) -> str:
        """A plain rendering: one summary line, then one line per code cell."""
        summary = ", ".join(f"{n} {status}" for status, n in self.counts().items()) or "no code cells"
        lines = [f"replay of {self.path}: {'ok' if self.ok else 'FAILED'} ({summary}) in {self.duration_s:.1f} s"]
        for cell in self.cells:
            detail = f"  {cell.detail}" if cell.detail else ""
            lines.append(f"  cell {cell.index:>3}  {cell.where:<9} {cell.status:<8}{detail}".rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<ReplayReport [{'ok' if self.ok else 'failed'}] {len(self.cells)} code cells {self.path}>"


def replay(
    path: str | os.PathLike[str],
    workspace: str | os.PathLike[str] | None = None,
    check: bool = True,
    timeout: float | None = EXEC_TIMEOUT_S,
    kernel_name: str | None = None,
    limits: Limits | None = None,
    python: str | None = None,
    sockets: Mapping[str, Path] | None = None,
    template: bool = True,
) -> ReplayReport:
    """Re-execute the notebook at ``path`` in a fresh kernel and compare outputs.

    Sync facade of ``async_replay`` (same arguments, raises the same); it runs
    on a private event-loop thread, so it also works inside a running loop.
    """

    runner = LoopThread("kernel-agent-replay")
    try:
        return runner.run(async_replay(path, workspace, check, timeout, kernel_name, limits, python, sockets, template))
    finally:
        runner.stop()


async def async_replay(
    path: str | os.PathLike[str],
    workspace: str | os.PathLike[str] | None = None,
    check: bool = True,
    timeout: float | None = EXEC_TIMEOUT_S,
    kernel_name: str | None = None,
    limits: Limits | None = None,
    python: str | None = None,
    sockets: Mapping[str, Path] | None = None,
    template: bool = True,
) -> ReplayReport:
    """Re-execute the notebook at ``path`` in a fresh kernel and compare outputs.

    The data files named in its metadata are copied from ``workspace`` (or
    else from the notebook's folder, and a recorded workspace only when it is
    a folder under it) into a temporary folder that is the kernel's cwd and is
    removed afterwards. The metadata is a claim, not an order: a data file that
    is not a plain name (a sub-folder, a hidden name, an absolute or ``..``
    path) refuses the replay before anything runs (``claims.check_data_files``),
    and each file is read through the door, so a link leads nowhere.
    Cells tagged ``skip-execution`` are skipped; ``raises-exception`` cells
    may raise. ``timeout`` is per cell, in seconds (None: none; by default
    ``kernel.interface.EXEC_TIMEOUT_S``, 120, as ``--timeout``'s). ``kernel_name`` defaults to
    the notebook's kernelspec (a claim: only an installed kernelspec of that name
    runs, confined as any other), else ``python3``; ``python`` is another Python
    environment to run it in (``--python``). The kernel is confined like a
    session's (``limits``, default ``Limits()``: in the sandbox, with the same
    environment allow-list): the recorded code is model-written too. ``template``: our own
    Python kernel may be forked from a warmed template, as a session's (False: started cold). An
    unexpected error, a timeout or a kernel death stops the replay and becomes
    an ``error`` entry. A ``%%agent`` cell shows the run it recorded, no model
    asked and no kernel started (``recorded.py``). ``sockets`` are given to the kernel as a session's are
    (``ProviderSettings.sockets``: the broker of the live sources it recorded, ``recorded_sources``).

    Raises ``NotebookError`` when the file is not a notebook, a data file is
    missing (naming it and where it was looked for), or the kernel cannot start;
    ``SandboxUnavailableError`` when the sandbox asked for cannot be made here.
    """
    path = Path(path)
    started = time.monotonic()
    recorded = read_notebook(path)
    meta = _metadata(recorded)
    check_data_files(meta.data_files, path, in_named_folder=workspace is not None)  # before any kernel
    sources = _data_sources(path, meta, workspace)
    executed = copy.deepcopy(recorded)
    with tempfile.TemporaryDirectory(prefix=f"kernel-agent-replay-{os.getpid()}-") as cwd:  # the pid says whose
        await in_thread(_stage_data, meta, sources, Path(cwd), path)
        handover = await in_thread(_stage_agent_cells, recorded, Path(cwd), path)
        stop = await _execute(
            executed, cwd, timeout, kernel_name, path, limits, python, {REPLAY_ENV: handover}, sockets, template
        )
    anchors = [*_anchors(meta), datetime.now(UTC)]
    folders = [folder / prefix for folder, prefix in sources.places]
    paths = [
        variant for folder in (*folders, Path(cwd)) for variant in (os.path.abspath(folder), os.path.realpath(folder))
    ]
    cells = _check_cells(recorded, executed, stop, check, anchors, paths)
    return ReplayReport(path, cells, checked=check, duration_s=time.monotonic() - started, notebook=executed)


# -- data and execution ----------------------------------------------------------------------------


def recorded_sources(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The names of the live data sources the notebook at ``path`` recorded (a claim: names only, each
    reconnected by the replaying user's own means). Raises ``NotebookError`` when it is not a notebook."""
    return tuple(source.name for source in _metadata(read_notebook(Path(path))).sources)


def _metadata(nb: NotebookNode) -> RunMetadata:
    """The notebook's record (a run's or a plan's: they share what a replay reads), read as a claim."""
    return read_block(nb.metadata, RunMetadata) or RunMetadata.read({})


def _data_sources(path: Path, meta: RunMetadata, workspace: str | os.PathLike[str] | None) -> DataSources:
    if workspace is not None and not Path(workspace).is_dir():
        raise NotebookError(f"workspace {workspace} for replaying {path} is not a folder", path=str(path))
    return DataSources.for_notebook(path, meta.workspace, Path(workspace) if workspace is not None else None)


def _stage_data(meta: RunMetadata, sources: DataSources, cwd: Path, path: Path) -> None:
    """Copy the data files the notebook names (plain names only, ``claims``) into the kernel's fresh
    folder, never through a link."""
    names = meta.data_files
    check_data_files(names, path, in_named_folder=sources.named)
    for name in names:
        if sources.copy(name, cwd):
            continue
        looked = ", ".join(sources.looked_in(name))
        message = f"data file {name!r} for replaying {path} not found (as a plain file); looked in: {looked}"
        claimed = meta.workspace
        if claimed and not plain(claimed):
            message += (
                f". The notebook says its workspace was {claimed}; a notebook's paths are never used "
                "as given: pass --workspace (workspace=) to read the data files from there"
            )
        raise NotebookError(message, path=str(path))


def _stage_agent_cells(recorded: NotebookNode, cwd: Path, path: Path) -> str:
    """Write the hand-over for the magic (``recorded.py``) into the kernel's fresh folder: each ``%%agent``
    cell's recorded outputs and, when its link names a plain relative path under the notebook's folder
    that holds a file, its run's notebook at that path (read through the door, never over a staged file).
    Return the hand-over folder's path."""
    cells: dict[str, RecordedCell] = {}
    target, notebooks = Door(cwd), Door(path.parent)
    for cell in recorded.cells:
        if cell.get("cell_type") != "code" or not is_agent_cell(cell.source):
            continue
        outputs = tuple(cell.get("outputs", []))
        if not outputs:
            continue  # never run, or its outputs cleared: no recorded run to show (the magic says so)
        claim = run_claim(outputs)
        staged = claim if claim is not None and plain(claim) else None
        try:
            if staged is not None and target.entry_kind(staged) is not None:
                raise FileExistsError(staged)  # a data file of that name is staged already: it stays
            if staged is not None:
                _size, chunks = notebooks.stream(staged)
                target.write_from(staged, chunks, mode=0o444)
        except (OSError, KernelAgentError):
            staged = None  # not beside the notebook: the magic leaves ``_agent_run`` None and says so
        cells[cell_key(cell.source)] = RecordedCell(outputs, staged)
    target.write(f"{HANDOVER_DIR}/{CELLS_FILE}", handover_bytes(cells), mode=0o444)
    return str(cwd / HANDOVER_DIR)


async def _execute(
    nb: NotebookNode,
    cwd: str,
    timeout: float | None,
    kernel_name: str | None,
    path: Path,
    limits: Limits | None,
    python: str | None = None,
    env: dict[str, str] | None = None,
    sockets: Mapping[str, Path] | None = None,
    template: bool = True,
) -> tuple[int, str] | None:
    """Run ``nb`` in place; return (cell index, what went wrong) when the replay stopped early."""
    progress: dict[str, Any] = {"index": None, "ready": False}

    def on_cell_start(cell: NotebookNode, cell_index: int) -> None:
        progress["index"] = cell_index

    def on_notebook_start(notebook: NotebookNode) -> None:
        progress["ready"] = True

    from nbclient import NotebookClient  # it imports nbformat: after ours (``_nbformat``)

    name = kernel_name or KernelspecShape.read(nb.metadata.get("kernelspec")).name or "python3"
    provider = LocalProvider(
        Path(cwd), kernel_name=name, limits=limits, python=python, env=env, sockets=sockets, template=template
    )
    try:
        manager, env = provider.prepare()
        client = NotebookClient(
            nb,
            km=manager,
            timeout=timeout,
            allow_errors=False,
            skip_cells_with_tag=SKIP_TAG,
            resources={"metadata": {"path": cwd}},
            on_cell_start=on_cell_start,
            on_notebook_start=on_notebook_start,
        )
        # The replayed code is model-written too: confined like our sessions, and the kernel's own
        # chatter stays off the user's terminal. cleanup_kc: nbclient shuts down a kernel it did not make.
        await client.async_execute(env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cleanup_kc=True)
    except SandboxUnavailableError:
        raise
    except Exception as exc:  # nbclient and jupyter_client raise many kinds; each becomes context below
        if not progress["ready"] or progress["index"] is None:
            raise NotebookError(f"could not start kernel {name!r} to replay {path}: {exc}", path=str(path)) from exc
        return progress["index"], _failure(exc, timeout)
    finally:
        await provider.close()
    return None


def _failure(exc: Exception, timeout: float | None) -> str:
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    if isinstance(exc, CellExecutionError):
        return f"raised {exc.ename}: {exc.evalue}"
    if isinstance(exc, CellTimeoutError):
        return f"timed out after {timeout:g} s"
    if isinstance(exc, DeadKernelError):
        return "the kernel died"
    return f"replay failed: {type(exc).__name__}: {exc}"


def _anchors(meta: RunMetadata) -> list[datetime]:
    found = []
    for recorded in (meta.started_at, meta.finished_at):
        try:
            found.append(datetime.fromisoformat(recorded))
        except ValueError:
            pass
    return found


# -- checking --------------------------------------------------------------------------------------


def _check_cells(
    recorded: NotebookNode,
    executed: NotebookNode,
    stop: tuple[int, str] | None,
    check: bool,
    anchors: Sequence[datetime],
    paths: Sequence[str],
) -> tuple[CellCheck, ...]:
    checks = []
    for index, (old, new) in enumerate(zip(recorded.cells, executed.cells, strict=True)):  # executed is a copy
        if old.get("cell_type") != "code":
            continue
        meta = read_cell(old, CellMetadata)
        number = meta.round if meta.round is not None else 0 if meta.role == "setup" else None
        task = read_cell(old, PlanCellMetadata).node  # a plan notebook's cell: its task
        status: CheckStatus
        if SKIP_TAG in old.get("metadata", {}).get("tags", []):
            why = f" (recorded {meta.status})" if meta.status is not None else ""
            status, detail = "skipped", f"tagged {SKIP_TAG}{why}"
        elif not old.source.strip():
            status, detail = "skipped", "empty cell"
        elif stop is not None and index == stop[0]:
            status, detail = "error", stop[1]
        elif stop is not None and index > stop[0]:
            status, detail = "skipped", f"not run: the replay stopped at cell {stop[0]}"
        elif not check:
            status, detail = "executed", ""
        elif is_agent_cell(old.source):
            status, detail = _check_agent_cell(old, new, anchors, paths)
        else:
            difference = compare_outputs(old.get("outputs", []), new.get("outputs", []), anchors=anchors, paths=paths)
            status, detail = ("match", "") if difference is None else ("mismatch", difference)
            status, detail = _expected(status, detail, meta, new)
        checks.append(CellCheck(index, number, status, detail, task))
    return tuple(checks)


def _check_agent_cell(
    old: NotebookNode, new: NotebookNode, anchors: Sequence[datetime], paths: Sequence[str]
) -> tuple[CheckStatus, str]:
    """``recorded`` when the magic said it was replaying and showed what the cell recorded, as it shows it."""
    outputs = new.get("outputs", [])
    shown = [out for out in outputs if not is_notice(out)]
    if len(shown) == len(outputs):
        return "mismatch", "the %%agent cell did not show its recorded run (no replay note)"
    expected = [
        {"output_type": "display_data", "data": shown_recorded(out).data, "metadata": {}}
        for out in old.get("outputs", [])
    ]
    difference = compare_outputs(expected, shown, anchors=anchors, paths=paths)
    return ("recorded", REPLAYED_NOTE) if difference is None else ("mismatch", difference)


def _expected(status: CheckStatus, detail: str, meta: CellMetadata, new: NotebookNode) -> tuple[CheckStatus, str]:
    """A cell the export marked as reading what a skipped cell left, failing on exactly that, is expected.

    Only a ``NameError`` on one of the recorded names qualifies: any other difference stays a mismatch.
    """
    names = meta.unreplayed
    if status != "mismatch" or not names:
        return status, detail
    errors = [out for out in new.get("outputs", []) if out.get("output_type") == "error"]
    if (
        errors
        and errors[-1].get("ename") == "NameError"
        and any(f"'{n}'" in str(errors[-1].get("evalue")) for n in names)
    ):
        return "expected", f"reads {', '.join(names)}, left by a cell the replay skips (timed out or crashed)"
    return status, detail


def compare_outputs(
    recorded: Sequence[dict[str, Any]],
    replayed: Sequence[dict[str, Any]],
    *,
    anchors: Sequence[datetime] = (),
    paths: Sequence[str] = (),
) -> str | None:
    """None when two cells' outputs agree after normalisation, else the first difference in words."""
    old_streams, old_items = _summary(recorded, anchors, paths)
    new_streams, new_items = _summary(replayed, anchors, paths)
    for name in sorted(old_streams.keys() | new_streams.keys()):
        difference = _text_difference(old_streams.get(name, ""), new_streams.get(name, ""))
        if difference:
            return f"{name}: {difference}"
    if [item[0] for item in old_items] != [item[0] for item in new_items]:
        return f"outputs: recorded {_kinds(old_items)} but replayed {_kinds(new_items)}"
    for number, (old, new) in enumerate(zip(old_items, new_items, strict=True), start=1):
        difference = _item_difference(old, new)
        if difference:
            return f"output {number} ({old[0]}): {difference}"
    return None


def _summary(
    outputs: Sequence[dict[str, Any]], anchors: Sequence[datetime], paths: Sequence[str]
) -> tuple[dict[str, str], list[tuple[Any, ...]]]:
    """Streams joined per name, and the other outputs as (kind, MIME types, text/plain, PNG size)."""
    streams: dict[str, str] = {}
    items: list[tuple[Any, ...]] = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            streams[out.get("name", "")] = streams.get(out.get("name", ""), "") + _joined(out.get("text"))
        elif kind in ("display_data", "execute_result"):
            data = out.get("data", {})
            text = normalise_text(_joined(data.get("text/plain")), anchors=anchors, paths=paths)
            size = png_size(_joined(data["image/png"]).replace("\n", "")) if "image/png" in data else None
            items.append((kind, tuple(sorted(data)), text, size))
        elif kind == "error":
            items.append(("error", out.get("ename", "")))
    return {name: normalise_text(text, anchors=anchors, paths=paths) for name, text in streams.items()}, items


def _item_difference(old: tuple[Any, ...], new: tuple[Any, ...]) -> str:
    if old[0] == "error":
        return "" if old[1] == new[1] else f"recorded {old[1]} but replayed {new[1]}"
    if old[1] != new[1]:
        return f"recorded types {', '.join(old[1])} but replayed {', '.join(new[1])}"
    if old[3] != new[3]:
        sizes = old[3], new[3]
        if None in sizes or any(abs(a - b) > 1 for a, b in zip(*sizes, strict=True)):
            return f"image size: recorded {_size(old[3])} but replayed {_size(new[3])}"
    return _text_difference(old[2], new[2])


def _text_difference(old: str, new: str) -> str:
    if old == new:
        return ""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    for a, b in zip(old_lines, new_lines, strict=False):  # the first differing line; lengths next
        if a != b:
            return f"recorded {_clip(a)} but replayed {_clip(b)}"
    if len(old_lines) != len(new_lines):
        return f"recorded {len(old_lines)} lines but replayed {len(new_lines)}"
    return "differs in whitespace"


def _kinds(items: list[tuple[Any, ...]]) -> str:
    return "[" + ", ".join(item[0] + (" (image)" if len(item) > 3 and item[3] else "") for item in items) + "]"


def _size(size: tuple[int, int] | None) -> str:
    return f"{size[0]}x{size[1]}" if size else "none"


def _clip(line: str, limit: int = 60) -> str:
    return repr(line if len(line) <= limit else line[: limit - 3] + "...")


def _joined(value: Any) -> str:
    if value is None:
        return ""
    return "".join(value) if isinstance(value, list) else str(value)
