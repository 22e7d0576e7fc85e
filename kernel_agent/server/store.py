"""The service's state on disk: uploaded files, threads, runs and each run's events.

Owns the layout under the data dir and nothing else (no kernels, no HTTP)::

    DATA/files/<file-id>/meta.json + <name>      an upload under its (sanitised) file name
    DATA/threads/<thread-id>/thread.json         who owns it, its runs in order
    DATA/threads/<thread-id>/analysis.ipynb      its notebook (+ .clean.ipynb), out of the kernel's reach
    DATA/threads/<thread-id>/workspace/          the kernel's cwd: data files, generated files
    DATA/runs/<run-id>/run.json                  a run's record (status, answer, files)
    DATA/runs/<run-id>/events.jsonl              every event of the run, one JSON line each

Records are plain JSON dicts written atomically (temp file + rename), so a
server killed at any moment leaves each record whole: old or new, never half.
Events are appended and flushed line by line; a torn last line is dropped on read.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import KernelAgentError
from ..kernel.door import Door

__all__ = ["NOTEBOOK", "Store", "new_id"]

NOTEBOOK = "analysis.ipynb"  # a thread's notebook, in its folder beside the workspace

Record = dict[str, Any]


def new_id(prefix: str) -> str:
    """A fresh unguessable id such as ``run-3f9a…`` (ids double as the only handle a client has)."""
    return f"{prefix}-{secrets.token_hex(12)}"


def _safe_id(value: str) -> bool:
    return bool(value) and all(c.isalnum() or c in "-_" for c in value) and len(value) < 100


class Store:
    """Files, threads and runs of one data dir. Every method is plain, blocking file I/O."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        for part in ("files", "threads", "runs"):
            (self.root / part).mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"<Store {self.root}>"

    # ----------------------------------------------------------------- paths
    def file_dir(self, file_id: str) -> Path:
        return self.root / "files" / file_id

    def thread_dir(self, thread_id: str) -> Path:
        return self.root / "threads" / thread_id

    def workspace(self, thread_id: str) -> Path:
        return self.thread_dir(thread_id) / "workspace"

    def notebook(self, thread_id: str) -> Path:
        return self.thread_dir(thread_id) / NOTEBOOK

    def move_records_out(self) -> int:
        """Copy each thread's notebooks out of its workspace (where earlier servers kept them) to beside
        it; return how many. Read through the door: a link there leads nowhere."""
        moved = 0
        for record in self.threads():
            folder = Door(self.thread_dir(record["id"]))
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

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    # ----------------------------------------------------------------- records
    def save_file(self, record: Record, content: Path) -> None:
        """Move the uploaded ``content`` (a temp file on the same disk) into place, then its record."""
        folder = self.file_dir(record["id"])
        folder.mkdir(parents=True, exist_ok=False)
        os.replace(content, folder / record["filename"])
        _write_json(folder / "meta.json", record)

    def file(self, file_id: str) -> Record | None:
        return _read_json(self.file_dir(file_id) / "meta.json") if _safe_id(file_id) else None

    def file_content(self, record: Record) -> Path:
        return self.file_dir(record["id"]) / record["filename"]

    def files(self) -> list[Record]:
        return _all(self.root / "files", "meta.json")

    def delete_file(self, record: Record) -> None:
        folder = self.file_dir(record["id"])
        for name in ("meta.json", record["filename"]):  # the record first: a half-deleted file is simply gone
            (folder / name).unlink(missing_ok=True)
        folder.rmdir()

    def save_thread(self, record: Record) -> None:
        folder = self.thread_dir(record["id"])
        (folder / "workspace").mkdir(parents=True, exist_ok=True)
        _write_json(folder / "thread.json", record)

    def thread(self, thread_id: str) -> Record | None:
        return _read_json(self.thread_dir(thread_id) / "thread.json") if _safe_id(thread_id) else None

    def threads(self) -> list[Record]:
        return _all(self.root / "threads", "thread.json")

    def delete_thread(self, record: Record) -> None:
        """Remove the thread's record first (then it is gone for every reader), then its runs and files."""
        (self.thread_dir(record["id"]) / "thread.json").unlink(missing_ok=True)
        for run_id in record.get("runs", []):
            shutil.rmtree(self.run_dir(run_id), ignore_errors=True)
        shutil.rmtree(self.thread_dir(record["id"]), ignore_errors=True)

    def save_run(self, record: Record) -> None:
        folder = self.run_dir(record["id"])
        folder.mkdir(parents=True, exist_ok=True)
        _write_json(folder / "run.json", record)

    def run(self, run_id: str) -> Record | None:
        return _read_json(self.run_dir(run_id) / "run.json") if _safe_id(run_id) else None

    def runs(self) -> list[Record]:
        return _all(self.root / "runs", "run.json")

    # ----------------------------------------------------------------- events
    def events_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "events.jsonl"

    def events(self, run_id: str) -> list[Record]:
        """The run's recorded events in order (a torn last line, from a kill mid-write, is dropped)."""
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


def _write_json(path: Path, record: Record) -> None:
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out, ensure_ascii=False, indent=1)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _read_json(path: Path) -> Record | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def _all(folder: Path, name: str) -> list[Record]:
    records = [r for r in (_read_json(child / name) for child in folder.iterdir()) if r is not None]
    return sorted(records, key=lambda r: r.get("created_at", ""))
