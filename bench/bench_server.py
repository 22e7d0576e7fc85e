"""Load on the service (issue 13): N runs submitted at once over loopback HTTP, the scripted model behind.

Each run: two rounds of code (the second draws a figure), then an answer. Runs over the server's cap
get 429 and are resubmitted (the client queues). Prints: all completed?, throughput, p50/p95 time to
first streamed token and to the answer, peak memory (this process: the server, the scripted model and
the client; plus every kernel process under it, sampled every 0.2 s), kernels left. Standalone:

    .venv/bin/python bench/bench_server.py --runs 32 --concurrent 8 [--pool 8]

``--pool N`` serves with a warm pool of N kernels (``kernel-agent serve --pool N``), filled before the
clock starts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

import httpx
import psutil

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from leaks import our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

FIGURE = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"


def scripted(body: dict) -> Reply:
    """Round by round from the conversation itself, so concurrent runs can share one script."""
    done = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if done == 0:
        return Reply("Load.", tool_calls=(python_call("values = list(range(1000))\nprint(sum(values))"),))
    if done == 1:
        return Reply("Plot.", tool_calls=(python_call(FIGURE),))
    return Reply("The sum is 499500.")


async def one(client: httpx.AsyncClient, index: int) -> tuple[float, float, str]:
    start = time.monotonic()
    while True:
        response = await client.post("/v1/runs", json={"task": f"Run {index}"})
        if response.status_code != 429:
            break
        await asyncio.sleep(0.2)
    response.raise_for_status()
    run = response.json()
    first = None
    async with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:
        async for line in events.aiter_lines():
            if first is None and '"text_delta"' in line:
                first = time.monotonic() - start
    record = (await client.get(f"/v1/runs/{run['id']}")).json()
    return first or float("nan"), time.monotonic() - start, record["status"]


async def load(url: str, runs: int) -> list[tuple[float, float, str]]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        return await asyncio.gather(*(one(client, i) for i in range(runs)))


class PeakMemory:
    """The largest RSS sum of this process and all its descendants (the kernels), sampled in a thread."""

    def __init__(self, period: float = 0.2) -> None:
        self.period = period
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.period):
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:  # gone between listing and reading
                    pass
            self.peak = max(self.peak, total)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def warm(server: ServiceServer, size: int) -> None:
    """Wait until the pool is full, so the load meets warm kernels."""
    deadline = time.monotonic() + 300
    while len(our_kernel_pids()) < size and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--pool", type=int, default=0, help="warm kernels (0: none)")
    parser.add_argument("--max-live-kernels", type=int, default=None, help="the live cap [default: --concurrent]")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-server-") as data, OpenAIServer() as model:
        model.add(*([scripted] * (3 * args.runs)))
        with ServiceServer(Path(data), model.base_url, max_running=args.concurrent,
                           max_threads_live=args.max_live_kernels or args.concurrent, pool_size=args.pool) as server:
            asyncio.run(warm(server, args.pool))
            with PeakMemory() as memory:
                started = time.monotonic()
                results = asyncio.run(load(server.url, args.runs))
                wall = time.monotonic() - started
    first = sorted(r[0] for r in results)
    answer = sorted(r[1] for r in results)
    p95 = lambda xs: xs[min(len(xs) - 1, int(0.95 * len(xs)))]
    completed = sum(1 for r in results if r[2] == "completed")
    print(f"runs {args.runs}, {args.concurrent} at once, pool {args.pool}: {completed} completed in {wall:.1f} s "
          f"({args.runs / wall:.2f} runs/s)")
    print(f"time to first token: p50 {statistics.median(first):.2f} s, p95 {p95(first):.2f} s")
    print(f"time to answer:      p50 {statistics.median(answer):.2f} s, p95 {p95(answer):.2f} s")
    print(f"peak memory (server process + kernels): {memory.peak / 2**20:.0f} MiB")
    print(f"kernels left: {len(our_kernel_pids())}")


if __name__ == "__main__":
    main()
