"""Load on the service (issue 13): N runs submitted at once over loopback HTTP, the scripted model behind.

Each run: two rounds of code (the second draws a figure), then an answer. Runs over the server's cap
get 429 and are resubmitted (the client queues). Prints: all completed?, throughput, p50/p95 time to
first streamed token and to the answer, CPU per run and peak memory of the server and of the kernels
apart, kernels left. The client runs in a process of its own, so this process is the server (and the
scripted model, which only picks canned replies). Standalone:

    .venv/bin/python bench/bench_server.py --runs 32 --concurrent 8 [--pool 8] [--profile FILE]

``--pool N`` serves with a warm pool of N kernels (``kernel-agent serve --pool N``), filled before the
clock starts. ``--profile FILE`` runs the service's event loop (its thread: requests, runs, the agent
loops) under cProfile and dumps the stats to FILE (``python -m pstats FILE``); work the loop hands to
threads (disk, notebooks) is not in it. Server CPU is this process's (all threads) while the load
runs; kernel CPU is every kernel process's (and their bwraps') as last sampled while the load runs
(every 0.2 s, as memory: RSS of this process; of the kernels and their bwraps).

``--replicas 1,2,3`` (issue 28) runs the same load, ``--concurrent`` runs in flight at once in all (the
client holds the rest back), spread round-robin over N ``kernel-agent serve`` processes on one real
PostgreSQL (started here) and one data dir, each replica running and keeping alive ``--concurrent``/N
(rounded up), each run followed by SSE on the *next* replica, after a baseline row for the single
process on SQLite (``--concurrent`` of each); then the takeover time: a
replica SIGKILLed mid-round with ``--lease-ttl T``, until the next turn, sent to the other replica,
has answered (target: within T + 2 s)::

    .venv/bin/python bench/bench_server.py --runs 64 --concurrent 16 --replicas 1,2,3 [--lease-ttl 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Self

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


def scripted(body: dict[str, Any]) -> Reply:
    """Round by round from the conversation itself, so concurrent runs can share one script."""
    done = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if done == 0:
        return Reply("Load.", tool_calls=(python_call("values = list(range(1000))\nprint(sum(values))"),))
    if done == 1:
        return Reply("Plot.", tool_calls=(python_call(FIGURE),))
    return Reply("The sum is 499500.")


async def one(start_on: httpx.AsyncClient, follow_on: httpx.AsyncClient, index: int) -> tuple[float, float, str, int]:
    start = time.monotonic()
    refused = 0
    while True:
        response = await start_on.post("/v1/runs", json={"task": f"Run {index}"})
        if response.status_code != 429:
            break
        refused += 1
        await asyncio.sleep(0.2)
    response.raise_for_status()
    run = response.json()
    first = None
    async with follow_on.stream("GET", f"/v1/runs/{run['id']}/events") as events:
        async for line in events.aiter_lines():
            if first is None and '"text_delta"' in line:
                first = time.monotonic() - start
    record = (await follow_on.get(f"/v1/runs/{run['id']}")).json()
    return first or float("nan"), time.monotonic() - start, record["status"], refused


async def load(
    urls: list[str],
    runs: int,
    key: str | None = None,
    at_once: int | None = None,
) -> list[tuple[float, float, str, int]]:
    """``runs`` runs, at most ``at_once`` in flight (None: all at once), run i started on replica i mod N
    and followed on the next one."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    clients = [httpx.AsyncClient(base_url=url, timeout=600, headers=headers) for url in urls]
    gate = asyncio.Semaphore(at_once or runs)

    async def gated(index: int) -> tuple[float, float, str, int]:
        async with gate:
            return await one(clients[index % len(clients)], clients[(index + 1) % len(clients)], index)

    try:
        return await asyncio.gather(*(gated(i) for i in range(runs)))
    finally:
        for client in clients:
            await client.aclose()


def summary(label: str, results: list[tuple[float, float, str, int]], wall: float) -> str:
    first = sorted(r[0] for r in results)
    answer = sorted(r[1] for r in results)

    def p95(xs: list[float]) -> float:
        return xs[min(len(xs) - 1, int(0.95 * len(xs)))]

    completed = sum(1 for r in results if r[2] == "completed")
    return (
        f"{label:<28} {completed:>3}/{len(results)} {len(results) / wall:>7.2f} "
        f"{statistics.median(first):>7.2f} {p95(first):>7.2f} {statistics.median(answer):>7.2f} {p95(answer):>7.2f}"
    )


def replicas(args: argparse.Namespace) -> None:
    """The load on the SQLite single process, then on 1, 2, 3... replicas on PostgreSQL; then a takeover."""
    counts = [int(n) for n in args.replicas.split(",")]
    print(
        f"{args.runs} runs, {args.concurrent} in flight at once in all (each replica runs and keeps alive "
        f"{args.concurrent}/N, rounded up); times in s"
    )
    print(f"{'':<28} {'done':>7} {'runs/s':>7} {'ttft50':>7} {'ttft95':>7} {'ans50':>7} {'ans95':>7}")
    with tempfile.TemporaryDirectory(prefix="bench-server-") as data, OpenAIServer() as model:
        model.add(*([scripted] * (3 * args.runs * (len(counts) + 1))))
        with ServiceServer(
            Path(data) / "sqlite", model.base_url, max_running=args.concurrent, max_live_kernels=args.concurrent
        ) as server:
            started = time.monotonic()
            results = asyncio.run(load([server.url], args.runs, at_once=args.concurrent))
            print(summary("sqlite, 1 process", results, time.monotonic() - started), flush=True)
        with PostgresServer() as postgres:
            for count in counts:
                database = postgres.database(f"bench_{count}")
                share = str(-(-args.concurrent // count))
                options = ("--max-running", share, "--max-live-kernels", share, "--drain-grace", "0")
                folder = Path(data) / f"pg{count}"
                with contextlib.ExitStack() as stack:
                    up = [
                        stack.enter_context(Replica(folder, model.base_url, database=database, options=options))
                        for _ in range(count)
                    ]
                    started = time.monotonic()
                    results = asyncio.run(
                        load([r.url for r in up], args.runs, key="replica-key", at_once=args.concurrent)
                    )
                    print(summary(f"postgresql, {count} replica(s)", results, time.monotonic() - started), flush=True)
            takeover(postgres, model, Path(data) / "takeover", args.lease_ttl)
    print(f"kernels left: {len(our_kernel_pids())}")


def takeover(postgres: PostgresServer, model: OpenAIServer, data: Path, ttl: float) -> None:
    """Seconds from SIGKILL of the replica running a thread to the next turn's answer on the other."""
    database = postgres.database("bench_takeover")
    options = ("--lease-ttl", str(ttl), "--drain-grace", "0", "--pool", "1")  # the rebuild needs no kernel start
    with (
        Replica(data, model.base_url, database=database, options=options) as a,
        Replica(data, model.base_url, database=database, options=options) as b,
    ):
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
        assert response.status_code == 201, response.text
        closing = follow(b.client, response.json()["id"])[-1][1]
        answered = closing["run"]["answer"] if closing["event"] == "finished" else f"no answer: {closing}"
        took = time.monotonic() - killed
        kernels_gone = not kernels_of(a.pid)
    verdict = "met" if took <= ttl + 2 else "MISSED"
    print(
        f"takeover: SIGKILL to the next turn's answer {took:.2f} s with --lease-ttl {ttl:g} "
        f"(target {ttl + 2:g} s: {verdict}; the turn was accepted after {accepted:.2f} s, the rest is its kernel's "
        f"rebuild and the answer); answer {answered!r}; dead replica's kernels gone: {kernels_gone}"
    )


class PeakMemory:
    """The largest RSS of this process (the server), of its descendants but ``skip`` (the kernels), and of
    both together, sampled in a thread; and each descendant's CPU seconds as last seen (``kernel_cpu``: a
    process's last 0.2 s before it exits are missed)."""

    def __init__(self, period: float = 0.2) -> None:
        self.period = period
        self.peak = self.server = self.kernels = 0
        self.skip: set[int] = set()
        self.cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.period):
            kernels = 0
            for process in me.children(recursive=True):
                try:
                    if process.pid not in self.skip:
                        kernels += process.memory_info().rss
                        times = process.cpu_times()
                        self.cpu[process.pid] = times.user + times.system
                except psutil.Error:  # gone between listing and reading
                    pass
            server = me.memory_info().rss
            self.server, self.kernels = max(self.server, server), max(self.kernels, kernels)
            self.peak = max(self.peak, server + kernels)

    @property
    def kernel_cpu(self) -> float:
        return sum(self.cpu.values())

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


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def client(url: str, runs: int) -> None:
    """The load, in a process of its own: prints its results as JSON."""
    print(json.dumps({"results": asyncio.run(load([url], runs))}))


def _profiled(server: ServiceServer, path: str) -> None:
    """Run the service's loop thread under cProfile; dump the stats to ``path`` when it ends."""
    profile = cProfile.Profile()

    def profiled() -> None:
        try:
            profile.runcall(server.server.run, sockets=[server.socket])
        finally:
            profile.dump_stats(path)

    server.thread = threading.Thread(target=profiled, daemon=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--pool", type=int, default=0, help="warm kernels (0: none)")
    parser.add_argument("--max-live-kernels", type=int, default=None, help="the live cap [default: --concurrent]")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the service's event loop into FILE")
    parser.add_argument("--client", nargs=2, metavar=("URL", "RUNS"), help=argparse.SUPPRESS)
    parser.add_argument("--replicas", default=None, metavar="N,N,...", help="replica counts on PostgreSQL")
    parser.add_argument("--lease-ttl", type=float, default=5.0, help="the replicas' lease, for the takeover")
    args = parser.parse_args()
    if args.client:
        client(args.client[0], int(args.client[1]))
        return
    if args.replicas:
        replicas(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-server-") as data, OpenAIServer() as model:
        model.add(*([scripted] * (3 * args.runs)))
        server = ServiceServer(
            Path(data),
            model.base_url,
            max_running=args.concurrent,
            max_live_kernels=args.max_live_kernels or args.concurrent,
            pool=args.pool,
        )
        if args.profile:
            _profiled(server, args.profile)
        with server:
            asyncio.run(warm(server, args.pool))
            with PeakMemory() as memory:
                started, server_before = time.monotonic(), _cpu(resource.RUSAGE_SELF)
                load_client = subprocess.Popen(
                    [sys.executable, __file__, "--client", server.url, str(args.runs)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                memory.skip.add(load_client.pid)
                out, _ = load_client.communicate()
                wall, server_cpu = time.monotonic() - started, _cpu(resource.RUSAGE_SELF) - server_before
        measured = json.loads(out.strip().splitlines()[-1])
        results = [tuple(r) for r in measured["results"]]
        kernels_cpu = memory.kernel_cpu
    first = sorted(r[0] for r in results)
    answer = sorted(r[1] for r in results)

    def p95(xs: list[float]) -> float:
        return xs[min(len(xs) - 1, int(0.95 * len(xs)))]

    completed = sum(1 for r in results if r[2] == "completed")
    print(
        f"runs {args.runs}, {args.concurrent} at once, pool {args.pool}: {completed} completed in {wall:.1f} s "
        f"({args.runs / wall:.2f} runs/s)"
    )
    print(f"time to first token: p50 {statistics.median(first):.2f} s, p95 {p95(first):.2f} s")
    print(f"time to answer:      p50 {statistics.median(answer):.2f} s, p95 {p95(answer):.2f} s")
    print(f"refused with 429 and resubmitted: {sum(r[3] for r in results)} requests")
    print(
        f"CPU per run: server {server_cpu / args.runs:.2f} s, kernels {kernels_cpu / args.runs:.2f} s "
        f"(server {server_cpu:.1f} s, kernels {kernels_cpu:.1f} s in all)"
    )
    print(
        f"peak memory: server {memory.server / 2**20:.0f} MiB, kernels {memory.kernels / 2**20:.0f} MiB, "
        f"both at once {memory.peak / 2**20:.0f} MiB"
    )
    print(f"kernels left: {len(our_kernel_pids())}")


if __name__ == "__main__":
    main()
