"""Issue 12's benchmark: the warm pool and kernels on a gateway. ``NAME`` and ``PARTS`` for ``run.py``.

* ``pool``: ``acquire()`` from a warm ``KernelPool`` to a kernel that has
  answered ``1+1``, vs a cold session start to its first ``1+1``
  (alternating); target: acquire ≤ 50 ms median.
* ``gateway``: ``1+1`` round-trips on a kernel behind a real ``jupyter
  kernelgateway`` on 127.0.0.1 (started here, twice: stock, and with our
  server-side TCP_NODELAY connection class), and behind a real Jupyter
  Enterprise Gateway (stock: it has no such option), vs a local session, in
  alternating blocks of 10; target with server-side NODELAY ≤ 1.2× local.
  Our side always sets TCP_NODELAY and quick ACKs. The local kernel is
  sandboxed; the gateways' are not (their isolation is the gateway's).
* ``concurrent``: 16 sandboxed sessions started at once on this machine,
  each running 20 small executes; all must finish with their state intact;
  per-execute latency p50/p95 (information; ``run.py`` checks nothing leaked).
* ``analysis``: ``bench_agent``'s scripted 10-round analysis of a ~50 MB CSV
  on a kernel from a warm ``KernelPool`` (full before each run starts, as
  between two runs): the whole run (acquire, data file in, setup cell, ten
  rounds, notebook) vs the sum of its ten executions, the median of three
  runs of one process, its first included (target ≤ 1.1×; the first alone
  for information), and vs a fresh ``python file.py`` per round
  (``deepanalyze.py``), both sides' printed results checked against each other.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_agent import _through_agent, side_by_side
from report import Row, median, p95, scaled

from kernel_agent.agent.run.agent import warm_host
from kernel_agent.kernel.pool import KernelPool
from kernel_agent.kernel.session import AsyncKernelSession

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from enterprise_gateway import EnterpriseGateway
from gateway import KernelGateway

NAME = "kernels"


# ------------------------------------------------------------------ pool
def pool(quick: bool) -> list[Row]:
    """Warm acquire (to a first ``1+1``) vs cold start (to a first ``1+1``), alternating."""
    return asyncio.run(_pool(scaled(quick, 8, 2, 1)))


async def _pool(count: int) -> list[Row]:
    warm: list[float] = []
    cold: list[float] = []
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-pool-"))
    try:
        async with KernelPool(size=1) as kernels:
            for index in range(count):
                await kernels.wait_ready()  # the pool is full again, as between two runs
                started = time.perf_counter()
                async with kernels.acquire(scratch / f"warm-{index}") as kernel:
                    await _check(kernel)
                    warm.append(time.perf_counter() - started)
                started = time.perf_counter()
                async with AsyncKernelSession(scratch / f"cold-{index}") as kernel:
                    await _check(kernel)
                    cold.append(time.perf_counter() - started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [
        Row("pool acquire() to first 1+1 vs cold session start", median(warm), median(cold)),
        Row("  ↳ acquire from a warm pool (median)", median(warm), max_seconds=0.050),
    ]


async def _check(kernel: AsyncKernelSession) -> None:
    if (await kernel.execute("1+1")).result_text != "2":
        raise RuntimeError("the kernel answered 1+1 wrongly")


# ------------------------------------------------------------------ gateway
def gateway(quick: bool) -> list[Row]:
    """``1+1`` over a stock and a NODELAY Kernel Gateway and a stock Enterprise Gateway vs local, blocks of 10."""
    blocks = scaled(quick, 15, 3, 1)
    rows = []
    servers: tuple[tuple[str, Callable[[], KernelGateway | EnterpriseGateway]], ...] = (
        ("gateway (without server TCP_NODELAY)", lambda: KernelGateway()),
        ("gateway (with server TCP_NODELAY)", lambda: KernelGateway(nodelay=True)),
        ("Enterprise Gateway (stock)", EnterpriseGateway),
    )
    for label, make in servers:
        with make() as server:
            remote, local = asyncio.run(_roundtrips(server, blocks))
        nodelay = "with server" in label
        rows.append(
            Row(f"1+1 via {label} vs local, p50", median(remote), median(local), max_ratio=1.2 if nodelay else None)
        )
        rows.append(Row(f"  ↳ p95 ({label}) vs local p95", p95(remote), p95(local)))
    return rows


async def _roundtrips(server: KernelGateway, blocks: int) -> tuple[list[float], list[float]]:
    samples: dict[str, list[float]] = {"remote": [], "local": []}
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-gw-"))
    try:
        env = {"KERNEL_USERNAME": EnterpriseGateway.username}  # the one user the test Enterprise Gateway admits
        async with (
            AsyncKernelSession(scratch / "remote", gateway=server.url, gateway_token=server.token, env=env) as remote,
            AsyncKernelSession(scratch / "local") as local,
        ):
            sides = {"remote": remote, "local": local}
            for block in range(blocks):
                for name in ("remote", "local") if block % 2 == 0 else ("local", "remote"):
                    for _ in range(10):
                        started = time.perf_counter()
                        result = await sides[name].execute("1+1")
                        samples[name].append(time.perf_counter() - started)
                        if result.result_text != "2":
                            raise RuntimeError(f"{name} answered 1+1 wrongly")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return samples["remote"], samples["local"]


# ------------------------------------------------------------------ concurrent
def concurrent(quick: bool) -> list[Row]:
    """16 sessions at once (4 in ``--quick``), each 20 small executes; every one must complete."""
    return asyncio.run(_concurrent(scaled(quick, 16, 4, 2)))


async def _concurrent(count: int) -> list[Row]:
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-many-"))
    latencies: list[float] = []

    async def one(index: int) -> None:
        async with AsyncKernelSession(scratch / f"s{index}") as kernel:
            await kernel.execute(f"total = {index}")
            for step in range(20):
                started = time.perf_counter()
                result = await kernel.execute(f"total += {step}; total")
                latencies.append(time.perf_counter() - started)
                if result.status != "ok":
                    raise RuntimeError(f"session {index} failed: {result.status}")
            if (await kernel.execute("total")).result_text != str(index + sum(range(20))):
                raise RuntimeError(f"session {index} lost its state")

    started = time.perf_counter()
    try:
        await asyncio.gather(*(one(index) for index in range(count)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.perf_counter() - started
    return [
        Row(f"{count} concurrent sessions: wall time, all complete", wall),
        Row(f"  ↳ per-execute latency p50 ({count} at once)", median(latencies)),
        Row(f"  ↳ per-execute latency p95 ({count} at once)", p95(latencies)),
    ]


# ------------------------------------------------------------------ analysis
WARM_RUNS = 3  # one process's runs, each from a full pool: the row is their median (the first included)


def analysis(quick: bool) -> list[Row]:
    """The 10-round analysis from a warm pool vs its executions alone and vs a process per round."""
    runs: list[tuple[float, list[float], list[str]]] = []
    size_mb, _, (theirs_total, _, _) = side_by_side(
        quick,
        "ka-bench-warm-",
        lambda csv, workspace, rounds: _warm_runs(csv, workspace, scaled(quick, WARM_RUNS, 1, 1), runs, rounds),
    )
    n = len(runs[0][1])
    ratios = [total / sum(rounds) for total, rounds, _ in runs]
    middle = sorted(range(len(runs)), key=ratios.__getitem__)[len(runs) // 2]
    total, rounds, _ = runs[middle]
    first_total, first_rounds, _ = runs[0]
    return [
        Row(
            f"{n}-round analysis of a {size_mb:.0f} MB CSV from a warm pool: whole run vs its {n} executions "
            f"(median of {len(runs)} runs of one process; each: " + ", ".join(f"{r:.3f}×" for r in ratios) + ")",
            total,
            sum(rounds),
            max_ratio=1.1,
        ),
        Row("  ↳ the process's first run alone", first_total, sum(first_rounds)),
        Row("  ↳ whole run from a warm pool vs a fresh process per round", total, theirs_total),
    ]


async def _warm_runs(
    csv: Path, workspace: Path, count: int, runs: list[tuple[float, list[float], list[str]]], rounds: int | None
) -> tuple[float, list[float], list[str]]:
    """``count`` runs, each on a kernel from a full pool (as between two runs of a service), into ``runs``;
    returns the first."""
    async with KernelPool(size=1) as kernels:  # warm as `serve --pool` is: its kernels and this process
        await asyncio.gather(kernels.wait_ready(), asyncio.to_thread(warm_host))
        for index in range(count):
            await kernels.wait_ready()
            runs.append(await _through_agent(csv, workspace / f"run-{index + 1}", kernels, rounds=rounds))
    return runs[0]


PARTS = {"pool": pool, "gateway": gateway, "concurrent": concurrent, "analysis": analysis}
