"""The service's records live beside each thread's workspace; an older data dir's notebooks move out of
the workspaces, through the door (a link there leads nowhere)."""

from __future__ import annotations

from pathlib import Path

from kernel_agent.server.store import NOTEBOOK, Store


def thread(store: Store, thread_id: str) -> Path:
    store.save_thread({"id": thread_id, "object": "thread", "owner": "o", "runs": []})
    return store.workspace(thread_id)


def test_notebooks_in_an_old_workspace_move_beside_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "data")
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
