"""Durability: the service as a real subprocess, killed with SIGKILL mid-run and started again on the same
data dir. Finished runs and uploads are still there, the run in flight is marked interrupted with its
completed rounds in the notebook, its kernel died with the server, and a follow-up continues the thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from leaks import kernels_of
from openai_server import OpenAIServer, Reply, python_call
from ports import listening_port

pytestmark = pytest.mark.kernel

AUTH = {"Authorization": "Bearer durable-key"}


@contextmanager
def service(data_dir: Path, model_url: str) -> Iterator[tuple[subprocess.Popen[bytes], httpx.Client]]:
    command = [
        sys.executable,
        "-m",
        "kernel_agent.cli",
        "serve",
        "--port",
        "0",
        "--data-dir",
        str(data_dir),
        "--model",
        "scripted-test-model",
        "--base-url",
        model_url,
        "--protocol",
        "tools",
    ]
    env = {**os.environ, "KERNEL_AGENT_SERVER_KEYS": "durable-key"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = httpx.Client(headers=AUTH, timeout=60)
    try:
        client.base_url = httpx.URL(f"http://127.0.0.1:{listening_port(process)}")  # the OS picked it
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            try:
                if client.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the service did not come up"
                time.sleep(0.1)
        yield process, client
    finally:
        client.close()
        if process.poll() is None:
            process.terminate()
            process.wait(60)
        if process.stderr:
            process.stderr.close()


def follow(client: httpx.Client, run_id: str, until: str = "finished") -> list[dict[str, Any]]:
    seen = []
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen.append(json.loads(line[6:]))
                if seen[-1]["event"] == until:
                    break
    return seen


def test_a_killed_server_restarts_with_every_finished_thing_and_the_interrupted_run_truthful(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    model = openai_server
    with service(tmp_path / "data", model.base_url) as (process, client):
        upload = client.post("/v1/files", files={"file": ("kept.csv", b"a\n1\n")}).json()
        model.add(Reply("Set.", tool_calls=(python_call("kept = 41 + 1"),)), Reply("Kept is 42."))
        done = client.post("/v1/runs", json={"task": "Set kept", "file_ids": [upload["id"]]}).json()
        follow(client, done["id"])
        model.add(Reply("Next.", tool_calls=(python_call("second = kept + 1"),)), Reply("never sent", pause=120))
        flying = client.post("/v1/runs", json={"task": "More", "thread_id": done["thread_id"]}).json()
        assert "id" in flying, flying
        follow(client, flying["id"], until="round_finished")
        deadline = time.monotonic() + 30
        while model.remaining and time.monotonic() < deadline:  # round 2 is waiting on the model: mid-run
            time.sleep(0.05)
        assert model.remaining == 0
        server_pid = process.pid
        process.kill()
        process.wait(30)
    deadline = time.monotonic() + 30
    while kernels_of(server_pid) and time.monotonic() < deadline:  # bwrap --die-with-parent takes them down
        time.sleep(0.1)
    assert kernels_of(server_pid) == []

    with service(tmp_path / "data", model.base_url) as (_process, client):
        assert client.get(f"/v1/runs/{done['id']}").json()["status"] == "completed"
        assert client.get(f"/v1/files/{upload['id']}/content").text == "a\n1\n"
        interrupted = client.get(f"/v1/runs/{flying['id']}").json()
        assert interrupted["status"] == "interrupted" and interrupted["rounds"] == 1
        assert client.get("/v1/threads").json()["threads"][0]["status"] == "interrupted"
        notebook = client.get(interrupted["notebook_url"]).text
        assert "second = kept + 1" in notebook
        replayed = follow(client, flying["id"])
        assert replayed[-1]["event"] == "finished" and replayed[-1]["run"]["status"] == "interrupted"
        model.add(Reply("Both.", tool_calls=(python_call("print(kept, second)"),)), Reply("42 and 43."))
        more = client.post("/v1/runs", json={"task": "Both?", "thread_id": done["thread_id"]}).json()
        executed = [e for e in follow(client, more["id"]) if e["event"] == "execution_finished"]
        assert executed[-1]["result"]["stdout"] == "42 43\n"  # rebuilt from the notebook in a fresh kernel
        assert client.get(f"/v1/runs/{more['id']}").json()["status"] == "completed"
