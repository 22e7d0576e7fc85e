"""Output while a cell runs: the throttle (pure, on a made-up clock) and ``execute(on_output=...)`` on real kernels.

The kernel tests never sleep to wait for output: the cell waits for a marker
file (in its workspace: the sandbox hides the rest of /tmp) that the callback
writes when it has seen the early output, so the chunk provably arrived while
the cell was still running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel_agent.kernel.partial import CHUNK_INTERVAL_S, CHUNK_MAX_CHARS, OutputChunk, OutputTail, PartialOutput
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.kernel.session_sync import KernelSession


def stream(text: str, name: str = "stdout") -> dict[str, Any]:
    return {"msg_type": "stream", "content": {"name": name, "text": text}}


def figure() -> dict[str, Any]:
    return {"msg_type": "display_data", "content": {"data": {"image/png": "iVBOR", "text/plain": "<Figure>"}}}


def gather(
    *, interval_s: float = CHUNK_INTERVAL_S, max_chars: int = CHUNK_MAX_CHARS
) -> tuple[PartialOutput, list[OutputChunk]]:
    chunks: list[OutputChunk] = []
    return PartialOutput(chunks.append, started=100.0, interval_s=interval_s, max_chars=max_chars), chunks


def test_the_first_output_goes_at_once_then_at_most_one_chunk_per_interval() -> None:
    partial, chunks = gather(interval_s=0.5)
    partial.feed(stream("a\n"), 100.1)
    assert chunks == [OutputChunk("a\n", elapsed_s=0.1)]
    partial.feed(stream("b\n"), 100.2)
    partial.feed(stream("c\n", "stderr"), 100.3)
    partial.tick(100.5)
    assert len(chunks) == 1  # 0.4 s since the last chunk: held back
    partial.tick(100.6)
    assert chunks[1] == OutputChunk("b\nc\n", elapsed_s=0.6)
    partial.tick(101.5)
    assert len(chunks) == 2  # nothing pending, nothing sent
    partial.feed(figure(), 101.6)
    partial.feed(stream("d"), 101.7)
    partial.flush(101.8)  # the end: the rest goes without waiting for the interval
    assert chunks[2] == OutputChunk("", elapsed_s=1.6, figures=1)
    assert chunks[3] == OutputChunk("d", elapsed_s=1.8)


def test_a_flood_keeps_the_tail_of_each_chunk_and_counts_what_it_skipped() -> None:
    partial, chunks = gather(interval_s=0.5, max_chars=100)
    partial.feed(stream("first\n"), 100.0)
    for index in range(1000):
        partial.feed(stream(f"line {index:04d}\n"), 100.0 + index / 10_000)
    partial.flush(100.2)
    assert len(chunks) == 2
    tail = chunks[1]
    assert len(tail.text) == 100 and tail.text.endswith("line 0999\n")
    assert tail.skipped_chars + len(tail.text) == 1000 * len("line 0000\n")


def test_non_output_messages_change_nothing() -> None:
    partial, chunks = gather()
    partial.feed({"msg_type": "status", "content": {"execution_state": "busy"}}, 100.0)
    partial.feed({"msg_type": "execute_result", "content": {"data": {"text/plain": "3"}}}, 100.1)
    partial.flush(100.2)
    assert chunks == []


def test_a_callback_that_raises_is_logged_and_the_next_chunk_still_goes(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[OutputChunk] = []

    def broken(chunk: OutputChunk) -> None:
        calls.append(chunk)
        raise RuntimeError("display went away")

    partial = PartialOutput(broken, started=0.0)
    with caplog.at_level(logging.DEBUG, logger="kernel_agent.kernel.partial"):
        partial.feed(stream("a"), 1.0)
        partial.feed(stream("b"), 2.0)
    assert [chunk.text for chunk in calls] == ["a", "b"]
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "on_output" in warnings[0].getMessage()


def test_the_tail_resolves_progress_bars_and_says_when_it_was_cut() -> None:
    tail = OutputTail(max_chars=20)
    tail(OutputChunk("10%\r50%\r100%\ndone\n", elapsed_s=1.0, figures=1))
    assert tail.text == "100%\ndone\n" and tail.figures == 1 and tail.chunks == 1
    tail(OutputChunk("x" * 30, elapsed_s=2.0))
    assert tail.text == "…" + "x" * 20
    skipped = OutputTail(max_chars=20)
    skipped(OutputChunk("end", elapsed_s=1.0, skipped_chars=5))
    assert skipped.text == "…end"


# ----------------------------------------------------------------- real kernels

WAIT_FOR_MARKER = """
import pathlib, sys, time
print('early output', flush=True)
print('to stderr', file=sys.stderr, flush=True)
marker = pathlib.Path({marker!r})
deadline = time.monotonic() + 60
while not marker.exists() and time.monotonic() < deadline:
    time.sleep(0.02)
print('late output' if marker.exists() else 'no marker came')
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with KernelSession(tmp_path_factory.mktemp("ws")) as session:
        yield session


def marker_writer(marker: Path, chunks: list[OutputChunk]):  # type: ignore[no-untyped-def]
    def on_output(chunk: OutputChunk) -> None:
        chunks.append(chunk)
        if "early output" in "".join(c.text for c in chunks):
            marker.touch()

    return on_output


@pytest.mark.kernel
def test_output_arrives_while_the_cell_runs_and_the_result_is_unchanged(shared: KernelSession) -> None:
    chunks: list[OutputChunk] = []
    assert shared.workspace is not None
    result = shared.execute(
        WAIT_FOR_MARKER.format(marker="seen-sync"), 120, on_output=marker_writer(shared.workspace / "seen-sync", chunks)
    )
    assert result.ok
    text = "".join(chunk.text for chunk in chunks)
    assert "late output" in result.stdout and "no marker came" not in result.stdout
    assert text.index("early output") < text.index("late output")  # the early text came in an earlier chunk
    assert "early output" not in chunks[-1].text
    assert "to stderr" in text and sum(chunk.skipped_chars for chunk in chunks) == 0
    without = shared.execute("print('early output')\nprint('late output')")
    assert (
        without.outputs
        == shared.execute("print('early output')\nprint('late output')", on_output=lambda chunk: None).outputs
    )


@pytest.mark.kernel
def test_a_raising_callback_does_not_break_the_execution(
    shared: KernelSession, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(chunk: OutputChunk) -> None:
        raise ValueError("the display is gone")

    with caplog.at_level(logging.WARNING, logger="kernel_agent.kernel.partial"):
        result = shared.execute("for i in range(3):\n    print(i)\nanswer = 42\nanswer", on_output=broken)
    assert result.ok and result.stdout == "0\n1\n2\n" and "42" in result.to_llm_text()
    assert any("on_output" in record.getMessage() for record in caplog.records)


@pytest.mark.kernel
def test_a_timeout_still_interrupts_and_the_output_before_it_was_streamed(shared: KernelSession) -> None:
    chunks: list[OutputChunk] = []
    shared.execute("kept = 'yes'")
    result = shared.execute(
        "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.05)", 2, on_output=chunks.append
    )
    assert result.status == "timeout" and not result.state_lost
    assert "started" in "".join(chunk.text for chunk in chunks)
    assert "yes" in shared.execute("kept").to_llm_text()


@pytest.mark.kernel
def test_the_async_session_streams_figures_on_its_own_loop(tmp_path: Path) -> None:
    async def main() -> tuple[list[OutputChunk], bool]:
        chunks: list[OutputChunk] = []
        async with AsyncKernelSession(tmp_path / "ws") as session:
            code = (
                "%matplotlib inline\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\n"
                + WAIT_FOR_MARKER.format(marker="seen")
            )
            on_output = marker_writer(tmp_path / "ws" / "seen", chunks)
            result = await session.execute(code, 120, on_output=on_output)
        return chunks, result.ok and "late output" in result.stdout

    chunks, finished = asyncio.run(main())
    assert finished
    assert sum(chunk.figures for chunk in chunks) == 1
