"""``DataStaging``, one run's data files from checked to closed, in the fast tier (no kernel starts).

A ``FakeKernel`` stands for the kernel: working in the workspace (it finds the copies there) or apart
(``kernel_folder``: it gets its own copies, and the workspace's, the run's record, are made later).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from kernel_agent.agent.run.staging import DataStaging
from kernel_agent.errors import DataFileError
from kernel_agent.testing import FakeKernel


@pytest.fixture
def sales(tmp_path: Path) -> Path:
    path = tmp_path / "sales.csv"
    path.write_text("region,amount\nnorth,1\nsouth,2\n", encoding="utf-8")
    return path


async def settled() -> None:
    """Wait for every task this test's loop still runs (what ``close`` left to finish)."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    await asyncio.gather(*others, return_exceptions=True)


def test_a_kernel_in_the_workspace_finds_the_copies_and_nothing_is_left_to_record(tmp_path: Path, sales: Path) -> None:
    async def scenario() -> tuple[DataStaging, list[str]]:
        root = tmp_path / "ws"
        staging = await DataStaging.check([sales], root)
        assert not (root / "sales.csv").exists()  # checked, nothing copied yet
        await staging.into_workspace()
        async with FakeKernel(workspace=root) as kernel:
            await staging.into_kernel(kernel)
            files = await staging.described()
            staging.started()
            assert staging.recorded and not await staging.before_files()
        staging.close()
        return staging, [f.summary for f in files]

    staging, summaries = asyncio.run(scenario())
    assert staging.in_workspace and staging.names == ("sales.csv",)
    copy = tmp_path / "ws" / "sales.csv"
    assert copy.read_text(encoding="utf-8") == sales.read_text(encoding="utf-8")
    assert not copy.stat().st_mode & 0o222  # read-only
    assert "region" in summaries[0] and "amount" in summaries[0]


def test_a_kernel_apart_gets_its_own_copies_and_the_record_is_made_when_the_rounds_ask(
    tmp_path: Path, sales: Path
) -> None:
    root, own = tmp_path / "ws", tmp_path / "kernel-own"

    async def scenario() -> None:
        staging = await DataStaging.check([sales], root)
        async with FakeKernel(workspace=root, kernel_folder=own) as kernel:
            await staging.into_kernel(kernel)
            assert (own / "sales.csv").is_file() and not (root / "sales.csv").exists()
            staging.started()
            assert not staging.recorded
            assert await staging.before_files()  # it waited for the record's copies
            assert staging.recorded
            assert (root / "sales.csv").is_file()
            assert not await staging.before_files()  # made once
        staging.close()

    asyncio.run(scenario())
    assert not (tmp_path / "ws" / "sales.csv").stat().st_mode & 0o222


def test_a_file_changed_before_its_record_copy_is_raised_when_the_rounds_await_it(tmp_path: Path, sales: Path) -> None:
    async def scenario() -> None:
        async with (
            await DataStaging.check([sales], tmp_path / "ws") as staging,
            FakeKernel(workspace=tmp_path / "ws", kernel_folder=tmp_path / "own") as kernel,
        ):
            await staging.into_kernel(kernel)
            staging.started()
            with sales.open("a", encoding="utf-8") as more:
                more.write("east,3\n")
            await staging.before_files()

    with pytest.raises(DataFileError, match="changed while it was being copied"):
        asyncio.run(scenario())


def test_a_run_stopped_before_its_first_code_still_gets_its_record(tmp_path: Path, sales: Path) -> None:
    async def scenario(arm: bool) -> None:
        root = tmp_path / ("armed" if arm else "not-armed")
        async with (
            await DataStaging.check([sales], root) as staging,
            FakeKernel(workspace=root, kernel_folder=tmp_path / f"own-{arm}") as kernel,
        ):
            await staging.into_kernel(kernel)
            if arm:  # the run began (its notebook saved); else it failed before
                staging.started()
        await settled()

    asyncio.run(scenario(True))
    asyncio.run(scenario(False))
    assert (tmp_path / "armed" / "sales.csv").is_file()
    assert not (tmp_path / "not-armed" / "sales.csv").exists()


def test_a_kernel_said_apart_that_works_in_the_workspace_gets_the_copies_there(
    tmp_path: Path, sales: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> DataStaging:
        staging = await DataStaging.check([sales], tmp_path / "ws")
        async with FakeKernel(workspace=tmp_path / "ws") as kernel:
            with caplog.at_level(logging.WARNING, logger="kernel_agent.agent.run.staging"):
                await staging.into_kernel(kernel)
            staging.started()
        staging.close()
        return staging

    staging = asyncio.run(scenario())
    assert staging.in_workspace and staging.recorded
    assert (tmp_path / "ws" / "sales.csv").is_file()
    assert "works in the run's folder after all" in caplog.text


def test_a_file_that_cannot_be_described_is_raised_when_the_description_is_awaited(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not a parquet file at all")

    async def scenario() -> None:
        try:
            staging = await DataStaging.check([bad], tmp_path / "ws")
        except DataFileError:
            raise AssertionError("checked files are described later, not at check time") from None
        try:
            await staging.described()
        finally:
            staging.close()
            await settled()

    with pytest.raises(DataFileError, match=r"bad\.parquet"):
        asyncio.run(scenario())
