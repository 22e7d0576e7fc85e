"""The sync facades' private loop: a Ctrl-C at any moment of a call cancels the coroutine and waits for its
clean-up before the interrupt reaches the caller."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from types import FrameType

import pytest

from kernel_agent._loop import LoopThread


def _waiting_in_run(thread_id: int) -> bool:
    """Whether the thread is blocked inside ``LoopThread.run`` (in a lock's wait)."""
    frame: FrameType | None = sys._current_frames().get(thread_id)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return "run" in names and names[0] == "wait"


def test_a_ctrl_c_before_the_loop_has_started_the_call_still_cancels_and_unwinds_it() -> None:
    # A busy loop has not yet started the call when the interrupt comes (the window that lost a
    # magic's clean-up under load): the call must still be cancelled and its clean-up finished.
    loop = LoopThread("test-loop")
    gate = threading.Event()
    loop.loop.call_soon_threadsafe(gate.wait)  # the loop is busy until the interrupt has been sent
    cleaned: list[str] = []

    async def work() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("cleaned up")

    main = threading.get_ident()

    def interrupt_when_waiting() -> None:
        while not _waiting_in_run(main):
            gate.wait(0.01)  # polling the main thread's stack until it blocks in run()
        os.kill(os.getpid(), signal.SIGINT)
        gate.set()

    watcher = threading.Thread(target=interrupt_when_waiting)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(work())
        assert cleaned == ["cleaned up"]  # it ran, was cancelled and unwound before the interrupt came back
    finally:
        watcher.join()
        loop.stop()


def test_a_ctrl_c_while_the_call_runs_cancels_it_and_a_later_call_works() -> None:
    loop = LoopThread("test-loop")
    started = threading.Event()
    cleaned: list[str] = []

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("cleaned up")

    def interrupt_once_started() -> None:
        started.wait()
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_started)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run(work())
        assert cleaned == ["cleaned up"]

        async def answer() -> int:
            return 42

        assert loop.run(answer()) == 42
    finally:
        watcher.join()
        loop.stop()
