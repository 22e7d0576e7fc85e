"""Issue 10: what a run records is read back as recorded, and its notebooks are safe to Run All.

Exports are run the way stock JupyterLab's Run All runs them: nbclient with
``allow_errors`` and no ``skip-execution`` support, on a real ipykernel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from click.testing import CliRunner
from nbclient import NotebookClient
from nbformat.v4 import new_output
from openai_server import OpenAIServer, Reply

from kernel_agent import Agent
from kernel_agent.cli.app import cli
from kernel_agent.notebook.export import RAISES_TAG, SKIP_TAG, build_notebook, export_run
from kernel_agent.notebook.load import load_run
from kernel_agent.notebook.replay import replay
from kernel_agent.records import Round, Run, RunInfo
from kernel_agent.result import ExecutionResult

pytestmark = pytest.mark.kernel

LOOP = "import time\nstep = 1\nwhile True:\n    time.sleep(0.1)"
EXIT = "import os\nos._exit(1)"
INTERRUPTED = new_output("error", ename="KeyboardInterrupt", evalue="", traceback=["KeyboardInterrupt"])


def hazardous_run() -> Run:
    """A run whose rounds hung (then were interrupted) and killed the kernel, between two good rounds."""
    rounds = (
        Round(
            1,
            reply="r1",
            code="x = 1\nprint(x)",
            result=ExecutionResult("ok", (new_output("stream", name="stdout", text="1\n"),), 2, 0.1),
        ),
        Round(
            2,
            reply="r2",
            code=LOOP,
            result=ExecutionResult("timeout", (INTERRUPTED,), 3, 5.0, note="interrupted at the time limit"),
        ),
        Round(3, reply="r3", code=EXIT, result=ExecutionResult("died", (), 4, 0.2, state_lost=True)),
        Round(
            4,
            reply="r4",
            code="print('after')",
            result=ExecutionResult("ok", (new_output("stream", name="stdout", text="after\n"),), 5, 0.1),
        ),
        Round(5, reply="r5", answer="done"),
    )
    info = RunInfo(task="t", model="m", setup_code="import sys", started_at="2025-01-02T10:00:00+00:00")
    return Run(info, rounds, answer="done", stop_reason="answer", setup_result=ExecutionResult("ok", (), 1, 0.1))


def test_run_all_in_stock_jupyter_neither_hangs_nor_kills_the_kernel(tmp_path: Path) -> None:
    nb = build_notebook(hazardous_run())
    nb.cells.append(nbformat.v4.new_code_cell("print('kernel alive')"))
    # Stock JupyterLab ignores skip-execution: use a tag no cell has, and a per-cell timeout a hang would hit.
    client = NotebookClient(
        nb,
        timeout=20,
        kernel_name="python3",
        allow_errors=True,
        skip_cells_with_tag="no-such-tag",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # a hang raises CellTimeoutError, a kernel death DeadKernelError
    assert nb.cells[-1].outputs[0]["text"] == "kernel alive\n"
    after = next(c for c in nb.cells if c.cell_type == "code" and c.source == "print('after')")
    assert after.outputs[0]["text"] == "after\n"  # re-run: the cells above it did nothing


def test_guarded_cells_keep_the_code_and_load_back_as_recorded(tmp_path: Path) -> None:
    path = export_run(hazardous_run(), tmp_path / "run.ipynb")
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    looped = cells[2]
    assert SKIP_TAG in looped.metadata["tags"] and looped.metadata["kernel_agent"]["code"] == LOOP
    assert "# while True:" in looped.source and "recorded status: timeout" in looped.source
    loaded = load_run(path)
    statuses = [r.status for r in loaded.rounds]
    assert statuses == [
        "ok",
        "timeout",
        "died",
        "ok",
        "answer",
    ]  # the KeyboardInterrupt output does not make it an error
    assert [r.code for r in loaded.rounds[:4]] == ["x = 1\nprint(x)", LOOP, EXIT, "print('after')"]
    assert loaded.rounds[1].result is not None and loaded.rounds[1].result.code == LOOP
    again = export_run(loaded.run, tmp_path / "again.ipynb")  # a re-export (as resume does) stays guarded
    cells = [c for c in nbformat.read(again, as_version=4).cells if c.cell_type == "code"]
    assert [SKIP_TAG in c.metadata.get("tags", []) for c in cells] == [False, False, True, True, False]
    assert cells[2].source == looped.source


def _agent(server: OpenAIServer, model: str, host: str, **options: Any) -> Agent:
    base_url = server.base_url.replace("127.0.0.1", host)
    return Agent(
        model=model,
        base_url=base_url,
        api_key="sk-test-not-for-the-kernel",
        protocol="tags",
        model_options={"max_retries": 2, "backoff": 0.01},
        **options,
    )


def test_resume_twice_keeps_every_answer_in_order_with_per_turn_provenance(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(Reply("<Code>total = 40 + 2\nprint(total)</Code>"))
    openai_server.add(Reply("<Answer>first: 42</Answer>"))
    openai_server.add(Reply("<Code>print(total * 2)</Code>"))
    openai_server.add(Reply("<Answer>second: 84</Answer>"))
    openai_server.add(Reply("<Code>print(total * 3)</Code>"))
    openai_server.add(Reply("<Answer>third: 126</Answer>"))
    with _agent(openai_server, "model-a", "127.0.0.1") as agent:
        first = agent.run("compute", workspace=tmp_path / "ws")
        assert first.notebook_path is not None
    with _agent(openai_server, "model-b", "localhost") as agent:
        agent.resume(first.notebook_path, "double it")
        third = agent.resume(first.notebook_path, "triple it")
    assert third.answer == "third: 126"
    resumed = openai_server.requests[2]["messages"]
    assert "Defined in the kernel so far (reuse them, do not reload): `total: int`" in resumed[0]["content"]
    nb = nbformat.read(third.notebook_path, as_version=4)
    answers = [c.source for c in nb.cells if c.metadata["kernel_agent"]["role"] == "answer"]
    assert answers == ["## Answer\n\nfirst: 42", "## Answer\n\nsecond: 84", "## Answer\n\nthird: 126"]
    questions = [c.source for c in nb.cells if c.metadata["kernel_agent"]["role"] == "question"]
    assert questions == [  # a follow-up names its model where it changes
        "## Follow-up question 1\n\ndouble it\n\n*Model `model-b` · protocol `tags`*",
        "## Follow-up question 2\n\ntriple it",
    ]
    header = next(c.source for c in nb.cells if c.metadata["kernel_agent"]["role"] == "header")
    assert header.startswith("# Task\n\ncompute\n") and "Follow-up" not in header  # each has its own section
    assert "- **Model:** `model-a`" in header  # the first turn's: the task's own
    turns = nb.metadata["kernel_agent"]["turns"]
    assert [t["task"] for t in turns] == ["compute", "double it", "triple it"]
    assert [t["answer"] for t in turns] == ["first: 42", "second: 84", "third: 126"]
    assert [(t["first_round"], t["last_round"]) for t in turns] == [(1, 2), (3, 4), (5, 6)]
    assert [t["model"] for t in turns] == ["model-a", "model-b", "model-b"]
    assert turns[0]["endpoint"].startswith("127.0.0.1:") and turns[1]["endpoint"].startswith("localhost:")
    assert nb.metadata["kernel_agent"]["endpoint"].startswith("localhost:")  # the run's provenance is the latest turn's
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code" and c.execution_count is not None]
    assert counts == sorted(set(counts)), counts  # unique and increasing across the three kernels
    loaded = load_run(third.notebook_path)  # type: ignore[arg-type]
    assert [t.answer for t in loaded.run.all_turns()] == ["first: 42", "second: 84", "third: 126"]
    assert [r.index for r in loaded.rounds] == [1, 2, 3, 4, 5, 6]
    assert [r.answer for r in loaded.rounds if r.answer] == ["first: 42", "second: 84", "third: 126"]


def test_resume_after_a_timeout_reports_exactly_what_was_rebuilt_and_which_names_are_missing(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(Reply("<Code>x = 1</Code>"))
    openai_server.add(Reply("<Code>import time\ni = 0\nwhile True:\n    i += 1\n    time.sleep(0.01)</Code>"))
    openai_server.add(Reply("<Code>print(i > 0)</Code>"))  # used the timed-out cell's name, and succeeded
    openai_server.add(Reply("<Code>y = x + 1</Code>"))
    openai_server.add(Reply("<Answer>looped</Answer>"))
    briefings: list[str] = []

    def follow_up(body: dict[str, Any]) -> Reply:
        briefings.append(body["messages"][-1]["content"])
        return Reply("<Answer>ok</Answer>")

    openai_server.add(follow_up)
    with _agent(openai_server, "m", "127.0.0.1", exec_timeout=1.5, preload=False) as agent:
        first = agent.run("loop", workspace=tmp_path / "ws")
        assert first.notebook_path is not None
    assert [r.status for r in first.rounds] == ["ok", "timeout", "ok", "ok", "answer"]
    with _agent(openai_server, "m", "127.0.0.1") as agent:
        agent.resume(first.notebook_path, "and now?")
    assert "## Round 2 (timeout)" in briefings[0]
    assert (
        "state rebuilt: re-ran 2 rounds (1, 4) after the setup cell; round 3 was skipped (it reads i, now gone); "
        "round 2 was not re-run (it timed out); names now missing: i, time"
    ) in briefings[0]


def test_a_kernel_death_after_a_timeout_rebuilds_what_it_can_and_names_what_is_missing(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(Reply("<Code>x = 1</Code>"))
    openai_server.add(Reply("<Code>import time\ni = 0\nwhile True:\n    i += 1\n    time.sleep(0.01)</Code>"))
    openai_server.add(Reply("<Code>run = [i]\nprint(len(run))</Code>"))  # used the timed-out cell's name
    openai_server.add(Reply("<Code>import os\nos._exit(1)</Code>"))
    openai_server.add(Reply("<Code>print(x)</Code>"))
    openai_server.add(Reply("<Answer>done</Answer>"))
    with _agent(openai_server, "m", "127.0.0.1", exec_timeout=1.5, preload=False) as agent:
        run = agent.run("crash", workspace=tmp_path / "ws")
    died = run.rounds[3].result
    assert died is not None and died.status == "died" and died.state_lost
    assert (
        "state rebuilt: re-ran 1 round (1) after the setup cell; round 3 was skipped (it reads i, now gone); "
        "round 2 was not re-run (it timed out); names now missing: i, run, time"
    ) in died.note
    assert died.lost_names == ("i", "run", "time") and died.rebuilt_cells == (0, 1)
    assert "all variables were lost" not in died.to_llm_text()
    assert run.rounds[4].result is not None and run.rounds[4].result.stdout == "1\n"  # x came back
    loaded = load_run(run.notebook_path)  # type: ignore[arg-type]
    assert loaded.rounds[3].result is not None and loaded.rounds[3].result.lost_names == ("i", "run", "time")
    assert loaded.rounds[3].status == "died"
    note = next(
        c.source
        for c in nbformat.read(run.notebook_path, as_version=4).cells
        if c.metadata["kernel_agent"].get("role") == "note" and c.metadata["kernel_agent"].get("round") == 4
    )
    assert "names now missing: `i`, `run`, `time`" in note and "all variables were lost" not in note.lower()


def timed_out_dependency_run() -> Run:
    """Round 2 timed out after setting ``step``; round 3 used it (and succeeded live)."""
    rounds = (
        Round(
            1,
            reply="r1",
            code="x = 1\nprint(x)",
            result=ExecutionResult("ok", (new_output("stream", name="stdout", text="1\n"),), 2, 0.1),
        ),
        Round(
            2,
            reply="r2",
            code=LOOP,
            result=ExecutionResult("timeout", (INTERRUPTED,), 3, 5.0, note="interrupted at the time limit"),
        ),
        Round(
            3,
            reply="r3",
            code="print(step + x)",
            result=ExecutionResult("ok", (new_output("stream", name="stdout", text="2\n"),), 4, 0.1),
        ),
        Round(
            4,
            reply="r4",
            code="print(x * 3)",
            result=ExecutionResult("ok", (new_output("stream", name="stdout", text="3\n"),), 5, 0.1),
        ),
        Round(5, reply="r5", answer="done"),
    )
    info = RunInfo(task="t", model="m", setup_code="import sys", started_at="2025-01-02T10:00:00+00:00")
    return Run(info, rounds, answer="done", stop_reason="answer", setup_result=ExecutionResult("ok", (), 1, 0.1))


def test_replay_check_passes_on_a_timeout_run_with_the_dependency_expected_and_fails_on_a_hand_edit(
    tmp_path: Path,
) -> None:
    path = export_run(timed_out_dependency_run(), tmp_path / "run.ipynb")
    nb = nbformat.read(path, as_version=4)
    dependent = next(c for c in nb.cells if c.cell_type == "code" and c.source == "print(step + x)")
    assert dependent.metadata["kernel_agent"]["unreplayed"] == ["step"]
    report = replay(path, tmp_path, timeout=30)
    assert report.ok, report.to_text()
    assert report.counts() == {"match": 3, "expected": 1, "skipped": 1}, report.to_text()
    expected = next(c for c in report.cells if c.status == "expected")
    assert expected.round == 3 and "step" in expected.detail
    edited = next(c for c in nb.cells if c.cell_type == "code" and c.source == "print(x * 3)")
    edited.outputs[0]["text"] = "4\n"
    nbformat.write(nb, path)
    report = replay(path, tmp_path, timeout=30)
    assert not report.ok and report.counts()["mismatch"] == 1, report.to_text()


def test_a_resumed_run_with_a_timeout_shows_as_recorded_replays_and_runs_under_nbconvert(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(Reply("<Code>x = 2</Code>"))
    openai_server.add(Reply("<Code>import time\nwhile True:\n    time.sleep(0.05)</Code>"))
    openai_server.add(Reply("<Answer>first</Answer>"))
    openai_server.add(Reply("<Code>print(x * 5)</Code>"))
    openai_server.add(Reply("<Answer>second</Answer>"))
    with _agent(openai_server, "m", "127.0.0.1", exec_timeout=1.5, preload=False) as agent:
        first = agent.run("loop", workspace=tmp_path / "ws")
        assert first.notebook_path is not None
    with _agent(openai_server, "m", "127.0.0.1", preload=False) as agent:
        second = agent.resume(first.notebook_path, "times five")
    path = second.notebook_path
    assert path is not None
    shown = CliRunner().invoke(cli, ["show", str(path)], catch_exceptions=False).output
    assert "round 2: timeout" in shown and "round 2: error" not in shown
    assert (  # the run's answer first (the latest turn's), then the turns in order
        shown.index("second") < shown.index("first") < shown.index("Follow-up question 1") < shown.index("times five")
    )
    looped = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"][2]
    assert SKIP_TAG in looped.metadata["tags"] and RAISES_TAG not in looped.metadata["tags"]
    report = replay(path, tmp_path / "ws", timeout=30)
    assert report.ok and report.counts() == {"match": 3, "skipped": 1}, report.to_text()
    out = tmp_path / "executed.ipynb"
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("jupyter-nbconvert")),
            "--to",
            "notebook",
            "--execute",
            "--ExecutePreprocessor.timeout=60",
            "--output",
            str(out),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path / "ws",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    executed = [c for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"]
    assert executed[-1].outputs[0]["text"] == "10\n"


def test_the_clean_view_keeps_a_timed_out_cell_later_cells_use_and_explains_it(tmp_path: Path) -> None:
    export_run(timed_out_dependency_run(), tmp_path / "run.ipynb")
    nb = nbformat.read(tmp_path / ".run.clean.ipynb", as_version=4)
    codes = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.metadata["kernel_agent"]["round"] for c in codes] == [0, 1, 2, 3, 4]
    assert SKIP_TAG in codes[2].metadata["tags"] and codes[2].metadata["kernel_agent"]["code"] == LOOP
    notes = [c.source for c in nb.cells if c.metadata["kernel_agent"]["role"] == "note"]
    assert any("Kept although it timed out" in n and "`step`" in n for n in notes)
    assert codes[3].metadata["kernel_agent"]["unreplayed"] == ["step"]
