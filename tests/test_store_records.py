"""The service's store: typed records read from memory and written behind, in order, by one task into
the database (SQLite by default); a restart reads back exactly what was saved. A data dir from before
the database (JSON records, JSONL events) is imported on first start. Its records live beside each
thread's workspace; an older data dir's notebooks move out of the workspaces, through the door (a link
there leads nowhere)."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from postgres import PostgresServer

from kernel_agent.errors import ConfigError
from kernel_agent.server.database import DATABASE_FILE, database_url
from kernel_agent.server.records import FileRecord, GeneratedFile, RunRecord, ThreadRecord, public
from kernel_agent.server.store import NOTEBOOK, Store


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    running = asyncio.new_event_loop()
    yield running
    running.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database(request: pytest.FixtureRequest) -> str | None:
    """None (the embedded SQLite default) or a fresh database on a real PostgreSQL."""
    if request.param == "sqlite":
        return None
    postgres: PostgresServer = request.getfixturevalue("postgres")
    return postgres.database(f"db_{secrets.token_hex(6)}")


@pytest.fixture
def store(tmp_path: Path, loop: asyncio.AbstractEventLoop, database: str | None) -> Iterator[Store]:
    opened = Store(tmp_path / "data", database)
    loop.run_until_complete(opened.load())
    yield opened
    loop.run_until_complete(opened.close())


def thread(store: Store, loop: asyncio.AbstractEventLoop, thread_id: str) -> Path:
    store.save_thread(ThreadRecord(id=thread_id, owner="o", task="t", created_at="1", updated_at="1"))
    store.prepare(thread_id, f"run_{thread_id}")
    loop.run_until_complete(store.flush())
    return store.workspace(thread_id)


def test_saves_land_in_order_and_a_restart_reads_them_back(
    store: Store, tmp_path: Path, database: str | None, loop: asyncio.AbstractEventLoop
) -> None:
    async def work() -> RunRecord:
        run = RunRecord(id="run_1", owner="o", thread_id="thread_1", task="t", created_at="2026-11-25")
        for rounds in range(1, 51):  # many saves of one record: the last one wins in the database too
            run.rounds = rounds
            store.save_run(run)
        run.files.append(GeneratedFile(name="out.csv", size=3))
        run.status = "completed"
        store.save_run(run)
        assert store.run("run_1") is run  # memory answers at once
        for seq in (1, 2, 3):
            await store.append_event("run_1", seq, {"event": "notice", "n": seq})
        await store.flush()
        return run

    run = loop.run_until_complete(work())
    assert (tmp_path / "data" / DATABASE_FILE).is_file() == (database is None)
    loop.run_until_complete(store.close())
    again = Store(tmp_path / "data", database)
    loop.run_until_complete(again.load())
    try:
        loaded = again.run("run_1")
        assert loaded == run and loaded is not None and loaded.files[0].name == "out.csv"
        assert again.run("../etc") is None
        assert [e["n"] for e in loop.run_until_complete(again.events("run_1"))] == [1, 2, 3]
        assert [e["n"] for e in loop.run_until_complete(again.events("run_1", after=2))] == [3]
        assert loop.run_until_complete(again.ready()) is None
    finally:
        loop.run_until_complete(again.close())


def test_an_event_position_is_taken_once(store: Store, loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(store.append_event("run_x", 1, {"event": "first"}))
    with pytest.raises(Exception, match="(?i)unique|constraint"):
        loop.run_until_complete(store.append_event("run_x", 1, {"event": "again"}))
    assert loop.run_until_complete(store.events("run_x")) == [{"event": "first"}]


def test_a_json_data_dir_from_before_the_database_is_imported_once(
    tmp_path: Path, database: str | None, loop: asyncio.AbstractEventLoop
) -> None:
    data = tmp_path / "data"  # today's layout, as the JSON store wrote it
    upload = FileRecord(id="file-1", owner="o", filename="kept.csv", bytes=4, purpose="assistants", created_at=1)
    thread_record = ThreadRecord(
        id="thread-1",
        owner="o",
        task="t",
        status="completed",
        runs=["run-1"],
        created_at="2026-01-01",
        updated_at="2026-01-01",
    )
    run = RunRecord(
        id="run-1",
        owner="o",
        thread_id="thread-1",
        task="t",
        status="completed",
        answer="42",
        rounds=1,
        created_at="2026-01-01",
    )
    for folder, name, record in (
        (data / "files" / "file-1", "meta.json", upload),
        (data / "threads" / "thread-1", "thread.json", thread_record),
        (data / "runs" / "run-1", "run.json", run),
    ):
        folder.mkdir(parents=True)
        (folder / name).write_text(record.model_dump_json())
    (data / "files" / "file-1" / "kept.csv").write_text("a\n1\n")
    (data / "runs" / "broken").mkdir()
    (data / "runs" / "broken" / "run.json").write_text("{not json")
    events = [{"event": "run_started"}, {"event": "finished", "run": {"answer": "42"}}]
    (data / "runs" / "run-1" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + '{"torn')

    first = Store(data, database)
    loop.run_until_complete(first.load())
    try:
        assert first.file("file-1") == upload and first.file_content(upload).read_text() == "a\n1\n"
        assert first.thread("thread-1") == thread_record and first.run("run-1") == run
        assert len(first.runs()) == 1  # the broken record is skipped, as the JSON store skipped it
        assert loop.run_until_complete(first.events("run-1")) == events  # the torn last line dropped
        first.save_run(run.model_copy(update={"answer": "changed"}))
    finally:
        loop.run_until_complete(first.close())
    second = Store(data, database)  # the JSON files are still there, but the database is the record now
    loop.run_until_complete(second.load())
    try:
        changed = second.run("run-1")
        assert changed is not None and changed.answer == "changed"
        assert len(loop.run_until_complete(second.events("run-1"))) == 2
    finally:
        loop.run_until_complete(second.close())


def test_database_urls_are_checked_and_passwords_never_shown(tmp_path: Path) -> None:
    assert database_url(None, tmp_path).drivername == "sqlite+aiosqlite"
    assert database_url("postgresql://u:pw@db/x", tmp_path).drivername == "postgresql+asyncpg"
    with pytest.raises(ConfigError, match="sqlite:///PATH or postgresql") as refused:
        database_url("mysql://u:hunter2@db/x", tmp_path)
    assert "hunter2" not in str(refused.value)
    with pytest.raises(ConfigError, match="needs a file"):
        database_url("sqlite://", tmp_path)


def test_an_unreachable_database_is_a_clear_error(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> None:
    unreachable = Store(tmp_path / "data", "postgresql://user:hunter2@127.0.0.1:1/none")
    with pytest.raises(ConfigError, match="cannot migrate the database") as refused:
        loop.run_until_complete(unreachable.load())
    assert "hunter2" not in str(refused.value)


def test_notebooks_in_an_old_workspace_move_beside_it(
    store: Store, tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    old = thread(store, loop, "thread_old")
    (old / NOTEBOOK).write_text('{"cells": []}')
    (old / "analysis.clean.ipynb").write_text('{"clean": 1}')
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST SECRET")
    linked = thread(store, loop, "thread_link")
    (linked / NOTEBOOK).symlink_to(secret)  # planted by a kernel before the upgrade
    current = thread(store, loop, "thread_new")
    store.notebook("thread_new").write_text("kept")
    (current / NOTEBOOK).write_text("stale copy in the workspace")

    assert store.move_records_out() == 2
    assert store.notebook("thread_old").read_text() == '{"cells": []}'
    assert (store.thread_dir("thread_old") / "analysis.clean.ipynb").read_text() == '{"clean": 1}'
    assert not store.notebook("thread_link").exists()  # the link was never followed
    assert store.notebook("thread_new").read_text() == "kept"  # a record beside the workspace wins
    assert store.move_records_out() == 0  # once only


def test_a_runs_elapsed_time_is_its_recorded_start_to_finish_or_to_now() -> None:
    now = datetime(2026, 11, 25, 12, 0, 30, tzinfo=UTC)
    run = RunRecord(id="run_1", owner="o", thread_id="thread_1", task="t", created_at="2026-11-25T12:00:00.000+00:00")
    assert run.elapsed_s(now) == 30.0  # running: to the moment of asking
    run.finished_at = "2026-11-25T12:00:12.250+00:00"
    assert run.elapsed_s(now) == 12.25 and public(run)["elapsed_s"] == 12.25  # finished: what was recorded
    assert (
        RunRecord(id="r", owner="o", thread_id="t", task="t", created_at="2026-11-25T12:00:00").elapsed_s(now) == 30.0
    )
    assert RunRecord(id="r", owner="o", thread_id="t", task="t", created_at="not a time").elapsed_s(now) is None
