"""Every way the agent loop stops, in the fast tier: a ``ScriptedChatModel`` talks to a ``FakeKernel``.

No kernel starts: ``kernel_agent.testing.FakeKernel`` plays the scripted results (its first one answers the
setup cell), so these check the loop itself: an answer, ``max_rounds``, the stuck guard, the disk quota,
a model error, a cancel (the notebook keeps what ran) and a data file changing while its record copy is
made (the round is kept, the run raises with it). The same paths run against real kernels in
``test_agent*.py``; ``test_fake_kernel_*`` hold the fake to the ``Kernel`` protocol.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from kernel_agent import AsyncAgent
from kernel_agent.errors import DataFileError, KernelError, ModelUnreachableError, SessionClosedError
from kernel_agent.kernel.interface import Kernel, KernelFactory
from kernel_agent.model.chat import Piece
from kernel_agent.model.messages import ChatMessage
from kernel_agent.model.scripted import ScriptedChatModel
from kernel_agent.records import Run
from kernel_agent.result import ExecutionResult
from kernel_agent.testing import FakeKernel, Step, error, ok

MB = 1024 * 1024


def code(text: str) -> str:
    return f"<Code>\n{text}\n</Code>"


def answer(text: str) -> str:
    return f"<Answer>{text}</Answer>"


class Kernels:
    """A kernel factory that hands out one ``FakeKernel`` per run and keeps it to look at afterwards."""

    kernels_apart = False  # its kernels work in the run's folder (a pool's or a gateway's would not)

    def __init__(self, script: Iterable[Step], **options: Any) -> None:
        self.script, self.options = list(script), options
        self.made: list[FakeKernel] = []

    def __call__(self, workspace: Path) -> FakeKernel:
        kernel = FakeKernel(self.script, workspace=workspace, **self.options)
        self.made.append(kernel)
        return kernel

    @property
    def kernel(self) -> FakeKernel:
        (only,) = self.made
        return only


def agent(replies: Iterable[str], factory: KernelFactory, **options: Any) -> AsyncAgent:
    return AsyncAgent(
        chat_model=ScriptedChatModel(list(replies), name="scripted-test"),
        protocol="tags",
        session_factory=factory,
        **options,
    )


def saved(notebook: Path) -> dict[str, Any]:
    """The run's record as the notebook on disk says it."""
    meta: dict[str, Any] = json.loads(notebook.read_text(encoding="utf-8"))["metadata"]["kernel_agent"]
    return meta


async def run(replies: Iterable[str], factory: KernelFactory, tmp_path: Path, **options: Any) -> Run:
    async with agent(replies, factory, **options) as analyst:
        return await analyst.run("the task", workspace=tmp_path / "ws", notebook=tmp_path / "run.ipynb")


def test_an_answer_ends_the_run_after_the_code_ran(tmp_path: Path) -> None:
    kernels = Kernels([ok(), ok("42\n")])
    done = asyncio.run(run([code("print(6 * 7)"), answer("It is 42.")], kernels, tmp_path))
    assert (done.stop_reason, done.answer) == ("answer", "It is 42.")
    assert [r.result.stdout if r.result else None for r in done.rounds] == ["42\n", None]
    assert kernels.kernel.executed[1] == "print(6 * 7)" and kernels.kernel.remaining == 0
    assert done.info.confinement == kernels.kernel.confinement
    assert saved(tmp_path / "run.ipynb")["stop_reason"] == "answer"


def test_max_rounds_stops_with_every_round_kept(tmp_path: Path) -> None:
    kernels = Kernels([ok(), ok(), ok()])
    done = asyncio.run(run([code("a = 1"), code("b = 2"), answer("never")], kernels, tmp_path, max_rounds=2))
    assert done.stop_reason == "max_rounds" and done.answer is None
    assert [r.code for r in done.rounds] == ["a = 1", "b = 2"]


def test_the_same_failure_three_times_is_stuck(tmp_path: Path) -> None:
    kernels = Kernels([ok(), *[error("NameError", "name 'x' is not defined")] * 3])
    done = asyncio.run(run([code("print(x)")] * 3 + [answer("never")], kernels, tmp_path))
    assert done.stop_reason == "stuck" and len(done.rounds) == 3
    assert all(r.result is not None and r.result.status == "error" for r in done.rounds)


def test_a_workspace_over_its_disk_quota_ends_the_run_after_that_round(tmp_path: Path) -> None:
    def fill(_code: str, folder: Path) -> ExecutionResult:
        (folder / "big.bin").write_bytes(b"x" * (2 * MB))
        return ok("written\n")

    kernels = Kernels([ok(), fill])
    done = asyncio.run(run([code("write()"), code("never()")], kernels, tmp_path, disk_quota_mb=1))
    assert done.stop_reason == "disk_quota" and len(done.rounds) == 1
    assert "quota of 1 MB" in (done.error or "")
    assert [a.path for a in done.rounds[0].artifacts] == ["big.bin"]


class FailingModel(ScriptedChatModel):
    """Plays its replies, then fails as an unreachable endpoint does."""

    async def stream(
        self, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None
    ) -> AsyncIterator[Piece]:
        if self.remaining == 0:
            raise ModelUnreachableError("the model endpoint http://127.0.0.1:9/v1 is unreachable")
        async for piece in super().stream(messages, options):
            yield piece


def test_a_model_error_ends_the_run_with_llm_error_and_keeps_the_rounds(tmp_path: Path) -> None:
    async def scenario() -> Run:
        kernels = Kernels([ok(), ok("1\n")])
        model = FailingModel([code("print(1)")], name="failing")
        async with AsyncAgent(chat_model=model, protocol="tags", session_factory=kernels) as analyst:
            return await analyst.run("the task", workspace=tmp_path / "ws", notebook=tmp_path / "run.ipynb")

    done = asyncio.run(scenario())
    assert done.stop_reason == "llm_error" and "unreachable" in (done.error or "")
    assert len(done.rounds) == 1 and done.rounds[0].result is not None
    assert saved(tmp_path / "run.ipynb")["stop_reason"] == "llm_error"


def test_a_cancel_while_code_runs_saves_the_run_as_cancelled(tmp_path: Path) -> None:
    async def scenario() -> FakeKernel:
        running = asyncio.Event()

        async def forever(_code: str, _folder: Path) -> ExecutionResult:
            running.set()
            await asyncio.Event().wait()  # never set: only the cancel ends it
            raise AssertionError("unreachable")

        kernels = Kernels([ok(), forever])
        task = asyncio.ensure_future(run([code("while True: pass")], kernels, tmp_path))
        await running.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return kernels.kernel

    kernel = asyncio.run(scenario())
    record = saved(tmp_path / "run.ipynb")
    assert record["stop_reason"] == "cancelled" and record["error"] == "cancelled by the user"
    assert kernel.executed[-1] == "while True: pass" and not asyncio.run(kernel.is_alive())


def test_a_data_file_changing_while_its_record_copy_is_made_raises_with_the_round_kept(tmp_path: Path) -> None:
    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,1\n", encoding="utf-8")

    def change_the_data(_code: str, _folder: Path) -> ExecutionResult:
        with data.open("a", encoding="utf-8") as more:  # the user's file, written while the run copies it
            more.write("south,2\n")
        return ok("read\n")

    kernels = Kernels([ok(), change_the_data], kernel_folder=tmp_path / "kernel-own")
    kernels.kernels_apart = True  # the record copies are then made while round 1 runs

    async def scenario() -> None:
        async with agent([code("read()"), answer("never")], kernels) as analyst:
            await analyst.run("the task", [data], tmp_path / "ws", tmp_path / "run.ipynb")

    with pytest.raises(DataFileError, match="changed while it was being copied") as raised:
        asyncio.run(scenario())
    kept = raised.value.run
    assert kept is not None and [r.code for r in kept.rounds] == ["read()"]
    assert (tmp_path / "kernel-own" / "sales.csv").is_file()  # the kernel's own copy, put before it ran
    assert saved(tmp_path / "run.ipynb")["rounds"] == 1


def test_fake_kernel_is_a_kernel_and_plays_its_script_in_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        seen: list[str] = []

        def echo(code: str, folder: Path) -> ExecutionResult:
            seen.append(f"{code} in {folder.name}")
            return ok(result="2")

        kernel = FakeKernel([ok("first\n"), echo], workspace=tmp_path / "ws", evaluations={"names": "['a']"})
        assert isinstance(kernel, Kernel)
        with pytest.raises(SessionClosedError):
            await kernel.execute("1")
        async with kernel:
            first = await kernel.execute("print('first')")
            second = await kernel.execute("1 + 1")
            assert (first.stdout, first.execution_count, second.result_text, second.call) == ("first\n", 1, "2", 2)
            assert seen == ["1 + 1 in ws"]
            assert await kernel.evaluate({"names": "dir()", "packages": "[]"}) == {"names": "['a']", "packages": None}
            with pytest.raises(KernelError, match="script is exhausted"):
                await kernel.execute("more")
        assert not await kernel.is_alive()

    asyncio.run(scenario())


def test_fake_kernel_without_a_workspace_removes_its_temp_dir() -> None:
    async def scenario() -> Callable[[], bool]:
        async with FakeKernel([ok()]) as kernel:
            folder = kernel.workspace
            assert folder is not None and folder.is_dir()
            await kernel.files.snapshot()
        return folder.exists

    assert not asyncio.run(scenario())()
