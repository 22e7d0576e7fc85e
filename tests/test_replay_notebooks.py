"""Every notebook we ship replays with ``--check``, and a ``%%agent`` cell replays without a model.

The real CLI in a subprocess, real kernels in the real sandbox: ``kernel-agent replay … --check`` of a
copy of each ``.ipynb`` under ``notebooks/`` and ``docs/``; a notebook recorded with ``%%agent`` against
the scripted OpenAI server, replayed with that server as the only model in reach, which must see no
request (``notebook/recorded.py``, ``magic/replayed.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.notebook.recorded import (
    CELLS_FILE,
    REPLAY_ENV,
    REPLAYED_NOTE,
    RecordedCell,
    cell_key,
    handover_bytes,
    is_agent_cell,
    magic_key,
    read_handover,
    shown_recorded,
)

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted(path for folder in ("notebooks", "docs") for path in (REPO / folder).rglob("*.ipynb"))


def without_model(**extra: str) -> dict[str, str]:
    """This environment with no model setting in it (a replay needs none), plus ``extra``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("OPENAI_") and name not in ("KERNEL_AGENT_MODEL", "KERNEL_AGENT_BASE_URL")
    }
    return {**env, **extra}


def replay_cli(notebook: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kernel_agent.cli", "replay", str(notebook), "--check"]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, check=False)


def test_agent_cells_and_their_keys() -> None:
    source = "%%agent --scripted-demo  -w ws\n  Analyse it.\n"
    assert is_agent_cell(source) and is_agent_cell("%%agent\nx") and is_agent_cell("\n%%agent -w a\nx")
    assert not is_agent_cell("%%agents\nx") and not is_agent_cell("# %%agent\nx") and not is_agent_cell("x = 1")
    assert cell_key(source) == magic_key(" --scripted-demo  -w ws", "  Analyse it.\n")  # as IPython splits it
    assert cell_key(source) != cell_key("%%agent --scripted-demo -w ws\nAnalyse it.")


def test_the_hand_over_is_read_as_hostile_data(tmp_path: Path) -> None:
    hostile = {"output_type": "display_data", "data": {"text/html": "<script>alert(1)</script><b>x</b>"}}
    (tmp_path / CELLS_FILE).write_bytes(handover_bytes({"k": RecordedCell((hostile,), "run.ipynb")}))

    cells = read_handover({REPLAY_ENV: str(tmp_path)})

    assert cells == {"k": RecordedCell((hostile,), "run.ipynb")}
    assert "<script" not in shown_recorded(hostile).data["text/html"]
    assert read_handover({}) is None  # not a replay
    (tmp_path / CELLS_FILE).write_text('["not", "cells"]')
    assert read_handover({REPLAY_ENV: str(tmp_path)}) == {}  # a replay still: nothing to show, no model


def test_the_shipped_notebooks_are_found() -> None:
    names = {path.name for path in SHIPPED}
    assert {"magic-demo.ipynb", "magic-demo-run.ipynb", "example-sales-analysis.ipynb"} <= names


@pytest.mark.kernel
@pytest.mark.parametrize("notebook", SHIPPED, ids=[str(path.relative_to(REPO)) for path in SHIPPED])
def test_every_shipped_notebook_replays_with_check(notebook: Path, tmp_path: Path) -> None:
    copy = tmp_path / notebook.parent.name  # a copy: a replay does not depend on the checkout
    shutil.copytree(notebook.parent, copy, ignore=shutil.ignore_patterns("agent-runs", "demo-run*", "demo-plan*"))

    done = replay_cli(copy / notebook.name, without_model())

    assert done.returncode == 0, done.stdout + done.stderr
    assert ": ok (" in done.stdout and "FAILED" not in done.stdout
    assert "user namespaces" not in done.stdout + done.stderr


@pytest.mark.kernel
def test_the_magic_demo_shows_its_recorded_run_and_restores_agent_run(tmp_path: Path) -> None:
    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("agent-runs", "demo-*"))

    done = replay_cli(tmp_path / "notebooks" / "magic-demo.ipynb", without_model())

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "(2 match, 1 recorded)" in lines[0]
    assert "recorded" in lines[2] and REPLAYED_NOTE in lines[2]  # the %%agent cell
    assert "match" in lines[3]  # the cell that prints _agent_run: the recorded run's rounds and answer


@pytest.mark.kernel
def test_a_recorded_agent_cell_replays_without_calling_the_model(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("Summing.", tool_calls=(python_call("print(sum(range(10)))"),)))
    openai_server.add(Reply("The sum is 45."))
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext kernel_agent"),
            new_code_cell(f"%%agent --model m --base-url {openai_server.base_url} -w ws\nSum 0 to 9."),
            new_code_cell("print(_agent_run.answer, len(_agent_run.rounds), _agent_run.notebook_path.name)"),
        ]
    )
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    nbformat.write(nb, tmp_path / "user.ipynb")
    recorded = len(openai_server.requests)
    assert recorded == 2 and nb.cells[2].outputs[0]["text"] == "The sum is 45. 2 ws.ipynb\n"

    # The scripted server is the only model in reach (no replies left to give): the replay asks it nothing.
    done = replay_cli(tmp_path / "user.ipynb", without_model(OPENAI_BASE_URL=openai_server.base_url))

    assert done.returncode == 0, done.stdout + done.stderr
    assert len(openai_server.requests) == recorded
    assert "(2 match, 1 recorded)" in done.stdout and REPLAYED_NOTE in done.stdout


@pytest.mark.kernel
def test_an_agent_cell_changed_since_its_run_is_an_error_not_a_model_call(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext kernel_agent"),
            new_code_cell(f"%%agent --model m --base-url {openai_server.base_url}\nA task never run."),
        ]
    )
    nbformat.write(nb, tmp_path / "never.ipynb")  # no outputs recorded: the task was edited, or never run

    done = replay_cli(tmp_path / "never.ipynb", without_model(OPENAI_BASE_URL=openai_server.base_url))

    assert done.returncode == 1, done.stdout + done.stderr
    assert "cell   1  -         error" in done.stdout and "no recorded run of this %%agent cell" in done.stdout
    assert openai_server.requests == []
