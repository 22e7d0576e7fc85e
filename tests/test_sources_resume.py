"""Resuming with a live source the first run did not have: ``sql`` is defined for the resumed session (a setup
step, recorded in the setup cell, so the resumed notebook replays), and the kernel is the one the notebook
records (an R run resumed in R). A real PostgreSQL, real kernels, the real CLI and ``openai`` SDK against the
scripted server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from click.testing import CliRunner, Result
from openai_server import OpenAIServer, Reply, python_call, tool_call
from postgres import PostgresServer
from sourcedb import OwnedDatabase, owned_database

from kernel_agent.cli import cli

pytestmark = [pytest.mark.kernel, pytest.mark.postgresql]


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def visits(postgres: PostgresServer) -> OwnedDatabase:
    database = owned_database(postgres, "visits")
    database.run("CREATE TABLE visits (id integer PRIMARY KEY)", "INSERT INTO visits SELECT generate_series(1, 7)")
    return database


def test_a_run_without_sources_resumed_with_one_gets_sql_and_its_notebook_replays(
    openai_server: OpenAIServer, visits: OwnedDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.add(Reply("Set.", tool_calls=(python_call("base = 35"),)), Reply("Done."))
    workspace, notebook = tmp_path / "ws", tmp_path / "run.ipynb"
    first = invoke("run", "Set a base", "--model", "m", "--workspace", workspace, "--out", notebook, "--quiet")
    assert first.exit_code == 0, first.output
    assert "def sql(" not in nbformat.read(notebook, as_version=4).cells[1].source

    query = 'print("visits", base + len(sql("SELECT * FROM visits")))'
    openai_server.add(Reply("Query.", tool_calls=(python_call(query),)), Reply("42."))
    source = f"live={visits.owner}"
    resumed = invoke(
        "resume", notebook, "Add the visits", "--data", source, "--model", "m", "--workspace", workspace, "--quiet"
    )
    assert resumed.exit_code == 0, resumed.output
    told = str(openai_server.requests[-1]["messages"])
    assert "visits 42" in told and "NameError" not in told  # sql() defined, the earlier state rebuilt

    setup = nbformat.read(notebook, as_version=4).cells[1]
    assert setup.metadata["kernel_agent"]["role"] == "setup"
    assert "def sql(" in setup.source and 'LIVE_SOURCES[:] = ["live"]' in setup.source
    assert setup.source.rstrip().endswith("data")  # the setup's own output line stays its last
    replayed = invoke("replay", notebook, "--no-check", "--data", source)
    assert replayed.exit_code == 0, replayed.output


def test_a_resume_with_a_live_source_starts_the_kernel_the_notebook_records(
    openai_server: OpenAIServer, visits: OwnedDatabase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.add(Reply("Set.", tool_calls=(tool_call("execute_r", {"code": "base <- 21"}),)), Reply("Done."))
    workspace, notebook = tmp_path / "ws", tmp_path / "run.ipynb"
    first = invoke(
        "run", "Set a base", "--kernel", "ir", "--model", "m", "--workspace", workspace, "--out", notebook, "--quiet"
    )
    assert first.exit_code == 0, first.output

    openai_server.add(Reply("Double.", tool_calls=(tool_call("execute_r", {"code": "cat('R', base * 2)"}),)))
    openai_server.add(Reply("42."))
    resumed = invoke(
        "resume", notebook, "Double it", "--data", f"live={visits.owner}", "--model", "m",
        "--workspace", workspace, "--quiet",
    )  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    assert openai_server.requests[-2]["tools"][0]["function"]["name"] == "execute_r"
    assert "R 42" in str(openai_server.requests[-1]["messages"])
    assert "Python-only for now" in str(openai_server.requests[-2]["messages"])  # R is told sql() is not its
    meta = nbformat.read(notebook, as_version=4).metadata
    assert meta["kernelspec"]["name"] == "ir"
    assert meta["kernel_agent"]["sources"] == [{"name": "live", "kind": "postgresql"}]
