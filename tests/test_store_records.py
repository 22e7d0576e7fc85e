"""The service's store: typed records read from memory and written behind, in order, by one thread; a
restart reads back exactly what was saved. Its records live beside each thread's workspace; an older
data dir's notebooks move out of the workspaces, through the door (a link there leads nowhere)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kernel_agent.server.records import GeneratedFile, RunRecord, ThreadRecord, public
from kernel_agent.server.store import NOTEBOOK, Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "data")
    opened.load()
    yield opened
    opened.close()


def thread(store: Store, thread_id: str) -> Path:
    store.save_thread(ThreadRecord(id=thread_id, owner="o", task="t", created_at="1", updated_at="1"))
    store.prepare(thread_id, f"run_{thread_id}")
    store.flush()
    return store.workspace(thread_id)


def test_saves_land_in_order_and_a_restart_reads_them_back(store: Store, tmp_path: Path) -> None:
    run = RunRecord(id="run_1", owner="o", thread_id="thread_1", task="t", created_at="2026-11-25")
    for rounds in range(1, 51):  # many saves of one record: the last one wins on disk too
        run.rounds = rounds
        store.save_run(run)
    run.files.append(GeneratedFile(name="out.csv", size=3))
    run.status = "completed"
    store.save_run(run)
    assert store.run("run_1") is run  # memory answers at once
    store.flush()
    again = Store(tmp_path / "data")
    again.load()
    try:
        assert again.run("run_1") == run and again.run("run_1").files[0].name == "out.csv"
        assert again.run("../etc") is None
    finally:
        again.close()


def test_notebooks_in_an_old_workspace_move_beside_it(store: Store, tmp_path: Path) -> None:
    old = thread(store, "thread_old")
    (old / NOTEBOOK).write_text('{"cells": []}')
    (old / "analysis.clean.ipynb").write_text('{"clean": 1}')
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST SECRET")
    linked = thread(store, "thread_link")
    (linked / NOTEBOOK).symlink_to(secret)  # planted by a kernel before the upgrade
    current = thread(store, "thread_new")
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
    assert RunRecord(id="r", owner="o", thread_id="t", task="t", created_at="2026-11-25T12:00:00").elapsed_s(now) == 30.0
    assert RunRecord(id="r", owner="o", thread_id="t", task="t", created_at="not a time").elapsed_s(now) is None
