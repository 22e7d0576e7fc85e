"""The MCP workbench's notebook writer: off the call's path, resting between writes so a growing session's
rebuilds leave the loop to the calls, and ``flush`` writes everything at once, rest or not."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from kernel_agent.mcp import workbench as workbench_module
from kernel_agent.mcp.workbench import Workbench
from kernel_agent.records import Round, Run, RunInfo
from kernel_agent.result import ExecutionResult

OUTPUT = {"output_type": "execute_result", "execution_count": 1, "data": {"text/plain": "2"}, "metadata": {}}


def record(bench: Workbench, code: str) -> None:
    index = len(bench.run.rounds) + 1
    result = ExecutionResult("ok", outputs=(OUTPUT,), execution_count=index, code=code)
    bench.run = Run(
        info=bench.run.info, rounds=(*bench.run.rounds, Round(index=index, reply="", code=code, result=result))
    )
    bench._schedule_save()


async def written(path: Path, text: str, seconds: float = 30) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.exists() and text in path.read_text():
            return True
        await asyncio.sleep(0.01)
    return False


def test_the_writer_rests_after_a_write_and_flush_cuts_the_rest_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workbench_module, "WRITE_REST", 10_000.0)  # a rest longer than this test could wait

    async def scenario() -> None:
        bench = Workbench(tmp_path / "ws")
        bench.run = Run(info=RunInfo(task="written by the test", started_at="2026-11-25T00:00:00+00:00"))
        record(bench, "first = 1")
        await asyncio.sleep(0)  # the writer has taken its copy of the run and writes it in a thread
        record(bench, "second = 2")  # recorded during that write: the next one comes after a rest
        assert await written(bench.notebook, "first = 1")
        record(bench, "third = 3")
        await asyncio.sleep(0.2)
        assert "second = 2" not in bench.notebook.read_text()  # resting: the loop is left to the calls
        await asyncio.wait_for(bench.flush(), 30)  # no rest for a flush
        text = bench.notebook.read_text()
        assert "second = 2" in text and "third = 3" in text
        record(bench, "fourth = 4")  # a later writer rests again: the flush's hurry does not stick
        await asyncio.sleep(0)
        record(bench, "fifth = 5")
        assert await written(bench.notebook, "fourth = 4")
        await asyncio.sleep(0.2)
        assert "fifth = 5" not in bench.notebook.read_text()
        await asyncio.wait_for(bench.flush(), 30)
        assert "fifth = 5" in bench.notebook.read_text()

    asyncio.run(scenario())
