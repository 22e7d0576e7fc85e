"""Writing a growing run's notebooks (``RunWriter``): the full view is on disk when a save returns,
the clean view follows in the background and is exact when the run finishes; a failed background write
is raised, not lost. The agent end to end: the clean notebook on disk is the clean view of the final run."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from test_notebook import make_run

from kernel_agent.agent.run.agent import AsyncAgent
from kernel_agent.errors import NotebookError
from kernel_agent.model.scripted import ScriptedChatModel
from kernel_agent.notebook.export import build_notebook, clean_path
from kernel_agent.notebook.writer import RunWriter
from kernel_agent.records import Run


def _written(nb: nbformat.NotebookNode) -> str:
    value: str = nbformat.v4.writes_json(nb) + "\n"
    return value


def _views_match(run: Run, path: Path) -> bool:
    run = replace(run, notebook_path=path)
    return path.read_text() == _written(build_notebook(run, view="full")) and clean_path(path).read_text() == _written(
        build_notebook(run, view="clean")
    )


def test_each_save_writes_the_full_view_at_once_and_the_clean_view_by_the_next(tmp_path: Path) -> None:
    finished = make_run()
    path = tmp_path / "run.ipynb"
    writer = RunWriter(path)
    for count in range(1, len(finished.rounds) + 1):
        growing = replace(
            finished, rounds=finished.rounds[:count], answer=None, stop_reason=None, finished_at="", notebook_path=path
        )
        writer.save(growing)
        assert path.read_text() == _written(build_notebook(growing, view="full"))  # before anything else runs
        writer.flush()
        assert clean_path(path).read_text() == _written(build_notebook(growing, view="clean"))
    writer.save(replace(finished, notebook_path=path))
    assert writer._pending is None  # a finished run's save writes both views itself
    assert _views_match(finished, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.clean.ipynb", "run.ipynb"]  # no temporary file


def test_a_failed_background_write_is_raised_by_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "run.ipynb"
    clean_path(path).mkdir()  # the clean view cannot replace a folder
    growing = replace(make_run(), answer=None, stop_reason=None, finished_at="", notebook_path=path)
    writer = RunWriter(path)
    writer.save(growing)
    assert nbformat.read(path, as_version=4).metadata.kernel_agent["rounds"] == len(growing.rounds)
    with pytest.raises(NotebookError, match="clean"):
        writer.save(growing)
    writer.flush()  # reported once


def test_rounds_are_renamed_into_place_and_only_the_finished_run_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The durability choice: a killed process loses nothing (atomic renames), a power cut may lose the
    rounds since the last fsync, which the finished run's save makes, of both files and their folder."""
    import os

    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    finished = make_run()
    path = tmp_path / "run.ipynb"
    writer = RunWriter(path)
    for count in range(1, len(finished.rounds) + 1):
        writer.save(
            replace(
                finished,
                rounds=finished.rounds[:count],
                answer=None,
                stop_reason=None,
                finished_at="",
                notebook_path=path,
            )
        )
    writer.flush()
    assert synced == [] and path.exists() and clean_path(path).exists()
    writer.save(replace(finished, notebook_path=path))
    assert len(synced) == 3 and ".run.ipynb." in synced[0] and "..run.clean.ipynb." in synced[1]  # temp files
    assert synced[-1] == str(tmp_path)  # the folder last: both renames durable
    assert _views_match(finished, path)


@pytest.mark.kernel
def test_the_agent_leaves_the_exact_clean_view_of_its_run(tmp_path: Path) -> None:
    replies = [
        "<Code>x = 1\nprint(x)</Code>",
        "<Code>y = x + missing</Code>",
        "<Code>z = x * 2\nz</Code>",
        "<Answer>z is 2</Answer>",
    ]
    agent = AsyncAgent(protocol="tags", chat_model=ScriptedChatModel(replies), max_rounds=6)
    run = asyncio.run(agent.run("count", workspace=tmp_path / "ws"))
    assert run.answer == "z is 2" and [r.status for r in run.rounds][:3] == ["ok", "error", "ok"]
    assert _views_match(run, run.notebook_path)  # type: ignore[arg-type]
    clean = nbformat.read(clean_path(run.notebook_path), as_version=4)  # type: ignore[arg-type]
    assert [c.source for c in clean.cells if c.cell_type == "code"][1:] == ["x = 1\nprint(x)", "z = x * 2\nz"]
