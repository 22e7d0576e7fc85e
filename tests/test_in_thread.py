"""Blocking work in async code goes through ``_loop.in_thread`` (finished even when its caller is cancelled)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import kernel_agent
from kernel_agent._loop import in_thread

PACKAGE = Path(kernel_agent.__file__).parent
EXEMPT = "Not in_thread:"  # the comment that says why a call may be abandoned by a cancelled caller


def test_no_module_calls_asyncio_to_thread_but_in_thread_itself() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "_loop.py":
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if "asyncio.to_thread(" in line and not any(
                EXEMPT in above for above in lines[max(number - 3, 0) : number]
            ):
                found.append(f"{path.relative_to(PACKAGE)}:{number + 1}")
    assert found == []


def test_a_cancelled_caller_waits_for_the_work_to_finish() -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def work() -> None:
        started.set()
        release.wait(30)
        finished.set()

    async def main() -> None:
        task = asyncio.ensure_future(in_thread(work))
        await asyncio.to_thread(started.wait, 30)
        task.cancel()
        await asyncio.sleep(0)  # the cancel is delivered to in_thread's wait
        release.set()
        try:
            await task
        except asyncio.CancelledError:
            assert finished.is_set()  # the work was whole before the cancel propagated
        else:
            raise AssertionError("the cancel was swallowed")

    asyncio.run(main())
