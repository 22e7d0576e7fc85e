"""A data dir from before the database: its JSON records and JSONL event logs, read once to be imported.

Owns the old layout and its import into the database, once (``import_once``)::

    DATA/files/<file-id>/meta.json        DATA/threads/<thread-id>/thread.json
    DATA/runs/<run-id>/run.json           DATA/runs/<run-id>/events.jsonl

A record that does not validate is skipped, as the old store skipped it; a torn last event line (a
kill mid-write) is dropped. The old files stay where they are: the database is the record from then on.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from .._loop import in_thread
from .database import row_of, tables, upsert
from .records import FileRecord, RunRecord, ThreadRecord

__all__ = ["Found", "import_once", "read"]

log = logging.getLogger(__name__)

R = TypeVar("R", FileRecord, ThreadRecord, RunRecord)


@dataclass(frozen=True)
class Found:
    """What an old data dir holds."""

    files: list[FileRecord] = field(default_factory=list)
    threads: list[ThreadRecord] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.files) + len(self.threads) + len(self.runs)


async def import_once(engine: AsyncEngine, root: Path) -> None:
    """Import the old records and event logs under ``root`` into the database, unless done before."""
    meta = tables["meta"]
    async with engine.connect() as connection:
        if (await connection.execute(select(meta.c.value).where(meta.c.key == "json_imported"))).first():
            return
    found = await in_thread(read, root)
    async with engine.begin() as connection:
        for name, records in (("files", found.files), ("threads", found.threads), ("runs", found.runs)):
            for record in records:
                await upsert(connection, name, row_of(record), ("id",))
        for run_id, events in found.events.items():
            for seq, event in enumerate(events, 1):
                body = json.dumps(event, ensure_ascii=False, default=str)
                await upsert(connection, "events", {"run_id": run_id, "seq": seq, "body": body}, ("run_id", "seq"))
        await upsert(connection, "meta", {"key": "json_imported", "value": str(found.count)}, ("key",))
    if found.count:
        log.info("imported %d records of a JSON data dir into the database", found.count)


def read(root: Path) -> Found:
    """Every record and event log under ``root`` in the old layout (blocking; empty when there is none)."""
    runs = _all(root / "runs", "run.json", RunRecord)
    return Found(
        files=_all(root / "files", "meta.json", FileRecord),
        threads=_all(root / "threads", "thread.json", ThreadRecord),
        runs=runs,
        events={run.id: _events(root / "runs" / run.id / "events.jsonl") for run in runs},
    )


def _all(folder: Path, name: str, kind: type[R]) -> list[R]:
    if not folder.is_dir():
        return []
    records = []
    for child in sorted(folder.iterdir()):
        try:
            records.append(kind.model_validate_json((child / name).read_bytes()))
        except (FileNotFoundError, NotADirectoryError, ValidationError):
            continue
    return records


def _events(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out
