"""Replicas: two service processes on one real PostgreSQL (started by the test) and one shared data dir.
Any replica serves any request: a run started through A is followed by SSE on B, resumed there with
``Last-Event-ID``, its records and notebook read there, and continued there by a follow-up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_server import OpenAIServer, Reply, python_call
from postgres import PostgresServer
from replicas import Replica, follow

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture
def pair(postgres: PostgresServer, openai_server: OpenAIServer, tmp_path: Path,
         request: pytest.FixtureRequest) -> Iterator[tuple[Replica, Replica]]:
    database = postgres.database(request.node.name.replace("[", "_").replace("]", "").lower()[:60])
    with Replica(tmp_path / "data", openai_server.base_url, database=database) as a, \
            Replica(tmp_path / "data", openai_server.base_url, database=database) as b:
        yield a, b


def test_a_run_started_on_one_replica_is_followed_and_continued_on_the_other(
    pair: tuple[Replica, Replica], openai_server: OpenAIServer
) -> None:
    a, b = pair
    upload = b.client.post("/v1/files", files={"file": ("n.csv", b"x\n1\n2\n")}).json()
    openai_server.add(Reply("Sum.", tool_calls=(python_call("total = int(pd.read_csv(data.n).x.sum())\nprint(total)"),)),
                      Reply("The total is 3.", pause=1.0))
    run = a.client.post("/v1/runs", json={"task": "Sum x", "file_ids": [upload["id"]]}).json()  # B's upload, on A

    on_b = follow(b.client, run["id"])  # live from the database, while A runs it
    on_a = follow(a.client, run["id"])
    assert on_b == on_a and on_b[-1][1]["event"] == "finished" and on_b[-1][1]["run"]["answer"] == "The total is 3."
    assert [i for i, _ in on_b] == list(range(1, len(on_b) + 1))
    resumed = follow(b.client, run["id"], after=3)  # Last-Event-ID from A's stream, on B
    assert resumed == on_a[3:]

    record = b.client.get(f"/v1/runs/{run['id']}").json()
    assert record["status"] == "completed" and record["rounds"] == 2
    assert [t["id"] for t in b.client.get("/v1/threads").json()["threads"]] == [run["thread_id"]]
    assert "total = int" in b.client.get(record["notebook_url"]).text  # the shared data dir

    openai_server.add(Reply("Again.", tool_calls=(python_call("print(total * 10)"),)), Reply("30."))
    more = b.client.post("/v1/runs", json={"task": "Times ten", "thread_id": run["thread_id"]}).json()
    executed = [e for _, e in follow(a.client, more["id"]) if e["event"] == "execution_finished"]
    assert executed[-1]["result"]["stdout"] == "30\n"  # B rebuilt A's variables from the notebook
    assert a.client.get(f"/v1/runs/{more['id']}").json()["status"] == "completed"
    assert a.client.get(f"/v1/threads/{run['thread_id']}").json()["runs"][-1]["id"] == more["id"]
