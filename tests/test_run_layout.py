"""Where a run's records go, seen as a user's shell sees them: one notebook per run for ``agent-runs/*.ipynb``.

Two real runs (the local test model, a real kernel) into the default ``./agent-runs``; the glob a user
types then names each run once, and ``replay --check`` takes them all in one command.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.cli import cli
from kernel_agent.kernel.workspace import records_beside, workspace_holding
from kernel_agent.notebook.export import clean_path, legacy_clean_path


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_the_clean_view_sits_beside_the_notebook_under_a_name_no_glob_catches(tmp_path: Path) -> None:
    notebook = tmp_path / "agent-runs" / "20260101-000000-sum.ipynb"

    assert clean_path(notebook) == notebook.with_name(".20260101-000000-sum.clean.ipynb")
    assert clean_path(tmp_path / ".chat-agent.ipynb").name == ".chat-agent.clean.ipynb"  # one dot, not two
    assert legacy_clean_path(notebook).name == "20260101-000000-sum.clean.ipynb"


def test_a_folder_with_a_hidden_record_beside_it_is_a_runs_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "city-agent"
    (workspace / "sub").mkdir(parents=True)
    assert workspace_holding(workspace / "sub" / "out.csv") is None

    records_beside(workspace, hidden=True).write_text("{}")

    assert records_beside(workspace, hidden=True).name == ".city-agent.ipynb"
    assert workspace_holding(workspace / "sub" / "out.csv") == workspace


@pytest.mark.kernel
def test_a_glob_over_agent_runs_finds_each_run_once_and_replay_takes_them_all(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNEL_AGENT_MODEL", "scripted-test-model")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    for number in (1, 2):
        openai_server.add(Reply("Add.", tool_calls=(python_call(f"print({number} + 40)"),)))
        openai_server.add(Reply(f"The sum is {number + 40}."))
        result = invoke("run", f"Add {number} and 40")
        assert result.exit_code == 0, result.output

    found = sorted(glob.glob("agent-runs/*.ipynb"))  # as the shell expands ``replay agent-runs/*.ipynb``

    assert len(found) == 2 and all(name.endswith(("-add-1-and-40.ipynb", "-add-2-and-40.ipynb")) for name in found)
    assert all(clean_path(name).is_file() for name in found)  # both views written, the clean one beside
    replayed = invoke("replay", "--check", *found)
    assert replayed.exit_code == 0, replayed.output
    assert replayed.output.count("ok (2 match)") == 2, replayed.output


def test_replay_refuses_one_workspace_for_several_notebooks(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["replay", "-w", str(tmp_path), "a.ipynb", "b.ipynb"])

    assert result.exit_code == 2 and "--workspace" in result.output
