"""The service's state on disk: uploaded files, threads, runs and each run's events.

Owns the layout under the data dir and nothing else (no kernels, no HTTP)::

    DATA/files/<file-id>/meta.json + <name>      an upload under its (sanitised) file name
    DATA/threads/<thread-id>/thread.json         who owns it, its runs in order
    DATA/threads/<thread-id>/analysis.ipynb      its notebook (+ .clean.ipynb), out of the kernel's reach
    DATA/threads/<thread-id>/workspace/          the kernel's cwd: data files, generated files
    DATA/runs/<run-id>/run.json                  a run's record (status, answer, files)
    DATA/runs/<run-id>/events.jsonl              every event of the run, one JSON line each

Records are typed (``records.py``), read once at start (``load``, in a worker thread) and kept in
memory, so a read never touches the disk. Each save updates memory at once and queues the record's
JSON for one writer thread, which writes it atomically (temp file + rename) in the order saved, so a
server killed at any moment leaves each record whole: old or new, never half. Nothing here does file
work on the caller's thread except ``load``, ``prepare``, ``add_file`` and ``flush``, which the
service calls off its event loop. Events are appended and flushed line by line (``threads.RunLog``);
a torn last line is dropped on read.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from ..errors import KernelAgentError
from ..kernel.door import Door
from .records import FileRecord, RunRecord, ThreadRecord

__all__ = ["NOTEBOOK", "Store", "new_id"]

NOTEBOOK = "analysis.ipynb"  # a thread's notebook, in its folder beside the workspace

R = TypeVar("R", FileRecord, ThreadRecord, RunRecord)


def new_id(prefix: str) -> str:
    """A fresh unguessable id such as ``run-3f9a…`` (ids double as the only handle a client has)."""
    return f"{prefix}-{secrets.token_hex(12)}"


def _safe_id(value: str) -> bool:
    return bool(value) and all(c.isalnum() or c in "-_" for c in value) and len(value) < 100


class Store:
    """Files, threads and runs of one data dir: read from memory, written behind by one thread."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self._files: dict[str, FileRecord] = {}
        self._threads: dict[str, ThreadRecord] = {}
        self._runs: dict[str, RunRecord] = {}
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-agent-store")
        self._last: Future[None] | None = None

    def __repr__(self) -> str:
        return f"<Store {self.root} {len(self._threads)} threads {len(self._runs)} runs>"

    # ----------------------------------------------------------------- life
    def load(self) -> None:
        """Make the layout and read every record into memory (blocking: call it off the event loop)."""
        for part in ("files", "threads", "runs", "tmp"):
            (self.root / part).mkdir(parents=True, exist_ok=True)
        self._files = _all(self.root / "files", "meta.json", FileRecord)
        self._threads = _all(self.root / "threads", "thread.json", ThreadRecord)
        self._runs = _all(self.root / "runs", "run.json", RunRecord)

    def flush(self) -> None:
        """Wait until every queued write is on disk (blocking)."""
        if self._last is not None:
            self._last.result()

    def close(self) -> None:
        """Finish the queued writes and stop the writer (blocking)."""
        self.flush()
        self._writer.shutdown(wait=True)

    def _queue(self, work: Callable[..., Any], *args: Any) -> None:
        self._last = self._writer.submit(work, *args)

    def _save(self, table: dict[str, R], record: R, path: Path) -> None:
        """Keep ``record`` in memory now and queue its JSON for ``path``."""
        table[record.id] = record
        self._queue(_write_json, path, record.model_dump(mode="json"))

    # ----------------------------------------------------------------- paths
    def file_dir(self, file_id: str) -> Path:
        return self.root / "files" / file_id

    def thread_dir(self, thread_id: str) -> Path:
        return self.root / "threads" / thread_id

    def workspace(self, thread_id: str) -> Path:
        return self.thread_dir(thread_id) / "workspace"

    def notebook(self, thread_id: str) -> Path:
        return self.thread_dir(thread_id) / NOTEBOOK

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def events_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "events.jsonl"

    def prepare(self, thread_id: str, run_id: str) -> None:
        """Make a run's folders before its kernel and its event log need them (blocking)."""
        self.workspace(thread_id).mkdir(parents=True, exist_ok=True)
        self.run_dir(run_id).mkdir(parents=True, exist_ok=True)

    def move_records_out(self) -> int:
        """Copy each thread's notebooks out of its workspace (where earlier servers kept them) to beside
        it; return how many (blocking). Read through the door: a link there leads nowhere."""
        moved = 0
        for record in self._threads.values():
            folder = Door(self.thread_dir(record.id))
            for name in (NOTEBOOK, NOTEBOOK.replace(".ipynb", ".clean.ipynb")):
                if folder.entry_kind(name) is not None:
                    continue
                try:
                    _size, chunks = Door(folder.root / "workspace").stream(name)
                    folder.write_from(name, chunks)
                except (OSError, KernelAgentError):
                    continue
                moved += 1
        return moved

    # ----------------------------------------------------------------- files
    def add_file(self, record: FileRecord, content: Path) -> None:
        """Move the uploaded ``content`` (a temp file on the same disk) into place, then its record
        (blocking: the file is there when this returns)."""
        folder = self.file_dir(record.id)
        folder.mkdir(parents=True, exist_ok=False)
        os.replace(content, folder / record.filename)
        _write_json(folder / "meta.json", record.model_dump(mode="json"))
        self._files[record.id] = record

    def file(self, file_id: str) -> FileRecord | None:
        return self._files.get(file_id) if _safe_id(file_id) else None

    def file_content(self, record: FileRecord) -> Path:
        return self.file_dir(record.id) / record.filename

    def files(self) -> list[FileRecord]:
        return _ordered(self._files)

    def delete_file(self, record: FileRecord) -> None:
        self._files.pop(record.id, None)
        self._queue(_remove_file, self.file_dir(record.id), record.filename)

    # ----------------------------------------------------------------- threads and runs
    def save_thread(self, record: ThreadRecord) -> None:
        self._save(self._threads, record, self.thread_dir(record.id) / "thread.json")

    def thread(self, thread_id: str) -> ThreadRecord | None:
        return self._threads.get(thread_id) if _safe_id(thread_id) else None

    def threads(self) -> list[ThreadRecord]:
        return _ordered(self._threads)

    def delete_thread(self, record: ThreadRecord) -> None:
        """Forget the thread and its runs at once, then remove their folders behind."""
        self._threads.pop(record.id, None)
        for run_id in record.runs:
            self._runs.pop(run_id, None)
        self._queue(_remove_thread, self.thread_dir(record.id), [self.run_dir(run_id) for run_id in record.runs])

    def save_run(self, record: RunRecord) -> None:
        self._save(self._runs, record, self.run_dir(record.id) / "run.json")

    def run(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id) if _safe_id(run_id) else None

    def runs(self) -> list[RunRecord]:
        return _ordered(self._runs)

    # ----------------------------------------------------------------- events
    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's recorded events in order (blocking; a torn last line, from a kill mid-write, is dropped)."""
        path = self.events_path(run_id)
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break
        return out


def _write_json(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out, ensure_ascii=False, indent=1)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _remove_file(folder: Path, filename: str) -> None:
    for name in ("meta.json", filename):  # the record first: a half-deleted file is simply gone
        (folder / name).unlink(missing_ok=True)
    folder.rmdir()


def _remove_thread(folder: Path, runs: list[Path]) -> None:
    (folder / "thread.json").unlink(missing_ok=True)  # the record first: then it is gone for a restart too
    for run in runs:
        shutil.rmtree(run, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)


def _all(folder: Path, name: str, kind: type[R]) -> dict[str, R]:
    records: dict[str, R] = {}
    for child in folder.iterdir():
        try:
            record = kind.model_validate_json((child / name).read_bytes())
        except (FileNotFoundError, NotADirectoryError, ValidationError):
            continue
        records[record.id] = record
    return records


def _ordered(records: dict[str, R]) -> list[R]:
    return sorted(records.values(), key=lambda r: str(r.created_at))
