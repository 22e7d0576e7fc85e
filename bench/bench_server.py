"""Load on the service (issue 13): N runs submitted at once over loopback HTTP, the scripted model behind.

Each run: two rounds of code (the second draws a figure), then an answer. Runs over the server's cap
get 429 and are resubmitted (the client queues). Prints: all completed?, throughput, p50/p95 time to
first streamed token and to the answer, peak memory (this process: the server, the scripted model and
the client; plus every kernel process under it, sampled every 0.2 s), kernels left. Standalone:

    .venv/bin/python bench/bench_server.py --runs 32 --concurrent 8 [--pool 8]

``--pool N`` serves with a warm pool of N kernels (``kernel-agent serve --pool N``), filled before the
clock starts.

``--replicas 1,2,3`` (issue 28) runs the same load, spread round-robin over N ``kernel-agent serve``
processes on one real PostgreSQL (started here) and one data dir, each run followed by SSE on the
*next* replica, after a baseline row for the single process on SQLite; then the takeover time: a
replica SIGKILLed mid-round with ``--lease-ttl T``, until the next turn, sent to the other replica,
has answered (target: within T + 2 s)::

    .venv/bin/python bench/bench_server.py --runs 64 --concurrent 16 --replicas 1,2,3 [--lease-ttl 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from leaks import kernels_of, our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call
from postgres import PostgresServer
from replicas import Replica, follow
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


async def one(start_on: httpx.AsyncClient, follow_on: httpx.AsyncClient, index: int) -> tuple[float, float, str]:
    start = time.monotonic()
    while True:
        response = await start_on.post("/v1/runs", json={"task": f"Run {index}"})
        if response.status_code != 429:
            break
        await asyncio.sleep(0.2)
    response.raise_for_status()
    run = response.json()
    first = None
    async with follow_on.stream("GET", f"/v1/runs/{run['id']}/events") as events:
        async for line in events.aiter_lines():
            if first is None and '"text_delta"' in line:
                first = time.monotonic() - start
    record = (await follow_on.get(f"/v1/runs/{run['id']}")).json()
    return first or float("nan"), time.monotonic() - start, record["status"]


async def load(urls: list[str], runs: int, key: str | None = None) -> list[tuple[float, float, str]]:
    """``runs`` runs at once, run i started on replica i mod N and followed on the next one."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    clients = [httpx.AsyncClient(base_url=url, timeout=600, headers=headers) for url in urls]
    try:
        return await asyncio.gather(*(one(clients[i % len(clients)], clients[(i + 1) % len(clients)], i)
                                      for i in range(runs)))
    finally:
        for client in clients:
            await client.aclose()


def summary(label: str, results: list[tuple[float, float, str]], wall: float) -> str:
    first = sorted(r[0] for r in results)
    answer = sorted(r[1] for r in results)
    p95 = lambda xs: xs[min(len(xs) - 1, int(0.95 * len(xs)))]  # noqa: E731
    completed = sum(1 for r in results if r[2] == "completed")
    return (f"{label:<28} {completed:>3}/{len(results)} {len(results) / wall:>7.2f} "
            f"{statistics.median(first):>7.2f} {p95(first):>7.2f} {statistics.median(answer):>7.2f} {p95(answer):>7.2f}")


def replicas(args: argparse.Namespace) -> None:
    """The load on the SQLite single process, then on 1, 2, 3... replicas on PostgreSQL; then a takeover."""
    counts = [int(n) for n in args.replicas.split(",")]
    print(f"{args.runs} runs, {args.concurrent} at once per replica; times in s")
    print(f"{'':<28} {'done':>7} {'runs/s':>7} {'ttft50':>7} {'ttft95':>7} {'ans50':>7} {'ans95':>7}")
    with tempfile.TemporaryDirectory(prefix="bench-server-") as data, OpenAIServer() as model:
        model.add(*([scripted] * (3 * args.runs * (len(counts) + 1))))
        with ServiceServer(Path(data) / "sqlite", model.base_url, max_running=args.concurrent,
                           max_threads_live=args.concurrent) as server:
            started = time.monotonic()
            results = asyncio.run(load([server.url], args.runs))
            print(summary("sqlite, 1 process", results, time.monotonic() - started), flush=True)
        with PostgresServer() as postgres:
            for count in counts:
                database = postgres.database(f"bench_{count}")
                options = ("--max-running", str(args.concurrent), "--max-live-kernels", str(args.concurrent),
                           "--drain-grace", "0")
                folder = Path(data) / f"pg{count}"
                with contextlib.ExitStack() as stack:
                    up = [stack.enter_context(Replica(folder, model.base_url, database=database, options=options))
                          for _ in range(count)]
                    started = time.monotonic()
                    results = asyncio.run(load([r.url for r in up], args.runs, key="replica-key"))
                    print(summary(f"postgresql, {count} replica(s)", results, time.monotonic() - started), flush=True)
            takeover(postgres, model, Path(data) / "takeover", args.lease_ttl)
    print(f"kernels left: {len(our_kernel_pids())}")


def takeover(postgres: PostgresServer, model: OpenAIServer, data: Path, ttl: float) -> None:
    """Seconds from SIGKILL of the replica running a thread to the next turn's answer on the other."""
    database = postgres.database("bench_takeover")
    options = ("--lease-ttl", str(ttl), "--drain-grace", "0", "--pool", "1")  # the rebuild needs no kernel start
    with Replica(data, model.base_url, database=database, options=options) as a, \
            Replica(data, model.base_url, database=database, options=options) as b:
        model.add(Reply("Set.", tool_calls=(python_call("x = 1"),)), Reply("never sent", pause=600))
        run = a.client.post("/v1/runs", json={"task": "Set x"}).json()
        follow(b.client, run["id"], until="round_finished")
        while model.remaining:
            time.sleep(0.02)
        model.add(Reply("x is 1."))
        a.kill()
        killed = time.monotonic()
        while True:  # 409 while the dead replica's lease has not expired
            response = b.client.post("/v1/runs", json={"task": "And x?", "thread_id": run["thread_id"]})
            if response.status_code != 409:
                break
            time.sleep(0.05)
        accepted = time.monotonic() - killed
        answered = follow(b.client, response.json()["id"])[-1][1]["run"]["answer"]
        took = time.monotonic() - killed
        kernels_gone = not kernels_of(a.pid)
    verdict = "met" if took <= ttl + 2 else "MISSED"
    print(f"takeover: SIGKILL to the next turn's answer {took:.2f} s with --lease-ttl {ttl:g} "
          f"(target {ttl + 2:g} s: {verdict}; the turn was accepted after {accepted:.2f} s, the rest is its kernel's "
          f"rebuild and the answer); answer {answered!r}; dead replica's kernels gone: {kernels_gone}")


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
    parser.add_argument("--replicas", default=None, metavar="N,N,...", help="replica counts on PostgreSQL")
    parser.add_argument("--lease-ttl", type=float, default=5.0, help="the replicas' lease, for the takeover")
    args = parser.parse_args()
    if args.replicas:
        replicas(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-server-") as data, OpenAIServer() as model:
        model.add(*([scripted] * (3 * args.runs)))
        with ServiceServer(Path(data), model.base_url, max_running=args.concurrent,
                           max_threads_live=args.max_live_kernels or args.concurrent, pool_size=args.pool) as server:
            asyncio.run(warm(server, args.pool))
            with PeakMemory() as memory:
                started = time.monotonic()
                results = asyncio.run(load([server.url], args.runs))
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
