"""``kernel-agent serve --demo`` as a user starts it (its own process, no model, no key, on loopback):
its data in a temporary folder it names and removes at exit, a run that brings its own question told so
first, and a follow-up refused with the reason, never played as "the script ended" under a completed badge."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from ports import listening_port

from kernel_agent.server.service import DEMO_NO_FOLLOW_UP


class DemoServer:
    """The demo server's process, started in ``folder`` without ``--data-dir``; its first log line."""

    def __init__(self, folder: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNEL_AGENT_"))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kernel_agent.cli", "serve", "--demo", "--port", "0"],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        self.first_line = self.process.stderr.readline()  # logged before it listens
        self.url = f"http://127.0.0.1:{listening_port(self.process)}"
        deadline = time.monotonic() + 60
        while True:  # up when it answers: the readiness of another process, not a pause
            try:
                if httpx.get(self.url + "/health", timeout=2).json().get("status") == "ok":
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve --demo did not start"
            time.sleep(0.2)

    def stop(self) -> str:
        """SIGTERM, as a service manager stops it; the rest of its log."""
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        assert self.process.stderr is not None
        rest = self.process.stderr.read()
        self.process.stderr.close()
        return rest

    def upload(self, name: str, data: bytes) -> str:
        response = httpx.post(self.url + "/v1/files", files={"file": (name, data, "text/csv")}, timeout=30)
        assert response.status_code in (200, 201), response.text
        return str(response.json()["id"])

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events, followed until ``finished``."""
        events = []
        with httpx.stream("GET", f"{self.url}/v1/runs/{run_id}/events", timeout=180) as response:
            for line in response.iter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[5:]))
                    if events[-1]["event"] == "finished":
                        break
        return events


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[DemoServer]:
    server = DemoServer(tmp_path)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.stop()


def test_serve_demo_keeps_its_data_in_a_temporary_folder_it_names_and_removes(demo: DemoServer, tmp_path: Path) -> None:
    assert "(a temporary folder, removed at exit)" in demo.first_line, demo.first_line
    folder = Path(demo.first_line.split("data in ", 1)[1].split(" (a temporary folder", 1)[0])
    assert folder.is_absolute() and folder.is_dir()
    demo.upload("mine.csv", b"a\n1\n")
    assert any(folder.iterdir())  # the upload and the database live there
    assert list(tmp_path.iterdir()) == []  # nothing in the folder it was started from
    demo.stop()
    assert not folder.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.kernel
def test_serve_demo_refuses_a_follow_up_with_the_reason(demo: DemoServer) -> None:
    info = httpx.get(demo.url + "/v1/info", timeout=30).json()
    assert info["demo"]["follow_up"] == DEMO_NO_FOLLOW_UP  # the page shows it in place of the follow-up form
    data = httpx.get(demo.url + info["demo"]["files"][0]["url"], timeout=30).content
    file_id = demo.upload("sales.csv", data)
    run = httpx.post(demo.url + "/v1/runs", json={"task": info["demo"]["task"], "file_ids": [file_id]}, timeout=60)
    assert run.status_code in (200, 201), run.text
    events = demo.events(run.json()["id"])
    assert not [e for e in events if e["event"] == "notice" and "Demo server" in e["message"]]  # the demo's own run
    assert events[-1]["run"]["status"] == "completed" and "no more replies" not in events[-1]["run"]["answer"]
    thread = run.json()["thread_id"]
    follow_up = httpx.post(
        demo.url + "/v1/runs", json={"task": "And by month?", "thread_id": thread, "file_ids": []}, timeout=60
    )
    assert follow_up.status_code == 422, follow_up.text
    assert "takes no follow-up: its replies are scripted for the bundled question only" in follow_up.text
    assert len(httpx.get(f"{demo.url}/v1/threads/{thread}", timeout=30).json()["runs"]) == 1  # nothing was started


@pytest.mark.kernel
def test_serve_demo_says_first_that_a_run_ignores_the_users_question(demo: DemoServer) -> None:
    file_id = demo.upload("mine.csv", b"a\n1\n")
    run = httpx.post(demo.url + "/v1/runs", json={"task": "What is in my file?", "file_ids": [file_id]}, timeout=60)
    assert run.status_code in (200, 201), run.text
    events = demo.events(run.json()["id"])
    first = events[0]
    assert first["event"] == "notice", first
    assert first["message"].startswith("Demo server: this run ignores your question and your file mine.csv.")
    assert "which this run was not given" in first["message"]  # it was not: the scripted code fails on it
