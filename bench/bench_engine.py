"""Issue 50's benchmark: the one round engine's overhead, in run mode and in plan mode.

Both sides use one started kernel (``AsyncKernelSession``) and the same cells, each of which computes for
a while (``_WORK_S``, about what an analysis cell takes); the baseline executes them directly on the
session, one after the other, while ours runs them as rounds through ``RoundEngine`` with the scripted
model: a 10-round run (``AsyncAgent.stream``: setup cell, probe, every round's streamed reply, its
files listed and the notebook saved) and a plan of five one-round tasks (``stream_plan``: the plan's
request, each task's prompt, probe, rounds and the state, notebook and report written after it).

The target: the engine's overhead no more than 5 % above what the code before the one engine measured
on the same machine (``_BEFORE``: its ratios, measured with this module on the pre-engine tree,
2026-11-28), so ``max_ratio`` is that ratio times 1.05.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from report import Row, Scale, scaled

from kernel_agent.agent.run.agent import AsyncAgent
from kernel_agent.events import PlanFinished, RunFinished
from kernel_agent.kernel.interface import Kernel
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.model.scripted import ScriptedChatModel

NAME = "engine"
_WORK_S = 0.25  # each cell's own time: the analysis the rounds are around
# ours / baseline, measured with this module before the one engine (main at bcfc864), full scale
_BEFORE = {"run": 1.22, "plan": 2.12}  # two runs each at load ~2.5: 1.22/1.22, 2.12/2.11 (at load 7: 1.6, 4.0)


def _cells(count: int, work_s: float) -> list[str]:
    """Distinct cells (the stuck guard stops repeats), each computing for ``work_s``."""
    return [
        f"import time\nstart = time.perf_counter()\nwhile time.perf_counter() - start < {work_s}:\n"
        f"    pass\nvalue_{n} = {n} * 2\nprint('value', value_{n})"
        for n in range(count)
    ]


@asynccontextmanager
async def _lent(session: Kernel) -> AsyncIterator[Kernel]:
    """The started session, lent to a run and kept running after it."""
    yield session


async def _directly(session: Kernel, cells: list[str]) -> float:
    started = time.perf_counter()
    for cell in cells:
        result = await session.execute(cell, 600)
        if not result.ok:
            raise RuntimeError(f"a baseline cell failed: {result.error}")
    return time.perf_counter() - started


async def _run(session: Kernel, workspace: Path, cells: list[str]) -> float:
    replies = [f"<Code>\n{cell}\n</Code>" for cell in cells] + ["<Answer>done</Answer>"]
    agent = AsyncAgent(
        chat_model=ScriptedChatModel(replies),
        protocol="tags",
        max_rounds=len(replies),
        preload=False,
        session_factory=lambda _: _lent(session),
    )
    started = time.perf_counter()
    async with agent:
        async for event in agent.stream("bench", workspace=workspace, notebook=workspace.with_suffix(".ipynb")):
            if isinstance(event, RunFinished) and event.run.stop_reason != "answer":
                raise RuntimeError(f"the run stopped: {event.run.stop_reason}")
    return time.perf_counter() - started


async def _plan(session: Kernel, workspace: Path, cells: list[str]) -> float:
    ids = [f"task{n}" for n in range(len(cells))]
    replies = [json.dumps({"nodes": [{"id": i, "title": i} for i in ids]})]
    for cell in cells:  # each task: its code, then the reply without code that ends it
        replies += [f"```python\n{cell}\n```", "Done."]
    agent = AsyncAgent(
        chat_model=ScriptedChatModel(replies), preload=False, exec_timeout=600, session_factory=lambda _: _lent(session)
    )
    started = time.perf_counter()
    async with agent:
        async for event in agent.stream_plan("bench", (), workspace, workspace.with_suffix(".ipynb")):
            if isinstance(event, PlanFinished) and event.counts["done"] != len(cells):
                raise RuntimeError(f"plan tasks failed: {event.counts}")
    return time.perf_counter() - started


async def _measure(mode: str, count: int, work_s: float) -> tuple[float, float]:
    cells = _cells(count, work_s)
    with tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        ours_dir, base_dir = Path(tmp) / "ours", Path(tmp) / "base"
        ours_dir.mkdir()
        base_dir.mkdir()
        async with AsyncKernelSession(base_dir) as session:
            baseline = await _directly(session, cells)
        async with AsyncKernelSession(ours_dir) as session:
            ours = await (_run if mode == "run" else _plan)(session, ours_dir, cells)
    return ours, baseline


def run_rounds(scale: Scale) -> list[Row]:
    """A 10-round run through the engine vs its cells executed directly (3 quick rounds in a smoke run)."""
    count, work_s = scaled(scale, 10, 10, 3), scaled(scale, _WORK_S, _WORK_S, 0.0)
    ours, baseline = asyncio.run(_measure("run", count, work_s))
    return [
        Row(
            f"{count}-round run through the round engine vs its cells on the session (target: the "
            f"pre-engine ratio {_BEFORE['run']:.2f} + 5 %)",
            ours,
            baseline,
            max_ratio=_BEFORE["run"] * 1.05,
        )
    ]


def plan_rounds(scale: Scale) -> list[Row]:
    """A plan of five one-round tasks through the engine vs its cells executed directly (2 in a smoke run)."""
    count, work_s = scaled(scale, 5, 5, 2), scaled(scale, _WORK_S, _WORK_S, 0.0)
    ours, baseline = asyncio.run(_measure("plan", count, work_s))
    return [
        Row(
            f"{count}-task plan through the round engine vs its cells on the session (target: the "
            f"pre-engine ratio {_BEFORE['plan']:.2f} + 5 %)",
            ours,
            baseline,
            max_ratio=_BEFORE["plan"] * 1.05,
        )
    ]


PARTS = {"run_rounds": run_rounds, "plan_rounds": plan_rounds}
