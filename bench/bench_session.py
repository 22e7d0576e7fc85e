"""Issue 2's benchmark of the kernel session: ``NAME`` and ``PARTS`` for ``run.py``.

Each part is a function ``(quick) -> list[Row]`` that starts what it needs,
measures ours against a baseline in the same run (interleaved, so warm-up
and background noise fall on both alike) and cleans up after itself:

* ``roundtrip``: ``1+1`` through ``KernelSession.execute`` against raw
  jupyter_client on the same kernel.
* ``coldstart``: a new session to its first result, against a stock ipykernel.
* ``timeout``: how long past the deadline a runaway cell's result comes back,
  for the interrupt path and for the restart path.
* ``subprocess``: the same 25-step workload through our session and through a
  DeepAnalyze-style process per call.

A wrong answer from either side raises: a fast wrong benchmark is worthless.
"""

from __future__ import annotations

import asyncio
import csv
import random
import shutil
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deepanalyze
import raw
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from report import Row, Scale, median, p95, scaled

from kernel_agent.kernel.outputs import OutputCollector
from kernel_agent.kernel.providers.local import LocalProvider
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.kernel.session_sync import KernelSession
from kernel_agent.result import ExecutionResult

NAME = "session"

ROUNDTRIP_CODE = "1+1"
IMPORTS = "import pandas, matplotlib.pyplot"
SPIN = "while True:\n    pass"
STUBBORN = "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass"
DEADLINE_S = 1.0
PANDAS_STEP = """import pandas as pd
df = pd.read_csv("sales.csv")
top = df[df.amount > {cut}].groupby("region").amount.agg(["count", "sum"])
print(top.round(2).to_string())
"""


# ------------------------------------------------------------------ round-trip
def roundtrip(quick: Scale) -> list[Row]:
    """Median and p95 of ``1+1``, ours and raw, in short alternating blocks on one kernel.

    Blocks of 10 rather than 100: on a shared 2-core machine the background
    load changes within a second, and short blocks spread it evenly.
    """
    blocks, per_block = scaled(quick, (100, 10), (10, 10), (1, 2))
    with KernelSession() as session:
        runners = _roundtrip_runners(session)
        for run in runners.values():
            run(20)  # warm-up, discarded
        samples: dict[str, list[float]] = {name: [] for name in runners}
        cpu = dict.fromkeys(runners, 0.0)  # this process's CPU (all threads): what the client side costs
        for block in range(blocks):
            for name in _rotated(list(runners), block):
                started = time.process_time()
                samples[name] += runners[name](per_block)
                cpu[name] += time.process_time() - started
        messages = session._loop.run(raw.iopub_messages(_local(session.async_session)[1], ROUNDTRIP_CODE))
    base, n = samples["raw"], blocks * per_block
    return [
        Row(
            f"`1+1` round-trip, median, n={n}: KernelSession vs raw jupyter_client",
            median(samples["sync"]),
            median(base),
            max_ratio=1.10,
        ),
        Row("`1+1` round-trip, p95: same", p95(samples["sync"]), p95(base)),
        Row("  ↳ AsyncKernelSession (no thread hop) vs raw, median", median(samples["async"]), median(base)),
        Row("  ↳ raw + the facade's thread hop vs raw, median", median(samples["raw_hop"]), median(base)),
        Row("  ↳ client-side CPU per execute: KernelSession vs raw", cpu["sync"] / n, cpu["raw"] / n),
        Row("  ↳ of which folding the iopub messages into outputs", _fold_seconds(messages)),
    ]


def _fold_seconds(messages: list[dict[str, Any]], number: int = 200) -> float:
    """What ``OutputCollector`` costs for these messages: best of 5 batches, per execute."""
    msg_id = messages[0]["parent_header"]["msg_id"]

    def fold() -> None:
        collector = OutputCollector(msg_id)
        for msg in messages:
            collector.feed(msg)
        collector.finish()

    return min(timeit.repeat(fold, number=number, repeat=5)) / number


def _local(session: AsyncKernelSession) -> tuple[AsyncKernelManager, AsyncKernelClient]:
    """The started session's manager and client: raw jupyter_client runs over the very same sockets."""
    provider = session.provider
    assert isinstance(provider, LocalProvider), provider
    assert provider.manager is not None and provider.client is not None, "the session is not started"
    return provider.manager, provider.client


def _roundtrip_runners(session: KernelSession) -> dict[str, Callable[[int], list[float]]]:
    loop = session._loop  # the facade's private loop: the async session and its sockets live there
    inner = session.async_session
    client = _local(inner)[1]

    def sync(count: int) -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            result = session.execute(ROUNDTRIP_CODE)
            times.append(time.perf_counter() - started)
            _expect(result.result_text == "2", result)
        return times

    def raw_hop(count: int) -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            loop.run(raw.roundtrip(client, ROUNDTRIP_CODE))
            times.append(time.perf_counter() - started)
        return times

    return {
        "sync": sync,
        "async": lambda count: loop.run(_async_roundtrips(inner, count)),
        "raw": lambda count: loop.run(raw.timed_roundtrips(client, ROUNDTRIP_CODE, count)),
        "raw_hop": raw_hop,
    }


async def _async_roundtrips(session: AsyncKernelSession, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        result = await session.execute(ROUNDTRIP_CODE)
        times.append(time.perf_counter() - started)
        _expect(result.result_text == "2", result)
    return times


# ------------------------------------------------------------------ cold start
def cold_start(quick: Scale) -> list[Row]:
    """A new session to its first result, with and without the pandas/pyplot imports."""
    runs = scaled(quick, 5, 2, 1)
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-"))
    try:
        ipython_dir = scratch / "ipython"
        measures: dict[str, Callable[[], float]] = {
            "ours": lambda: _session_cold(ROUNDTRIP_CODE),
            "stock": lambda: asyncio.run(raw.cold_start(ROUNDTRIP_CODE, scratch, ipython_dir)),
            "ours_imports": lambda: _session_cold(IMPORTS),
            "stock_imports": lambda: asyncio.run(raw.cold_start(IMPORTS, scratch, ipython_dir)),
        }
        for measure in measures.values() if quick != Scale.SMOKE else ():
            measure()  # warm-up: .pyc files, the page cache, the stock kernel's profile
        samples = _interleaved(measures, runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [
        Row(
            f"cold start → `1+1` done, median of {runs}: KernelSession vs stock ipykernel",
            median(samples["ours"]),
            median(samples["stock"]),
        ),
        Row(
            f"cold start → pandas + pyplot imported, median of {runs}: same",
            median(samples["ours_imports"]),
            median(samples["stock_imports"]),
        ),
    ]


def _session_cold(code: str) -> float:
    started = time.perf_counter()
    session = KernelSession()
    try:
        session.start()
        result = session.execute(code)
        elapsed = time.perf_counter() - started
    finally:
        session.close()
    _expect(result.status == "ok", result)
    return elapsed


# ------------------------------------------------------------------ timeouts
def timeouts(quick: Scale) -> list[Row]:
    """Seconds past a 1 s deadline until the result is back: interrupt path and restart path."""
    spins, stubborn = scaled(quick, (5, 3), (2, 1), (1, 1))
    with KernelSession() as session:
        loop, inner = session._loop, session.async_session

        def ours(code: str, state_lost: bool) -> float:
            started = time.perf_counter()
            result = session.execute(code, timeout=DEADLINE_S)
            past = time.perf_counter() - started - DEADLINE_S
            _expect(result.status == "timeout" and result.state_lost is state_lost, result)
            _expect(session.execute(ROUNDTRIP_CODE).result_text == "2", "the kernel is not usable after the timeout")
            return past

        def floor(code: str, restart: bool) -> float:
            manager, client = _local(inner)
            return loop.run(raw.stop_at_deadline(manager, client, code, DEADLINE_S, restart=restart))

        spin = _interleaved({"ours": lambda: ours(SPIN, False), "raw": lambda: floor(SPIN, False)}, spins)
        stuck = _interleaved({"ours": lambda: ours(STUBBORN, True), "raw": lambda: floor(STUBBORN, True)}, stubborn)
    return [
        Row(
            f"past a 1 s deadline, `while True: pass`, median of {spins}: ours vs bare interrupt",
            median(spin["ours"]),
            median(spin["raw"]),
            max_seconds=0.5,
        ),
        Row(
            f"past a 1 s deadline, loop swallowing KeyboardInterrupt, median of {stubborn}: ours vs bare restart",
            median(stuck["ours"]),
            median(stuck["raw"]),
            max_seconds=3.0,
        ),
    ]


# ------------------------------------------------------------------ process per call
def subprocess_executor(quick: Scale) -> list[Row]:
    """The same 25 steps (5 in a smoke run) through one session and through a new process per step."""
    reps = scaled(quick, 3, 1, 1)
    workspace = Path(tempfile.mkdtemp(prefix="ka-bench-ws-"))
    try:
        _write_sales(workspace / "sales.csv")
        steps = _workload()[: scaled(quick, None, None, 5)]
        if quick != Scale.SMOKE:
            deepanalyze.execute("pass", workspace)  # warm-up
        ours: list[dict[str, Any]] = []
        theirs: list[dict[str, Any]] = []
        for rep in range(reps):
            for side in _rotated(["ours", "theirs"], rep):
                if side == "ours":
                    ours.append(_run_session(workspace, steps))
                else:
                    theirs.append(_run_processes(workspace, steps))
        _expect(ours[0]["outputs"] == theirs[0]["outputs"], "the two executors printed different things")
    finally:
        shutil.rmtree(workspace, ignore_errors=True)

    def pick(runs: list[dict[str, Any]], key: str) -> float:
        return median([run[key] for run in runs])

    def step(runs: list[dict[str, Any]], kind: str) -> float:
        return median([t for run in runs for t in run["steps"][kind]])

    return [
        Row(
            f"{len(steps)}-step workload, median of {reps}: warm KernelSession vs a process per call",
            pick(ours, "warm"),
            pick(theirs, "warm"),
        ),
        Row("  ↳ same, our session's start included", pick(ours, "cold"), pick(theirs, "warm")),
        Row("  ↳ one `print(1+1)` step, median", step(ours, "print"), step(theirs, "print")),
        Row("  ↳ one pandas step, median", step(ours, "pandas"), step(theirs, "pandas")),
    ]


def _workload() -> list[tuple[str, str]]:
    steps = []
    for i in range(5):
        steps.append(("pandas", PANDAS_STEP.format(cut=i * 10)))
        steps += [("print", "print(1+1)")] * 4
    return steps


def _write_sales(path: Path, rows: int = 20_000) -> None:
    rng = random.Random(0)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["region", "product", "amount"])
        for _ in range(rows):
            writer.writerow([rng.choice("NESWC"), rng.randrange(40), round(rng.uniform(0, 100), 2)])


def _run_session(workspace: Path, steps: list[tuple[str, str]]) -> dict[str, Any]:
    started = time.perf_counter()
    with KernelSession(workspace) as session:
        ready = time.perf_counter()
        outputs, per_step = _timed_steps(steps, lambda code: _stdout_ok(session.execute(code)))
        done = time.perf_counter()
    return {"cold": done - started, "warm": done - ready, "steps": per_step, "outputs": outputs}


def _run_processes(workspace: Path, steps: list[tuple[str, str]]) -> dict[str, Any]:
    started = time.perf_counter()
    outputs, per_step = _timed_steps(steps, lambda code: deepanalyze.execute(code, workspace))
    return {"warm": time.perf_counter() - started, "steps": per_step, "outputs": outputs}


def _timed_steps(steps: list[tuple[str, str]], run: Callable[[str], str]) -> tuple[list[str], dict[str, list[float]]]:
    outputs: list[str] = []
    per_step: dict[str, list[float]] = {"print": [], "pandas": []}
    for kind, code in steps:
        started = time.perf_counter()
        outputs.append(run(code))
        per_step[kind].append(time.perf_counter() - started)
    return outputs, per_step


def _stdout_ok(result: ExecutionResult) -> str:
    _expect(result.status == "ok", result)
    return result.stdout


# ------------------------------------------------------------------ helpers
def _interleaved(measures: dict[str, Callable[[], float]], runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for run in range(runs):
        for name in _rotated(list(measures), run):
            samples[name].append(measures[name]())
    return samples


def _rotated(names: list[str], shift: int) -> list[str]:
    shift %= len(names)
    return names[shift:] + names[:shift]


def _expect(condition: bool, what: object) -> None:
    if not condition:
        raise RuntimeError(f"benchmark sanity check failed: {what!r}")


PARTS: dict[str, Callable[[Scale], list[Row]]] = {
    "roundtrip": roundtrip,
    "coldstart": cold_start,
    "timeout": timeouts,
    "subprocess": subprocess_executor,
}
