"""Durability of the service, killed while code runs in the kernel (test_server_durability.py kills it
while the model is answering): ``kernel-agent serve`` as a real subprocess, SIGKILLed mid-run, started
again on the same data dir. Nothing finished is lost, the killed run is listed as interrupted with its
completed round in the notebook, a follow-up continues it, and no kernel or runtime dir outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from leaks import kernels_of
from openai_server import OpenAIServer, Reply, python_call
from ports import listening_port

pytestmark = pytest.mark.kernel

KEY = "durable-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL_KEY = "model-secret-durable"


class ServeProcess:
    """``kernel-agent serve`` in its own process, on port 0 (the OS picks), until killed or terminated."""

    def __init__(self, data_dir: Path, model_url: str) -> None:
        env = {**os.environ, "KERNEL_AGENT_SERVER_KEYS": KEY, "OPENAI_API_KEY": MODEL_KEY}
        command = [
            str(Path(sys.executable).parent / "kernel-agent"),
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
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the process; closed in stop()
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self.port = listening_port(self.process)
        except RuntimeError:
            self.stop()
            raise RuntimeError(f"kernel-agent serve did not start:\n{self.output()}") from None
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kernel-agent serve did not start:\n{self.output()}")
            time.sleep(0.1)

    def output(self) -> str:
        """What the server wrote (kept once ``stop`` has closed the log)."""
        if not self.log.closed:
            self.log.seek(0)
            self.text = self.log.read().decode(errors="replace")
        return self.text

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)
        self.output()
        self.log.close()


def wait_until(condition: Any, what: str, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def events(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def until_second_execution(client: httpx.Client, run_id: str) -> None:
    """Read the run's live events until its second code block has started running."""
    started = 0
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["event"] == "execution_started":
                started += 1
                if started == 2:
                    return
    raise AssertionError("the run ended before its second execution started")


def test_a_killed_server_loses_nothing_finished_and_a_follow_up_continues(model: OpenAIServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServeProcess(data, model.base_url)
    try:
        with httpx.Client(base_url=first.url, headers=AUTH, timeout=60) as client:
            upload = client.post("/v1/files", files={"file": ("sales.csv", b"amount\n5\n7\n", "text/csv")}).json()
            model.add(
                Reply(
                    "Sum.",
                    tool_calls=(
                        python_call(
                            "frame = "
                            "pd.read_csv(data.sales)\nframe.to_csv('summed.csv')\nprint(int(frame.amount.sum()))"
                        ),
                    ),
                ),
                Reply("The sum is 12."),
            )
            done = client.post("/v1/runs", json={"task": "Sum the sales", "file_ids": [upload["id"]]}).json()
            assert events(client, done["id"])[-1]["event"] == "finished"
            model.add(
                Reply("Keep.", tool_calls=(python_call("kept = 41\nprint('kept')"),)),
                Reply("Wait.", tool_calls=(python_call("import time\ntime.sleep(300)"),)),
            )
            killed = client.post("/v1/runs", json={"task": "Keep a value, then wait"}).json()
            until_second_execution(client, killed["id"])
        killed_pid = first.process.pid
        assert kernels_of(killed_pid), "the run's kernel should be running before the kill"
        first.kill()
    finally:
        first.stop()
    # bwrap --die-with-parent takes the kernel down with the killed server
    wait_until(lambda: not kernels_of(killed_pid), "the killed server's kernel outlived it")

    second = ServeProcess(data, model.base_url)
    try:
        with httpx.Client(base_url=second.url, headers=AUTH, timeout=60) as client:
            check_finished_work_survived(client, done, upload)
            check_killed_run_is_interrupted(client, killed)
            model.add(Reply("Use.", tool_calls=(python_call("print(kept + 1)"),)), Reply("It is 42."))
            follow = client.post("/v1/runs", json={"task": "Add one to kept", "thread_id": killed["thread_id"]})
            assert follow.status_code == 201, follow.text
            seen = events(client, follow.json()["id"])
            outputs = [e["result"]["stdout"] for e in seen if e["event"] == "execution_finished"]
            assert "42\n" in outputs, seen  # the notebook's completed round was replayed into a new kernel
            assert client.get(f"/v1/runs/{follow.json()['id']}").json()["status"] == "completed"
        assert not [
            d
            for d in Path(tempfile.gettempdir()).glob("kernel-agent-*")
            if (d / "owner.pid").exists() and (d / "owner.pid").read_text() == str(killed_pid)
        ]
        second_pid = second.process.pid
    finally:
        second.stop()
    # uvicorn re-raises SIGTERM once its graceful shutdown (runs cancelled, kernels closed) is done
    assert second.process.returncode in (0, -signal.SIGTERM), second.output()
    assert "Application shutdown complete" in second.output()
    assert MODEL_KEY not in first.output() + second.output() and KEY not in first.output() + second.output()
    assert not kernels_of(second_pid)
    for path in data.rglob("*"):
        if path.is_file():
            assert MODEL_KEY.encode() not in path.read_bytes(), path


def check_finished_work_survived(client: httpx.Client, done: dict[str, Any], upload: dict[str, Any]) -> None:
    record = client.get(f"/v1/runs/{done['id']}").json()
    assert record["status"] == "completed" and record["answer"] == "The sum is 12."
    assert client.get(record["files"][0]["url"]).text.startswith(",amount")
    assert [f["id"] for f in client.get("/v1/files").json()["data"]] == [upload["id"]]
    assert client.get(f"/v1/files/{upload['id']}/content").content == b"amount\n5\n7\n"
    assert [e["event"] for e in events(client, done["id"])].count("finished") == 1


def check_killed_run_is_interrupted(client: httpx.Client, killed: dict[str, Any]) -> None:
    record = client.get(f"/v1/runs/{killed['id']}").json()
    assert record["status"] == "interrupted", record
    replay = events(client, killed["id"])
    assert replay[-1]["event"] == "finished" and replay[-1]["run"]["status"] == "interrupted"
    assert [e["event"] for e in replay].count("round_finished") == 1
    threads = {t["id"]: t for t in client.get("/v1/threads").json()["threads"]}
    assert threads[killed["thread_id"]]["status"] == "interrupted"
    notebook = nbformat.reads(client.get(record["notebook_url"]).text, as_version=4)
    assert any("kept = 41" in cell.source for cell in notebook.cells if cell.cell_type == "code")
