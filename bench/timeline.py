"""Where a warm run's own time goes: the phases of ``bench_kernels``' 10-round analysis, timed.

Not a benchmark row (nothing here has a target): a profiling aid for the ``kernels.analysis`` row.
It runs the same scripted analysis of a ~50 MB CSV on kernels from a warm pool, ``--runs`` times in
one process (each from a full pool), with timing wrappers around the agent's phases, and prints per
run the whole time, the executions' sum and, per phase, how often it ran, its total and its first
start (ms from the run's start), and the time between rounds: from the model's reply to the code
running, and from the code done to the round saved.

    .venv/bin/python bench/timeline.py [--runs 3] [--rows 930000]

The wrappers patch the agent's classes in this process only; they cost a few microseconds a call.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_agent import _make_csv, _rounds, _TimedModel

from kernel_agent.agent.datafiles import data as data_module
from kernel_agent.agent.run import agent as agent_module
from kernel_agent.agent.run import loop as loop_module
from kernel_agent.agent.run import preparation as preparation_module
from kernel_agent.agent.run import rounds as rounds_module
from kernel_agent.agent.run import staging as staging_module
from kernel_agent.events import ExecutionFinished, RoundFinished
from kernel_agent.kernel import files as files_module
from kernel_agent.kernel.pool import KernelPool
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.notebook import writer as writer_module

PHASES: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)  # phase -> (start, duration)
_ORIGIN = [0.0]


def _timed(owner: Any, name: str, label: str) -> None:
    function: Callable[..., Any] = getattr(owner, name)
    if asyncio.iscoroutinefunction(function):

        @functools.wraps(function)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await function(*args, **kwargs)
            finally:
                PHASES[label].append((started - _ORIGIN[0], time.perf_counter() - started))
    else:

        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                PHASES[label].append((started - _ORIGIN[0], time.perf_counter() - started))

    setattr(owner, name, wrapper)


def _instrument() -> None:
    rounds = rounds_module.Rounds
    _timed(staging_module, "_checked_data", "check data")
    _timed(data_module.CheckedData, "summaries", "describe")
    _timed(data_module.CheckedData, "install", "record copies")
    _timed(files_module.CopiedFiles, "put", "kernel's copies")
    _timed(preparation_module.Preparation, "new_run", "begin")
    _timed(preparation_module.Preparation, "environment", "probe")
    _timed(rounds, "_save", "save (awaited)")
    _timed(writer_module.RunWriter, "save", "  in its thread")
    _timed(writer_module.RunWriter, "_write_clean", "clean view (background)")
    _timed(loop_module.RoundEngine, "_disk_usage", "disk usage")
    _timed(files_module.CopiedFiles, "snapshot", "listing")
    _timed(AsyncKernelSession, "execute", "execute")


async def _runs(csv: Path, scratch: Path, count: int) -> None:
    async with KernelPool(size=1) as kernels:
        await asyncio.gather(kernels.wait_ready(), asyncio.to_thread(agent_module.warm_host))
        for index in range(count):
            await kernels.wait_ready()
            PHASES.clear()
            model = _TimedModel([f"<Code>\n{code}\n</Code>" for code in _rounds()] + ["<Answer>done</Answer>"])
            agent = agent_module.AsyncAgent(
                protocol="tags", chat_model=model, exec_timeout=600, max_rounds=20, session_factory=kernels.acquire
            )
            _ORIGIN[0] = started = time.perf_counter()
            marks: list[tuple[float, Any]] = []
            async with agent:
                async for event in agent.stream("timeline", data=[csv], workspace=scratch / f"run-{index + 1}"):
                    marks.append((time.perf_counter() - started, event))
            total = time.perf_counter() - started
            _report(index + 1, total, marks, model, started)


def _report(number: int, total: float, marks: list[tuple[float, Any]], model: _TimedModel, started: float) -> None:
    executions = [event.result.duration_s for _, event in marks if isinstance(event, ExecutionFinished)]
    print(
        f"run {number}: {total * 1000:.0f} ms in all, {sum(executions) * 1000:.0f} ms of executions "
        f"({total / sum(executions):.3f}x); first request at {(model.asked[0] - started) * 1000:.0f} ms"
    )
    runs = PHASES.get("execute", [])[1:]  # the first is the setup cell
    saved = [at for at, event in marks if isinstance(event, RoundFinished) and event.round.result is not None]
    answered = [at - started for at in model.answered]
    to_code = sum(start - reply for (start, _), reply in zip(runs, answered, strict=False))
    to_saved = sum(end - (start + duration) for (start, duration), end in zip(runs, saved, strict=False))
    print(
        f"  between rounds, summed: reply -> code running {to_code * 1000:.1f} ms, "
        f"code done -> round saved {to_saved * 1000:.1f} ms; last round saved -> run's end "
        f"{(total - marks[-1][0]) * 1000:.1f} ms"
    )
    for label, calls in sorted(PHASES.items(), key=lambda item: item[1][0][0]):
        print(
            f"  {label:26s} x{len(calls):<3d} {sum(d for _, d in calls) * 1000:7.1f} ms, first at "
            f"{calls[0][0] * 1000:6.1f} ms"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=930_000, help="rows of the CSV (930,000: ~50 MB)")
    options = parser.parse_args()
    _instrument()
    scratch = Path(tempfile.mkdtemp(prefix="ka-timeline-"))
    try:
        csv = scratch / "big.csv"
        _make_csv(csv, options.rows)
        asyncio.run(_runs(csv, scratch, options.runs))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
