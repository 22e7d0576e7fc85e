"""Operating the service: ``/ready`` says whether this replica can serve (its database answers, at the
current migration; a real PostgreSQL stopped and started again), ``/metrics`` is Prometheus' text format with runs by
status, live kernels, the
write queue and the model's latency; both open like ``/health``, so probes need no key. Requests that
arrive at once never start more runs than ``max_running``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from openai_server import OpenAIServer, Reply, python_call
from postgres import PostgresServer
from prometheus_client.parser import text_string_to_metric_families
from service_server import ServiceServer

from kernel_agent.server.database import DATABASE_FILE, HEAD

AUTH = {"Authorization": "Bearer ops-key"}


@pytest.fixture
def server(openai_server: OpenAIServer, tmp_path: Path) -> Iterator[ServiceServer]:
    with ServiceServer(tmp_path / "data", openai_server.base_url, keys={"ops-key"}) as running:
        yield running


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(url + "/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def test_ready_is_true_only_at_the_current_migration(server: ServiceServer) -> None:
    assert httpx.get(server.url + "/ready").json() == {"status": "ready"}
    database = sqlite3.connect(server.config.data_dir / DATABASE_FILE)
    try:  # another version's migration ran on this database: this replica must not take traffic
        with database:
            database.execute("UPDATE alembic_version SET version_num = 'ffff'")
        refused = httpx.get(server.url + "/ready")
        assert refused.status_code == 503 and HEAD in refused.json()["reason"] and "ffff" in refused.json()["reason"]
        assert httpx.get(server.url + "/health").status_code == 200  # alive all the same
        with database:
            database.execute("UPDATE alembic_version SET version_num = ?", (HEAD,))
        assert httpx.get(server.url + "/ready").status_code == 200
    finally:
        database.close()


@pytest.mark.postgresql
def test_ready_follows_the_database_going_away_and_coming_back(openai_server: OpenAIServer, tmp_path: Path) -> None:
    with (
        PostgresServer() as postgres,
        ServiceServer(tmp_path / "data", openai_server.base_url, keys={"ops-key"}, database=postgres.url) as server,
    ):
        assert httpx.get(server.url + "/ready").status_code == 200
        postgres.stop()
        gone = httpx.get(server.url + "/ready", timeout=30)
        assert gone.status_code == 503 and "does not answer" in gone.json()["reason"]
        assert httpx.get(server.url + "/health").status_code == 200
        postgres.start()
        assert httpx.get(server.url + "/ready", timeout=30).json() == {"status": "ready"}


def test_metrics_start_at_zero(server: ServiceServer) -> None:
    seen = samples(server.url)
    assert seen[("kernel_agent_runs", (("status", "completed"),))] == 0
    assert seen[("kernel_agent_live_kernels", ())] == 0
    assert seen[("kernel_agent_starting_runs", ())] == 0 and seen[("kernel_agent_pending_writes", ())] == 0
    assert seen[("kernel_agent_lease_takeovers_total", ())] == 0
    assert seen[("kernel_agent_model_latency_seconds_count", ())] == 0


@pytest.mark.kernel
def test_metrics_count_runs_kernels_and_model_replies(server: ServiceServer, openai_server: OpenAIServer) -> None:
    openai_server.add(Reply("Set.", tool_calls=(python_call("x = 1"),)), Reply("Done."))
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        run = client.post("/v1/runs", json={"task": "Set x"}).json()
        with client.stream("GET", f"/v1/runs/{run['id']}/events") as response:
            finished = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")][-1]
    assert finished["event"] == "finished" and finished["run"]["stop_reason"] == "answer"
    seen = samples(server.url)
    assert seen[("kernel_agent_runs", (("status", "completed"),))] == 1
    assert seen[("kernel_agent_runs", (("status", "running"),))] == 0
    assert seen[("kernel_agent_live_kernels", ())] == 1  # the thread keeps its kernel for a follow-up
    assert seen[("kernel_agent_running_runs", ())] == 0 and seen[("kernel_agent_starting_runs", ())] == 0
    assert seen[("kernel_agent_model_latency_seconds_count", ())] == 2  # one reply with code, one answer


@pytest.mark.kernel
def test_requests_at_once_never_start_more_runs_than_the_cap(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(*[Reply("Done.", pause=3.0)] * 2)
    with (
        ServiceServer(  # one key, allowed the whole cap: the global cap is what this holds
            tmp_path / "data", openai_server.base_url, keys={"ops-key"}, max_running=2, max_running_per_key=2
        ) as server,
        httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client,
        ThreadPoolExecutor(8) as pool,
    ):
        codes = sorted(pool.map(lambda i: client.post("/v1/runs", json={"task": f"Run {i}"}).status_code, range(8)))
        assert codes == [201, 201] + [429] * 6  # each start takes a moment: all 8 arrive while 2 are starting
        assert len(client.get("/v1/threads").json()["threads"]) == 2
