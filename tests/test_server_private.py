"""Issue 41: the service's files are its owner's alone, whatever umask ``serve`` is started with.

``serve`` runs as a real process started with umask 000 (the most permissive), on the embedded SQLite file
and on a real PostgreSQL: after an upload and a run whose code writes files, every file under the data dir
(the database and its journals, uploads, thread folders, notebooks, what the kernel wrote) is ``0600`` or
stricter and every folder ``0700``. Then the data dir is loosened as an older version left it
(``0755``/``0644``) and ``serve`` started again takes it back, and says so in its log.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from openai_server import OpenAIServer, Reply, python_call
from postgres import PostgresServer
from replicas import Replica, follow
from sqlalchemy.engine import make_url

from kernel_agent.kernel.door import Door
from kernel_agent.server.private import private_database, tighten

WRITES = "import os\nos.makedirs('charts', exist_ok=True)\nopen('charts/out.txt', 'w').write('x')\nprint('wrote')"


def entries(data: Path, *, workspaces: bool = True) -> dict[Path, int]:
    """Every file and folder under ``data`` (links neither listed nor followed) with its mode bits."""
    found = {data: stat.S_IMODE(data.lstat().st_mode)}
    for folder, folders, files in os.walk(data):
        for name in (*folders, *files):
            path = Path(folder) / name
            if not path.is_symlink():
                found[path] = stat.S_IMODE(path.lstat().st_mode)
        if not workspaces and Path(folder).name.startswith("thread"):
            folders[:] = [f for f in folders if f != "workspace"]
    return found


def others_may(found: dict[Path, int]) -> dict[str, str]:
    return {str(path): oct(mode) for path, mode in found.items() if mode & 0o077}


@pytest.mark.kernel
@pytest.mark.postgresql
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_everything_serve_writes_is_owner_only_and_an_older_data_dir_is_tightened(
    backend: str, openai_server: OpenAIServer, postgres: PostgresServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    database = f"sqlite:///{data}/kernel-agent.db" if backend == "sqlite" else postgres.database("private_modes")
    openai_server.add(Reply("Writing.", tool_calls=(python_call(WRITES),)), Reply("Done."))
    with Replica(data, openai_server.base_url, database=database, umask=0) as replica:
        uploaded = replica.client.post("/v1/files", files={"file": ("sales.csv", b"a,b\n1,2\n", "text/csv")})
        assert uploaded.status_code == 200, uploaded.text
        run = replica.client.post("/v1/runs", json={"task": "write", "file_ids": [uploaded.json()["id"]]}).json()
        follow(replica.client, run["id"])
        assert replica.client.get(f"/v1/runs/{run['id']}").json()["status"] == "completed"
    found = entries(data)
    names = {path.name for path in found}
    assert {"sales.csv", "out.txt", "charts", "analysis.ipynb", "workspace"} <= names, names
    if backend == "sqlite":
        assert "kernel-agent.db" in names  # with its -wal and -shm while a server has it open
    assert others_may(found) == {}
    assert all(mode & 0o700 == 0o700 for path, mode in found.items() if path.is_dir())

    for path in found:  # as an older version left it
        path.chmod(0o755 if path.is_dir() else 0o644)
    with Replica(data, openai_server.base_url, database=database, umask=0) as replica:
        assert replica.client.get("/v1/files").status_code == 200
    assert others_may(entries(data, workspaces=False)) == {}
    assert "owner-only" in replica.log.read_text()


def test_tightening_follows_no_link_and_leaves_a_workspaces_contents_to_its_folder(tmp_path: Path) -> None:
    data, outside = tmp_path / "data", tmp_path / "outside.txt"
    workspace = data / "threads" / "thread-1" / "workspace"
    workspace.mkdir(parents=True)
    outside.write_text("not the service's")
    (data / "threads" / "thread-1" / "analysis.ipynb").write_text("{}")
    (workspace / "out.csv").write_text("x")
    (data / "threads" / "link").symlink_to(outside)
    (workspace / "link").symlink_to(outside)
    for path in (outside, data / "threads" / "thread-1" / "analysis.ipynb", workspace / "out.csv"):
        path.chmod(0o644)
    for folder in (data, data / "threads", data / "threads" / "thread-1", workspace):
        folder.chmod(0o755)
    url = make_url(f"sqlite:///{data}/kernel-agent.db")
    assert tighten(data, url) == 5  # four folders and the notebook
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644  # through neither link
    assert stat.S_IMODE((workspace / "out.csv").stat().st_mode) == 0o644  # behind its 0700 folder
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700
    assert tighten(data, url) == 0
    private_database(url)
    assert stat.S_IMODE((data / "kernel-agent.db").stat().st_mode) == 0o600


def test_a_door_write_honours_the_umask_as_a_plain_create_does(tmp_path: Path) -> None:
    before = os.umask(0o077)  # serve's
    try:
        Door(tmp_path).write("copy.csv", b"x", mode=0o444)
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "copy.csv").stat().st_mode) == 0o400
