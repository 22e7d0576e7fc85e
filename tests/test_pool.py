"""The warm kernel pool: ready kernels, one run each, never reused, nothing leaked."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from leaks import our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.agent.datafiles.data import CheckedData
from kernel_agent.agent.run.agent import AsyncAgent
from kernel_agent.errors import ConfigError, DataFileError, KernelError
from kernel_agent.kernel.interface import Kernel
from kernel_agent.kernel.pool import KernelPool
from kernel_agent.kernel.session import SessionState
from kernel_agent.notebook.load import load_run

pytestmark = pytest.mark.kernel


def test_acquire_gives_a_warm_kernel_bound_to_the_run_folder_and_never_reuses_it(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a\n1\n2\n")

    async def run() -> None:
        async with KernelPool(size=1) as pool:
            await pool.wait_ready()
            async with pool.acquire(tmp_path / "run1") as first:
                assert (await first.evaluate({"m": "'pandas' in __import__('sys').modules"}))["m"] == "True"
                # seaborn too (the setup cell imports it when installed: it brings scipy.stats, ~1 s), no name left
                warmed = await first.evaluate(
                    {"sns": "'seaborn' in __import__('sys').modules", "left": "'seaborn' in dir()"}
                )
                assert warmed == {"sns": "True", "left": "False"}
                await first.files.put([tmp_path / "data.csv"])
                before = await first.files.snapshot()
                result = await first.execute("import pandas as pd\nsecret = 7\nint(pd.read_csv('data.csv').a.sum())")
                assert result.result_text == "3"
                await first.execute("open('out.txt', 'w').write('hi')")
                assert [a.path for a in await first.files.changes(before)] == ["out.txt"]
                first_id = id(first)
            assert (tmp_path / "run1" / "out.txt").read_text() == "hi"  # copied back into the run's folder
            async with pool.acquire(tmp_path / "run2") as second:
                assert id(second) != first_id
                assert (await second.execute("'secret' in dir()")).result_text == "False"
            await pool.wait_ready()
            assert pool.ready == 1  # refilled in the background
        assert not our_kernel_pids()

    asyncio.run(run())


def test_cap_close_and_cancellation_leave_no_kernel(tmp_path: Path) -> None:
    async def run() -> None:
        pool = KernelPool(size=2, max_kernels=2)
        await pool.start()
        await pool.wait_ready()
        async with pool.acquire(tmp_path / "r") as kernel:
            assert (await kernel.execute("1 + 1")).result_text == "2"
            assert len(pool._alive) <= 2  # the cap holds while one is in use and one refills
        filling = asyncio.ensure_future(pool.wait_ready())
        await asyncio.sleep(0)
        await pool.close()  # mid-refill, as on Ctrl-C
        with pytest.raises(KernelError):
            await filling
        with pytest.raises(KernelError):
            async with pool.acquire(tmp_path / "late"):
                pass
        assert not our_kernel_pids()

    asyncio.run(run())
    with pytest.raises(ConfigError):
        KernelPool(size=-1)


def test_the_agent_runs_on_a_pooled_kernel(tmp_path: Path, openai_server: OpenAIServer) -> None:
    (tmp_path / "numbers.csv").write_text("x\n1\n2\n3\n")
    openai_server.add(
        Reply("Sum.", tool_calls=(python_call("print(int(pd.read_csv('numbers.csv').x.sum()))\nplt.plot([1, 2]);"),)),
        Reply("Six."),
    )

    async def run() -> Any:
        async with KernelPool(size=1) as pool:
            agent = AsyncAgent(model="m", base_url=openai_server.base_url, session_factory=pool)
            try:
                return await agent.run("Sum x", [tmp_path / "numbers.csv"], tmp_path / "run")
            finally:
                await agent.close()

    run_ = asyncio.run(run())
    assert run_.answer == "Six."
    assert run_.rounds[0].result.stdout == "6\n" and len(run_.rounds[0].result.images) == 1
    assert (tmp_path / "run.ipynb").is_file()
    assert not our_kernel_pids()


def state_now(kernel: Kernel) -> SessionState:
    """``kernel.state`` read again (a type checker keeps what an earlier assert narrowed it to)."""
    return kernel.state


def test_a_used_kernel_shuts_down_in_the_background_and_close_waits_for_it(tmp_path: Path) -> None:
    async def run() -> None:
        async with KernelPool(size=1) as pool:
            await pool.wait_ready()
            async with pool.acquire(tmp_path / "run") as kernel:
                assert (await kernel.execute("1 + 1")).result_text == "2"
                private = kernel.workspace
                assert private is not None and private.is_dir()
            # The run is over without waiting for the shutdown: it has not even begun yet.
            assert kernel.state is not SessionState.CLOSED and len(pool._discards) == 1
            assert private.is_dir()
        assert state_now(kernel) is SessionState.CLOSED and not pool._discards
        assert not private.exists()  # the kernel's private folder (inside its runtime dir) went with it
        assert not our_kernel_pids()

    asyncio.run(run())


def test_a_kernel_shutting_down_counts_under_the_cap_and_its_end_refills_the_pool(tmp_path: Path) -> None:
    async def run() -> None:
        async with KernelPool(size=1, max_kernels=1) as pool:
            await pool.wait_ready()
            async with pool.acquire(tmp_path / "run") as used:
                assert pool.ready == 0 and pool._starting == 0  # the cap holds the refill back
                assert (await used.execute("mark = 1")).ok
            assert pool._starting == 0  # still: the used kernel is alive until its shutdown ends
            await pool.wait_ready()  # the shutdown's end frees the place and refills
            assert used.state is SessionState.CLOSED and pool.ready == 1 and len(pool._alive) == 1
            async with pool.acquire(tmp_path / "again") as fresh:
                assert fresh is not used and (await fresh.execute("'mark' in dir()")).result_text == "False"
            assert pool.served_warm == 2 and pool.served_cold == 0
        assert not our_kernel_pids()

    asyncio.run(run())


def test_a_cancelled_run_hands_its_kernel_back_and_close_leaves_nothing(tmp_path: Path) -> None:
    async def run() -> None:
        pool = await KernelPool(size=1).start()
        inside = asyncio.Event()

        async def one_run() -> None:
            async with pool.acquire(tmp_path / "run") as kernel:
                assert (await kernel.execute("x = 1")).ok
                inside.set()
                await asyncio.Event().wait()  # a run that only ends by cancellation

        task = asyncio.ensure_future(one_run())
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool._discards  # its kernel is shutting down, owned by the pool
        await pool.close()
        assert not pool._discards and not pool._alive
        assert not our_kernel_pids()

    asyncio.run(run())


def test_a_pooled_run_has_its_data_in_the_kernel_and_in_the_record_and_the_quota_counts_only_growth(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """A pooled kernel gets its copy before the first request; the workspace's copy (the run's record) is
    made while the first round runs and is in place before that round's files come back; the disk quota
    (1 MB here) counts what the run wrote, not a 3 MB data file."""
    data = tmp_path / "big.csv"
    data.write_text("x\n" + "7\n" * (1536 << 10))
    code = (
        "import os\nprint(len(pd.read_csv(data.big)), oct(os.stat(data.big).st_mode & 0o777))\n"
        "open('out.txt', 'w').write('made')"
    )
    openai_server.add(Reply("Rows.", tool_calls=(python_call(code),)), Reply("Done."))

    async def run() -> Any:
        async with KernelPool(size=1) as pool:
            agent = AsyncAgent(model="m", base_url=openai_server.base_url, session_factory=pool, disk_quota_mb=1)
            try:
                return await agent.run("Count", [data], tmp_path / "run")
            finally:
                await agent.close()

    run_ = asyncio.run(run())
    assert (run_.stop_reason, run_.answer) == ("answer", "Done."), run_.error
    assert run_.rounds[0].result.stdout == f"{1536 << 10} 0o444\n"  # the kernel's own copy is read-only too
    assert [a.path for a in run_.rounds[0].artifacts] == ["out.txt"]
    record = tmp_path / "run" / "big.csv"
    assert record.read_bytes() == data.read_bytes() and (record.stat().st_mode & 0o777) == 0o444
    assert (tmp_path / "run" / "out.txt").read_text() == "made"
    assert not our_kernel_pids()


def test_a_record_copy_that_fails_ends_the_run_with_its_round_kept(
    tmp_path: Path, openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run folder's copy of the data (made while the first round runs, for a pooled kernel) fails, as
    on a full disk: the round that ran is saved, then the run ends with the error (no more model calls)."""
    data = tmp_path / "numbers.csv"
    data.write_text("x\n1\n2\n")

    def no_space(self: CheckedData) -> None:
        raise DataFileError(f"cannot copy {data} into {self.workspace}: No space left on device", path=str(data))

    monkeypatch.setattr(CheckedData, "install", no_space)
    openai_server.add(
        Reply("Sum.", tool_calls=(python_call("print(int(pd.read_csv(data.numbers).x.sum()))"),)), Reply("Never asked.")
    )

    async def run() -> Any:
        async with KernelPool(size=1) as pool:
            agent = AsyncAgent(model="m", base_url=openai_server.base_url, session_factory=pool)
            try:
                return await agent.run("Sum x", [data], tmp_path / "run")
            finally:
                await agent.close()

    with pytest.raises(DataFileError, match="No space left") as raised:
        asyncio.run(run())
    assert openai_server.remaining == 1
    saved = load_run(tmp_path / "run.ipynb")
    assert [r.result.stdout if r.result else None for r in saved.rounds] == ["3\n"]
    assert "No space left" in (saved.run.error or "") and saved.run.finished_at
    assert raised.value.run.rounds[0].result.stdout == "3\n"
    assert not our_kernel_pids()
