"""Issue 13's load run: 32 runs submitted at once to ``kernel-agent serve``, 8 running at a time.

The service runs as a real subprocess (``kernel-agent serve --max-running 8``)
with the scripted OpenAI-compatible model of ``tests/openai_server.py`` behind
it. Each run is four model turns: three code rounds (read a CSV, a figure, a
summary) and an answer. The 32 clients post at the same moment; the server
answers 429 over its cap and a client retries (what the README tells clients
to do). Times are from a client's first POST, so queueing counts.

    .venv/bin/python bench/bench_server.py [--runs 32] [--concurrent 8]

Reports: all completed (answers checked), throughput, p50/p95 time to first
text token and to the answer, the peak memory of the server and its kernels,
and whether any kernel is left once the server has stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from leaks import kernels_of
from openai_server import OpenAIServer, Reply, python_call
from report import Row, median, p95

NAME = "server"
KEY = "bench-key"
_ROUNDS = (
    "frame = pd.read_csv(data.numbers)\nprint(frame.describe().to_string())",
    "fig, ax = plt.subplots(figsize=(4, 3))\nframe.plot(ax=ax)\nplt.show()",
    "print('total', int(frame.value.sum()))",
)


def reply(body: dict[str, Any]) -> Reply:
    """The next turn of whichever run asks: rounds done so far = tool results in its messages."""
    done = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if done < len(_ROUNDS):
        return Reply(f"Step {done + 1}.", tool_calls=(python_call(_ROUNDS[done]),))
    return Reply("The total is 4950.")


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Peak RSS of the server process plus every kernel it started, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kb, self.peak_kernels, self.stop = pid, 0, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            kernels = kernels_of(self.pid)
            self.peak_kernels = max(self.peak_kernels, len(kernels))
            self.peak_kb = max(self.peak_kb, _rss_kb(self.pid) + sum(_rss_kb(k) for k in kernels))


def start_server(data: Path, model_url: str, concurrent: int) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "kernel-agent"), "serve", "--port", str(port), "--data-dir", str(data),
               "--model", "scripted", "--base-url", model_url, "--protocol", "tools", "--max-running", str(concurrent),
               "--max-live-kernels", str(concurrent)]
    env = {"PATH": "/usr/bin:/bin", "KERNEL_AGENT_SERVER_KEYS": KEY, "OPENAI_API_KEY": "unused"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("kernel-agent serve did not start")


async def one_run(client: httpx.AsyncClient, file_id: str, index: int) -> dict[str, float]:
    started = time.monotonic()
    while True:
        response = await client.post("/v1/runs", json={"task": f"Analyse run {index}", "file_ids": [file_id]})
        if response.status_code != 429:
            break
        await asyncio.sleep(0.2)
    response.raise_for_status()
    run_id, times = response.json()["id"], {}
    async with client.stream("GET", f"/v1/runs/{run_id}/events") as events:
        async for line in events.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["event"] == "text_delta":
                times.setdefault("first_token", time.monotonic() - started)
            elif event["event"] == "answer":
                times["answer"] = time.monotonic() - started
                assert "4950" in event["answer"], event
    record = (await client.get(f"/v1/runs/{run_id}")).json()
    assert record["status"] == "completed" and record["rounds"] >= len(_ROUNDS), record
    return times


async def load(url: str, runs: int) -> tuple[list[dict[str, float]], float]:
    headers = {"Authorization": f"Bearer {KEY}"}
    limits = httpx.Limits(max_connections=runs * 2)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as client:
        csv = "value\n" + "\n".join(str(i) for i in range(100)) + "\n"
        file_id = (await client.post("/v1/files", files={"file": ("numbers.csv", csv.encode())})).json()["id"]
        started = time.monotonic()
        results = await asyncio.gather(*(one_run(client, file_id, i) for i in range(runs)))
        return list(results), time.monotonic() - started


def measure(runs: int, concurrent: int) -> tuple[list[Row], dict[str, Any]]:
    """The load run; rows for the table and the other numbers (throughput, memory, leaks)."""
    with OpenAIServer() as model, tempfile.TemporaryDirectory(prefix="ka-bench-server-") as data:
        model.add(*([reply] * (runs * (len(_ROUNDS) + 1))))
        process, url = start_server(Path(data), model.base_url, concurrent)
        sampler = Sampler(process.pid)
        sampler.start()
        try:
            results, wall = asyncio.run(load(url, runs))
        finally:
            sampler.stop.set()
            sampler.join()
            process.send_signal(signal.SIGTERM)
            process.wait(120)
        left = kernels_of(process.pid)
    first = [r["first_token"] for r in results]
    answer = [r["answer"] for r in results]
    rows = [Row(f"{runs} runs, {concurrent} at once: wall time", wall),
            Row("time to first token, p50", median(first)), Row("time to first token, p95", p95(first)),
            Row("time to answer, p50", median(answer)), Row("time to answer, p95", p95(answer))]
    extra = {"completed": len(results), "throughput_runs_per_s": round(len(results) / wall, 2),
             "peak_rss_mb": round(sampler.peak_kb / 1024), "peak_kernel_processes": sampler.peak_kernels,
             "kernels_left": len(left)}
    return rows, extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--concurrent", type=int, default=8)
    args = parser.parse_args()
    rows, extra = measure(args.runs, args.concurrent)
    for row in rows:
        print(f"| {row.metric} | {row.ours:.2f} s |")
    print(json.dumps(extra))


if __name__ == "__main__":
    main()
