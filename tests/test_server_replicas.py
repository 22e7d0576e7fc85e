"""Replicas: two service processes on one real PostgreSQL (started by the test) and one shared data dir.
Any replica serves any request: a run started through A is followed by SSE on B, resumed there with
``Last-Event-ID``, its records and notebook read there, and continued there by a follow-up. A replica
SIGKILLed mid-round is taken over when its lease expires: the run is marked interrupted with its completed
round kept, nothing is executed or asked twice, and the thread goes on on the other replica; with kernels
on a real Kernel Gateway, that replica adopts the thread's live kernel (its variables intact, no rebuild)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway import KernelGateway
from leaks import kernels_of
from openai_server import OpenAIServer, Reply, python_call
from postgres import PostgresServer
from replicas import Replica, follow

pytestmark = [pytest.mark.kernel, pytest.mark.postgresql]


@pytest.fixture
def pair(
    postgres: PostgresServer, openai_server: OpenAIServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Replica, Replica]]:
    database = postgres.database(request.node.name.replace("[", "_").replace("]", "").lower()[:60])
    with (
        Replica(tmp_path / "data", openai_server.base_url, database=database) as a,
        Replica(tmp_path / "data", openai_server.base_url, database=database) as b,
    ):
        yield a, b


def test_a_run_started_on_one_replica_is_followed_and_continued_on_the_other(
    pair: tuple[Replica, Replica], openai_server: OpenAIServer
) -> None:
    a, b = pair
    upload = b.client.post("/v1/files", files={"file": ("n.csv", b"x\n1\n2\n")}).json()
    openai_server.add(
        Reply("Sum.", tool_calls=(python_call("total = int(pd.read_csv(data.n).x.sum())\nprint(total)"),)),
        Reply("The total is 3.", pause=1.0),
    )
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


def test_a_replica_killed_mid_round_is_taken_over_with_every_completed_round_and_nothing_run_twice(
    postgres: PostgresServer, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    model, database = openai_server, postgres.database("takeover")
    fast = ("--lease-ttl", "2")
    with (
        Replica(tmp_path / "data", model.base_url, database=database, options=fast) as a,
        Replica(tmp_path / "data", model.base_url, database=database, options=fast) as b,
    ):
        model.add(Reply("Set.", tool_calls=(python_call("kept = 41 + 1"),)), Reply("Kept is 42."))
        done = a.client.post("/v1/runs", json={"task": "Set kept"}).json()
        follow(b.client, done["id"])
        model.add(
            Reply("Next.", tool_calls=(python_call("second = kept + 1\nprint('ran once')"),)),
            Reply("never sent", pause=120),
        )
        flying = a.client.post("/v1/runs", json={"task": "More", "thread_id": done["thread_id"]}).json()
        follow(b.client, flying["id"], until="round_finished")  # round 1 is committed, as B sees it
        deadline = time.monotonic() + 30
        while model.remaining and time.monotonic() < deadline:  # round 2 waits on the model: mid-round
            time.sleep(0.05)
        assert model.remaining == 0
        asked = len(model.requests)
        assert b.client.post("/v1/runs", json={"task": "Meanwhile", "thread_id": done["thread_id"]}).status_code == 409
        a.kill()
        deadline = time.monotonic() + 30
        while kernels_of(a.pid) and time.monotonic() < deadline:  # bwrap --die-with-parent takes them down
            time.sleep(0.1)
        assert kernels_of(a.pid) == []

        closed = follow(b.client, flying["id"])  # ends once B has taken the lease over
        assert closed[-1][1]["event"] == "finished" and closed[-1][1]["run"]["status"] == "interrupted"
        record = b.client.get(f"/v1/runs/{flying['id']}").json()
        assert record["status"] == "interrupted" and record["rounds"] == 1 and "lease expired" in record["error"]
        executed = [e for _, e in closed if e["event"] == "execution_finished"]
        assert [e["result"]["stdout"] for e in executed] == ["ran once\n"]  # executed once, never again
        assert len(model.requests) == asked  # the interrupted round was not asked again
        assert "second = kept + 1" in b.client.get(record["notebook_url"]).text  # the completed round kept
        metrics = b.client.get("/metrics").text
        assert "kernel_agent_lease_takeovers_total 1.0" in metrics

        model.add(Reply("Both.", tool_calls=(python_call("print(kept, second)"),)), Reply("42 and 43."))
        more = b.client.post("/v1/runs", json={"task": "Both?", "thread_id": done["thread_id"]}).json()
        executed = [e for _, e in follow(b.client, more["id"]) if e["event"] == "execution_finished"]
        assert executed[-1]["result"]["stdout"] == "42 43\n"  # rebuilt on B from the notebook
        assert b.client.get(f"/v1/runs/{more['id']}").json()["status"] == "completed"


def test_with_kernels_on_a_gateway_the_replica_taking_over_adopts_the_live_kernel(
    postgres: PostgresServer, openai_server: OpenAIServer, tmp_path: Path, kernel_gateway: KernelGateway
) -> None:
    model, database = openai_server, postgres.database("gateway_takeover")
    token_file = tmp_path / "gateway-token"
    gateway = kernel_gateway
    token_file.write_text(gateway.token)
    options = ("--lease-ttl", "2", "--gateway", gateway.url, "--gateway-token-file", str(token_file))
    with (
        Replica(tmp_path / "data", model.base_url, database=database, options=options) as a,
        Replica(tmp_path / "data", model.base_url, database=database, options=options) as b,
    ):
        model.add(
            Reply("Draw.", tool_calls=(python_call("import random\ntoken = random.random()\nprint(token)"),)),
            Reply("Drawn."),
        )
        done = a.client.post("/v1/runs", json={"task": "Draw a token"}).json()
        drawn = [e for _, e in follow(b.client, done["id"]) if e["event"] == "execution_finished"]
        token = drawn[0]["result"]["stdout"]
        assert len(gateway.kernels()) == 1
        model.add(Reply("Next.", tool_calls=(python_call("twice = token * 2"),)), Reply("never sent", pause=120))
        flying = a.client.post("/v1/runs", json={"task": "More", "thread_id": done["thread_id"]}).json()
        follow(b.client, flying["id"], until="round_finished")
        deadline = time.monotonic() + 30
        while model.remaining and time.monotonic() < deadline:
            time.sleep(0.05)
        a.kill()  # its kernel lives on, on the gateway

        model.add(Reply("Again.", tool_calls=(python_call("print(token)\nprint(twice == token * 2)"),)), Reply("Same."))
        while True:  # 409 until the dead replica's lease has expired
            more = b.client.post("/v1/runs", json={"task": "Token?", "thread_id": done["thread_id"]})
            if more.status_code != 409:
                break
            time.sleep(0.1)
        executed = [e for _, e in follow(b.client, more.json()["id"]) if e["event"] == "execution_finished"]
        # The same random token: the kernel itself, not a rebuild (which would draw another).
        assert executed[-1]["result"]["stdout"] == token + "True\n"
        assert b.client.get(f"/v1/runs/{flying['id']}").json()["status"] == "interrupted"
        assert len(gateway.kernels()) == 1  # adopted, not doubled
    assert gateway.kernels() == []  # B owned it, and deleted it when it stopped
