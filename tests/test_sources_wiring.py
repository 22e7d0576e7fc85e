"""``--data`` takes live sources beside files: told apart in one place (``live.split_data``), a password refused
before anything starts (no workspace, no kernel, no model call), the prompt's words for each language, the
setup cell's ``sql``, and the commands that do not take a source yet refusing one clearly. Pure or fake: the
real database and kernel are ``test_sources_run.py``'s."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernel_agent import AsyncAgent
from kernel_agent.agent.languages import PYTHON, R
from kernel_agent.agent.run.live import LiveSources, reconnected, split_data
from kernel_agent.agent.run.preparation import live_words
from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError, SourceError
from kernel_agent.model.scripted import ScriptedChatModel
from kernel_agent.sources import SourceSpec
from kernel_agent.testing import FakeKernel, ok


def test_data_values_are_split_into_files_and_sources_in_order() -> None:
    files, sources = split_data(["a.csv", "shop=postgresql://ann@db/shop", Path("b.csv"), "postgresql:///?service=hr"])
    assert files == ["a.csv", Path("b.csv")]
    assert sources == (
        SourceSpec("shop", "postgresql", "postgresql://ann@db/shop"),
        SourceSpec("hr", "postgresql", "postgresql:///?service=hr"),
    )
    assert split_data("a.csv") == (["a.csv"], ())


def test_a_source_with_a_password_or_a_name_twice_is_refused_without_echoing_it() -> None:
    with pytest.raises(SourceError, match="pgpass") as refused:
        split_data(["a.csv", "postgresql://ann:hunter2@db/shop"])
    assert "hunter2" not in str(refused.value)
    with pytest.raises(SourceError, match="'shop'"):
        split_data(["shop=postgresql://ann@db/a", "shop=postgresql://bob@db/b"])


def test_a_run_given_a_password_starts_nothing(tmp_path: Path) -> None:
    model = ScriptedChatModel(["<Answer>never</Answer>"])
    started: list[Path] = []

    def kernels(workspace: Path) -> FakeKernel:
        started.append(workspace)
        return FakeKernel([ok()], workspace=workspace)

    async def run() -> None:
        async with AsyncAgent(chat_model=model, session_factory=kernels) as agent:
            await agent.run("t", data=["postgresql://ann:hunter2@db/shop"], workspace=tmp_path / "ws")

    with pytest.raises(ConfigError, match="pgpass"):
        asyncio.run(run())
    assert started == [] and not (tmp_path / "ws").exists()


def test_a_live_source_named_as_a_data_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    # sql(source="shop") could mean either: the run must not pick one silently
    (tmp_path / "shop.sqlite").write_bytes(b"SQLite format 3\x00")
    result = CliRunner().invoke(
        cli,
        ["run", "t", "--model", "m", "--data", str(tmp_path / "shop.sqlite"), "--data",
         "shop=postgresql://ann@db/shop", "-w", str(tmp_path / "ws")],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "'shop'" in result.output and "shop.sqlite" in result.output and "name the source otherwise" in result.output
    assert not (tmp_path / "ws").exists()


def test_the_cli_exits_2_for_a_password_and_never_shows_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["run", "t", "--model", "m", "--data", "shop=postgresql://ann:hunter2@db/shop", "-w", str(tmp_path)]
    )
    assert result.exit_code == 2 and "pgpass" in result.output and "hunter2" not in result.output
    plan = CliRunner().invoke(cli, ["plan", "t", "--model", "m", "--data", "postgresql://ann@db/shop"])
    assert plan.exit_code == 2 and "plan mode does not take live data sources" in plan.output


def test_no_sources_open_nothing() -> None:
    async def open_and_close() -> tuple[dict[str, Path], str]:
        async with LiveSources(()) as live:
            return live.kernel_sockets(), await live.described()

    assert asyncio.run(open_and_close()) == ({}, "")


def test_a_recorded_source_reconnects_by_the_name_given_else_its_service() -> None:
    given = split_data(["shop=postgresql://ann@db/shop", "extra=postgresql://ann@db/x"])[1]
    live = reconnected(["shop", "hr"], given)
    assert [(spec.name, spec.target) for spec in live.specs] == [
        ("shop", "postgresql://ann@db/shop"),
        ("hr", "postgresql:///?service=hr"),
        ("extra", "postgresql://ann@db/x"),
    ]
    with pytest.raises(SourceError):
        reconnected(["not a name"], ())  # a hostile notebook's claim becomes no URI


def test_the_prompt_says_how_each_language_queries_a_live_source() -> None:
    described = "## shop · live postgresql database\n| table | rows |"
    python = live_words(described, PYTHON)
    assert "`sql(query, source=None)`" in python and "pandas DataFrame" in python and described in python
    r = live_words(described, R)
    assert "Python-only" in r and described in r
    assert live_words("", PYTHON) == ""


def test_a_live_source_needs_kernels_the_agent_may_make_and_leaves_nothing_when_refused(
    tmp_path: Path, refused_port: int
) -> None:
    model = ScriptedChatModel(["<Answer>never</Answer>"])

    async def run() -> None:
        held = AsyncAgent(chat_model=model, session_factory=lambda workspace: FakeKernel([ok()], workspace=workspace))
        async with held as agent:
            await agent.run("t", data=[f"shop=postgresql://ann@127.0.0.1:{refused_port}/shop"], workspace=tmp_path)

    with pytest.raises(ConfigError, match="live data sources need a kernel this agent starts"):
        asyncio.run(run())
    assert not list(Path(tempfile.gettempdir()).glob("kernel-agent-sql-*"))  # the broker's folder is gone


def test_a_gateway_kernel_is_refused_a_live_source_before_any_model_call(tmp_path: Path, refused_port: int) -> None:
    model = ScriptedChatModel(["<Answer>never</Answer>"])

    async def run() -> None:
        async with AsyncAgent(chat_model=model, gateway_url=f"http://127.0.0.1:{refused_port}") as agent:
            await agent.run("t", data=[f"shop=postgresql://ann@127.0.0.1:{refused_port}/shop"], workspace=tmp_path)

    with pytest.raises(ConfigError, match="gateway yet"):
        asyncio.run(run())
    assert model.remaining == 1
