"""Output while a round's code runs, over the service's native API: ``execution_output`` SSE events.

The cell waits for a marker file in its thread's workspace, which the test
writes only once an ``execution_output`` event carried the early output, so
the event provably arrived while the code was still running (no sleeps).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

pytestmark = pytest.mark.kernel

WAIT_FOR_MARKER = (
    "import pathlib, time\nprint('early output', flush=True)\n"
    "deadline = time.monotonic() + 60\n"
    "while not pathlib.Path('seen').exists() and time.monotonic() < deadline:\n"
    "    time.sleep(0.02)\n"
    "print('late output' if pathlib.Path('seen').exists() else 'no marker came')"
)


@pytest.fixture(scope="module")
def server(model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceServer]:
    with ServiceServer(tmp_path_factory.mktemp("service"), model.base_url, keys={"alice-key"}) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: ServiceServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers={"Authorization": "Bearer alice-key"}, timeout=120) as http:
        yield http


def test_the_running_rounds_output_streams_as_events_and_is_kept_for_replay(
    client: httpx.Client, model: OpenAIServer, server: ServiceServer
) -> None:
    model.add(Reply("Wait for it.", tool_calls=(python_call(WAIT_FOR_MARKER),)), Reply("Done."))
    run = client.post("/v1/runs", json={"task": "Stream the output"}).json()
    workspace = server.config.data_dir.resolve() / "threads" / run["thread_id"] / "workspace"
    seen: list[dict[str, Any]] = []
    with client.stream("GET", f"/v1/runs/{run['id']}/events") as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1]["event"] == "execution_output" and "early output" in seen[-1]["text"]:
                    (workspace / "seen").touch()  # lets the cell finish
    kinds = [event["event"] for event in seen]
    early = next(i for i, e in enumerate(seen) if e["event"] == "execution_output" and "early output" in e["text"])
    assert kinds.index("execution_started") < early < kinds.index("execution_finished")
    assert seen[early]["round"] == 1 and seen[early]["elapsed_s"] >= 0 and seen[early]["skipped_chars"] == 0
    finished = seen[kinds.index("execution_finished")]
    assert finished["result"]["stdout"] == "early output\nlate output\n"
    assert kinds[-1] == "finished" and client.get(f"/v1/runs/{run['id']}").json()["status"] == "completed"
    with client.stream("GET", f"/v1/runs/{run['id']}/events") as again:  # recorded: a late reader sees them too
        replayed = [json.loads(line[6:]) for line in again.iter_lines() if line.startswith("data: ")]
    assert replayed == seen
