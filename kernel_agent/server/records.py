"""The service's stored objects, typed: ``FileRecord``, ``ThreadRecord``, ``RunRecord``.

Owns their fields and their shape on disk and on the wire (pydantic models: validated when read back,
``public()`` for clients, without the owner). A run's record changes as it runs (status, rounds,
generated files), so the models are mutable and each change is saved through the store; nothing else
about them (no I/O, no HTTP).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..safe.http import path_url

__all__ = ["FileRecord", "GeneratedFile", "Record", "RunRecord", "ThreadRecord", "public"]


class _Stored(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    owner: str


class FileRecord(_Stored):
    """An upload (OpenAI's file object, plus its owner)."""

    object: Literal["file"] = "file"
    filename: str
    bytes: int
    purpose: str
    created_at: int
    status: str = "processed"


class GeneratedFile(BaseModel):
    """A file a run's code wrote in the workspace."""

    name: str
    size: int


class ThreadRecord(_Stored):
    """A conversation of runs with one workspace (and, while live, one kernel)."""

    object: Literal["thread"] = "thread"
    task: str
    protocol: str | None = None
    sources: list[str] = Field(default_factory=list)  # the operator's live sources it queries, by name
    status: str = "queued"
    runs: list[str] = Field(default_factory=list)
    created_at: str
    updated_at: str


class RunRecord(_Stored):
    """One task answered in a thread: its status as it runs, its answer and the files it wrote."""

    object: Literal["run"] = "run"
    thread_id: str
    task: str
    model: str | None = None  # as the run's ``run_started`` said (None until then)
    file_ids: list[str] = Field(default_factory=list)
    status: str = "running"
    stop_reason: str | None = None
    answer: str | None = None
    error: str | None = None
    created_at: str
    finished_at: str | None = None
    rounds: int = 0
    files: list[GeneratedFile] = Field(default_factory=list)

    def elapsed_s(self, now: datetime) -> float | None:
        """Seconds from the run's recorded start to its recorded finish, or to ``now`` while it runs
        (server time both: a page shows a run's true duration whenever it opens it); None when a
        stored time cannot be read. Raises nothing."""
        try:
            start = _instant(self.created_at)
            end = _instant(self.finished_at) if self.finished_at else now
        except ValueError:
            return None
        return round(max((end - start).total_seconds(), 0.0), 3)


def _instant(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC, as the service writes them. Raises ``ValueError``."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


Record = FileRecord | ThreadRecord | RunRecord


def public(record: Record) -> dict[str, Any]:
    """A record as clients see it: without the owner, with download URLs for runs and threads, and
    a run's ``elapsed_s`` (``RunRecord.elapsed_s`` at the time of asking)."""
    out = record.model_dump(mode="json", exclude={"owner"})
    if isinstance(record, RunRecord | ThreadRecord):
        thread = record.thread_id if isinstance(record, RunRecord) else record.id
        base = f"/v1/threads/{thread}"
        out.update(
            notebook_url=f"{base}/notebook",
            clean_url=f"{base}/notebook/clean",
            html_url=f"{base}/notebook/html",
            zip_url=f"{base}/notebook/zip",
        )
        if isinstance(record, RunRecord):
            out["elapsed_s"] = record.elapsed_s(datetime.now(UTC))
            out["files"] = [{**f, "url": f"{base}/files/{path_url(f['name'])}"} for f in out["files"]]
    return out
