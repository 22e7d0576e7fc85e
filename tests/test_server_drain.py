"""Drain: ``kernel-agent serve`` sent SIGTERM takes no new connection or run, lets the run in flight
finish within ``--drain-grace`` (its open stream goes on to ``finished``) and exits; a run still going
when the grace runs out is stopped and marked ``interrupted``, its completed rounds kept. Its log
lines are JSON with the run's and thread's ids (``--log-format json``)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import pytest
from openai_server import OpenAIServer, Reply, python_call
from replicas import Replica, follow

pytestmark = pytest.mark.kernel


def refuses_new_work(url: str) -> bool:
    """True once the server, told to stop, is out of rotation: /ready says 503, or it takes no connection."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/ready", timeout=5).status_code == 503:
                return True
        except httpx.TransportError:
            return True
        time.sleep(0.05)
    return False


def test_sigterm_lets_the_run_in_flight_finish_then_exits(openai_server: OpenAIServer, tmp_path: Path) -> None:
    data, model = tmp_path / "data", openai_server
    database = f"sqlite:///{data / 'records.db'}"
    options = ("--drain-grace", "60", "--log-format", "json")
    with Replica(data, model.base_url, database=database, options=options) as replica:
        model.add(Reply("Set.", tool_calls=(python_call("x = 6 * 7\nprint(x)"),)), Reply("It is 42.", pause=2.0))
        run = replica.client.post("/v1/runs", json={"task": "Compute"}).json()
        seen = []
        with replica.client.stream("GET", f"/v1/runs/{run['id']}/events") as response:
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                seen.append(json.loads(line[6:]))
                if seen[-1]["event"] == "round_finished" and len(seen) < 100:
                    assert replica.process is not None
                    replica.process.send_signal(signal.SIGTERM)  # mid-run: round 2 waits on the model
                    assert refuses_new_work(replica.url)
                if seen[-1]["event"] == "finished":
                    break
        assert seen[-1]["run"]["answer"] == "It is 42."
        assert replica.process is not None and replica.process.wait(60) in (
            0,
            -signal.SIGTERM,
        )  # uvicorn exits by the signal it got
    lines = [json.loads(line) for line in replica.log.read_text().splitlines() if line.startswith("{")]
    ours = [line for line in lines if line.get("run_id") == run["id"]]
    runs_logged = ("kernel_agent.server.service", "kernel_agent.server.executor")  # admitted, then executed
    assert [line["message"].split()[-4:] for line in ours if line["logger"] in runs_logged] == [
        ["started", "in", "thread", run["thread_id"]],
        ["completed", "after", "2", "rounds"],
    ]
    assert all(line["thread_id"] == run["thread_id"] for line in ours)
    assert any(line["message"].startswith("draining") for line in lines)
    with Replica(data, model.base_url, database=database) as again:
        assert again.client.get(f"/v1/runs/{run['id']}").json()["status"] == "completed"


def test_a_run_past_the_grace_is_stopped_and_marked_interrupted(openai_server: OpenAIServer, tmp_path: Path) -> None:
    data, model = tmp_path / "data", openai_server
    database = f"sqlite:///{data / 'records.db'}"
    with Replica(data, model.base_url, database=database, options=("--drain-grace", "1")) as replica:
        model.add(Reply("Set.", tool_calls=(python_call("x = 1"),)), Reply("never sent", pause=120))
        run = replica.client.post("/v1/runs", json={"task": "Compute"}).json()
        follow(replica.client, run["id"], until="round_finished")
        assert replica.process is not None
        replica.process.send_signal(signal.SIGTERM)
        assert replica.process.wait(60) in (0, -signal.SIGTERM)  # uvicorn exits by the signal it got
    with Replica(data, model.base_url, database=database) as again:
        record = again.client.get(f"/v1/runs/{run['id']}").json()
        assert record["status"] == "interrupted" and record["rounds"] == 1 and "drain grace" in record["error"]
        closing = follow(again.client, run["id"])[-1][1]
        assert closing["event"] == "finished" and closing["run"]["status"] == "interrupted"
        assert "x = 1" in again.client.get(record["notebook_url"]).text
