"""The service with a warm kernel pool (``serve --pool N``): a real uvicorn server, httpx, the scripted
model; threads take pooled kernels, keep them across follow-ups, and nothing is left at shutdown."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway import KernelGateway
from leaks import our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

pytestmark = pytest.mark.kernel

KEY = {"Authorization": "Bearer pool-key"}


def finished(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    """The run's events, read until its ``finished`` event."""
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def stdout(events: list[dict[str, Any]]) -> str:
    return "".join(e["result"]["stdout"] for e in events if e["event"] == "execution_finished")


def wait_for_kernels(count: int) -> list[int]:
    deadline = time.monotonic() + 90
    while len(pids := our_kernel_pids()) < count:
        assert time.monotonic() < deadline, f"{len(pids)} kernels, expected {count}"
        time.sleep(0.1)
    return pids


def test_threads_run_on_pooled_kernels_keep_state_return_files_and_leave_nothing(tmp_path: Path) -> None:
    with (
        OpenAIServer() as model,
        ServiceServer(tmp_path / "data", model.base_url, keys={"pool-key"}, pool=1) as server,
    ):
        warm = wait_for_kernels(1)  # the pool fills at start-up, before any request
        with httpx.Client(base_url=server.url, headers=KEY, timeout=90) as client:
            code = "import os\nkept = 20 + 1\nopen('made.txt', 'w').write('from the pool')\nprint(os.getcwd())"
            model.add(Reply("Set.", tool_calls=(python_call(code),)), Reply("Set it."))
            first = client.post("/v1/runs", json={"task": "Set kept"}).json()
            cwd = stdout(finished(client, first["id"])).strip()
            workspace = server.config.data_dir / "threads" / first["thread_id"] / "workspace"
            assert cwd != str(workspace)  # a pooled kernel works in its own folder, started before the thread
            assert set(warm) <= set(wait_for_kernels(2))  # the warm kernel serves the thread; the pool refilled
            record = client.get(f"/v1/runs/{first['id']}").json()
            assert record["status"] == "completed" and [f["name"] for f in record["files"]] == ["made.txt"]
            assert client.get(record["files"][0]["url"]).text == "from the pool"

            model.add(Reply("Use.", tool_calls=(python_call("print(kept * 2, os.getcwd())"),)), Reply("42."))
            second = client.post("/v1/runs", json={"task": "Double kept", "thread_id": first["thread_id"]}).json()
            assert stdout(finished(client, second["id"])) == f"42 {cwd}\n"  # the same live kernel, not a rebuild
    assert not our_kernel_pids()


def test_serve_refuses_a_pool_larger_than_the_live_kernel_cap(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kernel_agent.cli import cli

    arguments = [
        "serve",
        "--data-dir",
        str(tmp_path),
        "--no-auth",
        "--model",
        "m",
        "--pool",
        "3",
        "--max-live-kernels",
        "2",
    ]
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 2 and "the pool size must be between 0 and max_live_kernels (2)" in result.output


def test_threads_kernels_run_on_the_gateway_pooled_or_not_and_none_is_left(tmp_path: Path) -> None:
    """``serve --gateway URL``: a thread's kernel (from the pool, or started for it) is the gateway's."""
    with KernelGateway() as gateway, OpenAIServer() as model:
        where = {"gateway_url": gateway.url, "gateway_token": gateway.token}
        for pool in (1, 0):
            with (
                ServiceServer(
                    tmp_path / f"data{pool}", model.base_url, keys={"pool-key"}, agent=where, pool=pool
                ) as server,
                httpx.Client(base_url=server.url, headers=KEY, timeout=90) as client,
            ):
                model.add(Reply("Set.", tool_calls=(python_call("kept = 21"),)), Reply("Set it."))
                first = client.post("/v1/runs", json={"task": "Set kept"}).json()
                assert finished(client, first["id"])[-1]["run"]["stop_reason"] != "llm_error"
                deadline = time.monotonic() + 60  # the pool's refill starts in the background
                while len(gateway.kernels()) < 1 + pool:
                    assert time.monotonic() < deadline
                    time.sleep(0.1)
                assert len(gateway.kernels()) == 1 + pool  # the thread's kernel, and the pool's refill
                model.add(Reply("Use.", tool_calls=(python_call("print(kept * 2)"),)), Reply("42."))
                second = client.post("/v1/runs", json={"task": "Double", "thread_id": first["thread_id"]}).json()
                assert stdout(finished(client, second["id"])) == "42\n"
                assert not our_kernel_pids()  # nothing ran on this machine
            assert gateway.kernels() == []
