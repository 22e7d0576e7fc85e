"""The service's limits over real HTTP: the cap on runs at once (429, said plainly), one key's share of it
(another key still gets a place), and an idle thread's kernel shut down after its TTL, the thread going on
afterwards from its notebook."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

from kernel_agent.errors import ConfigError
from kernel_agent.server.config import ServerConfig

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def client(model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    data = tmp_path_factory.mktemp("limits")
    with (
        ServiceServer(data, model.base_url, max_running=1, idle_ttl=1.0) as server,
        httpx.Client(base_url=server.url, timeout=60) as http,
    ):  # keys=None: auth off, one owner
        yield http


def finish(client: httpx.Client, run_id: str) -> None:
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        for _line in response.iter_lines():
            pass


def test_runs_over_the_cap_get_429_and_nothing_changes(client: httpx.Client, model: OpenAIServer) -> None:
    model.add(Reply("slow", pause=60))
    first = client.post("/v1/runs", json={"task": "Slow one"}).json()
    threads = client.get("/v1/threads").json()["threads"]
    refused = client.post("/v1/runs", json={"task": "One too many"})
    assert refused.status_code == 429 and "1 runs are running" in refused.json()["error"]["message"]
    assert len(client.get("/v1/threads").json()["threads"]) == len(threads)  # no thread made for it
    deadline = time.monotonic() + 30
    while model.remaining and time.monotonic() < deadline:  # cancel while it waits on the model
        time.sleep(0.05)
    assert client.post(f"/v1/runs/{first['id']}/cancel").json()["status"] == "cancelled"


def test_a_burst_of_requests_gets_one_place_not_one_each(client: httpx.Client, model: OpenAIServer) -> None:
    """The cap holds while the admitted run is still getting its kernel and folders: before, every request of a
    burst passed the check before any run's task existed, and all of them started."""
    model.add(Reply("slow", pause=60))
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda i: client.post("/v1/runs", json={"task": f"Burst {i}"}), range(6)))
    admitted = [a.json() for a in answers if a.status_code == 201]
    assert len(admitted) == 1 and sorted(a.status_code for a in answers) == [201] + [429] * 5
    deadline = time.monotonic() + 30
    while model.remaining and time.monotonic() < deadline:  # cancel while it waits on the model
        time.sleep(0.05)
    assert client.post(f"/v1/runs/{admitted[0]['id']}/cancel").json()["status"] == "cancelled"


def test_an_idle_kernel_is_shut_down_and_the_thread_goes_on(client: httpx.Client, model: OpenAIServer) -> None:
    model.add(Reply("Set.", tool_calls=(python_call("kept = 5"),)), Reply("Set."))
    run = client.post("/v1/runs", json={"task": "Set kept"}).json()
    finish(client, run["id"])
    deadline = time.monotonic() + 30
    while client.get(f"/v1/threads/{run['thread_id']}").json()["kernel"] == "live":
        assert time.monotonic() < deadline, "the idle kernel was never shut down"
        time.sleep(0.2)
    model.add(Reply("Use.", tool_calls=(python_call("print(kept * 2)"),)), Reply("10."))
    more = client.post("/v1/runs", json={"task": "Double", "thread_id": run["thread_id"]}).json()
    finish(client, more["id"])
    record = client.get(f"/v1/runs/{more['id']}").json()
    assert record["status"] == "completed" and record["answer"] == "10."


def wait_for_model(model: OpenAIServer) -> None:
    """Until every queued reply has been asked for (the runs wait on the model): cancel them then."""
    deadline = time.monotonic() + 30
    while model.remaining and time.monotonic() < deadline:
        time.sleep(0.05)


def test_one_key_cannot_take_every_place(model: OpenAIServer, tmp_path: Path) -> None:
    """Two places, two keys: key A's second run is refused, saying why, and key B still gets a place (before,
    A's two sleeping runs made B's request answer 429)."""
    keys = {"tenant-a-key", "tenant-b-key"}
    with ServiceServer(tmp_path / "data", model.base_url, keys=keys, max_running=2) as server:
        a, b = (
            httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {key}"})
            for key in ("tenant-a-key", "tenant-b-key")
        )
        with a, b:
            model.add(Reply("slow", pause=60), Reply("slow", pause=60))
            first = a.post("/v1/runs", json={"task": "A's first"})
            assert first.status_code == 201, first.text
            second = a.post("/v1/runs", json={"task": "A's second"})
            message = second.json()["error"]["message"]
            assert second.status_code == 429 and "the most one key runs at once on this server (1 of 2" in message
            other = b.post("/v1/runs", json={"task": "B's"})
            assert other.status_code == 201, other.text
            third = b.post("/v1/runs", json={"task": "B's second"})
            assert third.status_code == 429  # now the server is full, and B has its share too
            wait_for_model(model)
            for client, run in ((a, first.json()), (b, other.json())):
                assert client.post(f"/v1/runs/{run['id']}/cancel").json()["status"] == "cancelled"


def test_a_key_share_is_set_and_checked() -> None:
    base = Path("unused")
    assert ServerConfig(base, keys=frozenset({"k"}), max_running=4).key_share == 2
    assert ServerConfig(base, keys=frozenset({"k"}), max_running=3).key_share == 2
    assert ServerConfig(base, keys=frozenset({"k"}), max_running=1).key_share == 1
    assert ServerConfig(base, keys=frozenset({"k"}), max_running=4, max_running_per_key=4).key_share == 4
    assert ServerConfig(base, auth=False, max_running=4).key_share == 4  # one owner: every place is its own
    with pytest.raises(ConfigError, match="max_running_per_key"):
        ServerConfig(base, keys=frozenset({"k"}), max_running=2, max_running_per_key=3)
