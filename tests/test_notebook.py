"""Notebook export and load-back: layout, tags, metadata, both views, atomic write, goldens.

Pure tests: runs are built from hand-written ``ExecutionResult`` values with
real nbformat v4 outputs and a real PNG. No kernel.

Golden files (``tests/golden/*.ipynb``) are compared after normalising cell
ids, timestamps, the version and PNG data. Regenerate them after an
intended layout change with::

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_notebook.py -k golden
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from matplotlib.figure import Figure
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from kernel_agent.errors import NotebookError
from kernel_agent.notebook.export import build_notebook, clean_path, export_run, write_notebook
from kernel_agent.notebook.load import load_run
from kernel_agent.records import Artifact, Round, Run, RunInfo, Usage
from kernel_agent.result import ErrorInfo, ExecutionResult, png_size

GOLDEN = Path(__file__).parent / "golden"
SETUP = "import matplotlib\nmatplotlib.rcParams['figure.dpi'] = 50\nimport pandas as pd"
TRACEBACK = [
    "---------------------------------------------------------------------------",
    "KeyError                                  Traceback (most recent call last)",
    "Cell In[3], line 1\n----> 1 total = df['missing'].sum()",
    "KeyError: 'missing'",
]


def small_png() -> str:
    figure = Figure(figsize=(2, 1.5), dpi=50)
    figure.subplots().plot([1, 3, 2])
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def stdout(text: str) -> dict[str, Any]:
    value: dict[Any, Any] = new_output("stream", name="stdout", text=text)
    return value


def ok(count: int, *outputs: dict[str, Any], duration: float = 0.2) -> ExecutionResult:
    return ExecutionResult("ok", tuple(outputs), count, duration)


def error(count: int, ename: str, evalue: str) -> ExecutionResult:
    traceback = [line.replace("KeyError", ename).replace("'missing'", evalue) for line in TRACEBACK]
    out = new_output("error", ename=ename, evalue=evalue, traceback=traceback)
    return ExecutionResult("error", (out,), count, 0.1, ErrorInfo(ename, evalue, tuple(traceback)))


def make_run(**changes: Any) -> Run:
    png = small_png()
    rounds = (
        Round(
            1,
            reply="<Analyze>Load the data.</Analyze><Code>...</Code>",
            reasoning="Load the data and count the rows.",
            code="df = pd.read_csv('sales.csv')\nprint('rows:', len(df))",
            result=ok(2, stdout("rows: 4\n")),
            usage=Usage(100, 20, 120),
            model_s=1.5,
            exec_s=0.2,
            started_at="2025-01-02T10:00:01+00:00",
        ),
        Round(
            2,
            reply="<Analyze>Sum a missing column.</Analyze><Code>...</Code>",
            reasoning="Sum the `missing` column.",
            code="total = df['missing'].sum()",
            result=error(3, "KeyError", "'missing'"),
            usage=Usage(150, 10, 160),
        ),
        Round(
            3,
            reply="<Code>busy loop</Code>",
            reasoning="Wait for the slow source.",
            code="import time\nwhile True:\n    time.sleep(1)",
            result=ExecutionResult("timeout", (), 4, 30.0, note="interrupted at the time limit"),
        ),
        Round(
            4,
            reply="<Code>exit</Code>",
            code="import os\nos._exit(1)",
            result=ExecutionResult("died", (), 5, 0.3, state_lost=True, note="the kernel was restarted"),
        ),
        Round(
            5,
            reply="<Analyze>Ratio.</Analyze><Code>...</Code>",
            reasoning="Compute the ratio of `a` to `b`.",
            code="df['ratio'] = df['a'] / df['b']\ndf['ratio'].sum()",
            result=ok(4, new_output("execute_result", data={"text/plain": "10.0"}, execution_count=4)),
            artifacts=(Artifact("ratio.csv", 64),),
        ),
        Round(
            6,
            reply="<Code>plot</Code>",
            reasoning="Plot it.",
            code="import matplotlib.pyplot as plt\nplt.plot(df['ratio'])",
            result=ok(
                5,
                new_output(
                    "execute_result",
                    data={"text/plain": "[<matplotlib.lines.Line2D at 0x7f3a2c1d5e10>]"},
                    execution_count=5,
                ),
                new_output("display_data", data={"image/png": png, "text/plain": "<Figure size 100x75 with 1 Axes>"}),
            ),
        ),
        Round(7, reply="I think the ratio is fine.", problem="the reply had no <Code> or <Answer> tag"),
        Round(
            8,
            reply="<Analyze>The ratios sum to 10.</Analyze><Answer>The ratios sum to **10.0**.</Answer>",
            reasoning="The ratios sum to 10.",
            answer="The ratios sum to **10.0**.",
            usage=Usage(300, 30, 330),
        ),
    )
    run = Run(
        info=RunInfo(
            task="What do the a/b ratios sum to?",
            model="qwen2.5-coder",
            protocol="tags",
            endpoint="https://user:sk-secret@api.example.com:8443/v1?key=sk-x",
            data_files=("sales.csv",),
            workspace="/data/project/ws",
            setup_code=SETUP,
            scripted=True,
            started_at="2025-01-02T10:00:00+00:00",
            language_info={"name": "python", "version": "3.11.9", "mimetype": "text/x-python"},
        ),
        rounds=rounds,
        answer="The ratios sum to **10.0**.",
        stop_reason="answer",
        usage=Usage(550, 60, 610),
        finished_at="2025-01-02T10:01:00+00:00",
        setup_result=ok(1),
    )
    return dataclasses.replace(run, **changes)


def result_of(round_: Round) -> ExecutionResult:
    """The round's execution (the test's rounds that are asked for one have one)."""
    assert round_.result is not None, round_.index
    return round_.result


def meta(cell: dict[str, Any]) -> dict[str, Any]:
    value: dict[Any, Any] = cell["metadata"]["kernel_agent"]
    return value


def roles(nb: nbformat.NotebookNode) -> list[str]:
    return [f"{meta(c)['role']}:{meta(c).get('round', '')}" for c in nb.cells]


def code_cell(nb: nbformat.NotebookNode, number: int) -> nbformat.NotebookNode:
    cell: nbformat.NotebookNode = next(c for c in nb.cells if c.cell_type == "code" and meta(c).get("round") == number)
    return cell


# -- the full view ---------------------------------------------------------------------------------


def test_full_view_has_every_round_in_order_and_validates() -> None:
    nb = build_notebook(make_run(), notebook_dir="/data/project/runs")
    nbformat.validate(nb)
    assert roles(nb) == [
        "header:", "setup:0",
        "reasoning:1", "code:1",
        "reasoning:2", "code:2",
        "reasoning:3", "note:3", "code:3",
        "note:4", "code:4",
        "reasoning:5", "code:5",
        "reasoning:6", "code:6",
        "note:7",
        "reasoning:8",
        "answer:",
    ]  # fmt: skip
    assert [c.id for c in nb.cells][:4] == ["header", "setup", "round-1-reasoning", "round-1-code"]


def test_header_states_task_data_model_protocol_and_scripted() -> None:
    header = build_notebook(make_run()).cells[0].source
    assert "What do the a/b ratios sum to?" in header
    assert "`sales.csv`" in header and "`qwen2.5-coder`" in header and "`tags`" in header
    assert "scripted" in header
    assert "sk-secret" not in header
    # the model, not where it is served: the endpoint is the operator's, a notebook is shared (the
    # metadata keeps the host for `show`: test_notebook_metadata_has_kernelspec_language_info_and_provenance)
    assert "api.example.com" not in header and "8443" not in header
    unscripted = build_notebook(make_run(info=RunInfo(task="t"))).cells[0].source
    assert "scripted" not in unscripted


def test_setup_and_code_cells_are_exact_with_real_outputs_and_counts() -> None:
    run = make_run()
    nb = build_notebook(run)
    setup = nb.cells[1]
    assert setup.source == SETUP and setup.execution_count == 1
    for rnd in run.rounds:
        if rnd.code is None:
            continue
        cell = code_cell(nb, rnd.index)
        if rnd.status in ("timeout", "died"):  # guarded: commented out, the original kept in metadata
            assert meta(cell)["code"] == rnd.code and all(line.startswith("#") for line in cell.source.splitlines())
            assert "recorded status: " + rnd.status in cell.source
        else:
            assert cell.source == rnd.code and "code" not in meta(cell)
        assert cell.execution_count == result_of(rnd).execution_count
        assert [dict(o) for o in cell.outputs] == [dict(o) for o in result_of(rnd).outputs]
    image = code_cell(nb, 6).outputs[1]["data"]["image/png"]
    assert png_size(image) == (100, 75)


def test_failed_cells_are_tagged_and_the_skipped_ones_say_why() -> None:
    nb = build_notebook(make_run())
    assert code_cell(nb, 2).metadata["tags"] == ["raises-exception"]
    assert code_cell(nb, 3).metadata["tags"] == ["skip-execution"]
    assert code_cell(nb, 4).metadata["tags"] == ["skip-execution"]
    assert "tags" not in code_cell(nb, 1).metadata
    notes = {meta(c)["round"]: c.source for c in nb.cells if meta(c)["role"] == "note"}
    assert "Timed out" in notes[3] and "skip" in notes[3] and "30.0 s" in notes[3]
    assert "kernel died" in notes[4] and "skip" in notes[4]
    assert "no &lt;Code&gt; or &lt;Answer&gt; tag" in notes[7]  # shown as text, not swallowed as HTML


def test_code_that_never_ran_is_kept_but_skipped() -> None:
    rounds = (Round(1, reply="r", reasoning="Go.", code="print(1)"),)
    run = make_run(rounds=rounds, stop_reason="cancelled", answer=None)
    nb = build_notebook(run)
    cell = code_cell(nb, 1)
    assert cell.metadata["tags"] == ["skip-execution"] and cell.execution_count is None and cell.outputs == []
    assert cell.source == "# kernel-agent" + cell.source.split("\n")[0][len("# kernel-agent") :] + "\n# print(1)"
    assert meta(cell)["code"] == "print(1)"
    assert "Not executed" in nb.cells[-3].source
    nbformat.validate(nb)


def test_round_record_sits_on_the_rounds_last_cell() -> None:
    nb = build_notebook(make_run())
    first = meta(code_cell(nb, 1))
    assert first["status"] == "ok" and first["duration_s"] == 0.2 and first["model_s"] == 1.5
    assert first["usage"] == {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    assert first["reply"].startswith("<Analyze>Load the data.")
    assert meta(code_cell(nb, 5))["artifacts"] == [{"path": "ratio.csv", "size": 64, "change": "created"}]
    assert meta(code_cell(nb, 2))["error"] == {"ename": "KeyError", "evalue": "'missing'"}
    assert meta(code_cell(nb, 4))["state_lost"] is True
    problem = next(c for c in nb.cells if meta(c).get("round") == 7)
    assert meta(problem)["status"] == "no-code" and meta(problem)["problem"].startswith("the reply had no")
    reasoning = next(c for c in nb.cells if meta(c) == {"role": "reasoning", "round": 1})
    assert "reply" not in meta(reasoning)


def test_notebook_metadata_has_kernelspec_language_info_and_provenance() -> None:
    nb = build_notebook(make_run(), notebook_dir="/data/project/runs")
    assert nb.metadata.kernelspec == {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    assert nb.metadata.language_info["version"] == "3.11.9"
    provenance = nb.metadata.kernel_agent
    assert provenance["endpoint"] == "api.example.com:8443"
    assert "sk-" not in json.dumps(provenance)
    assert provenance["workspace"] == "../ws"
    assert provenance["usage"]["total_tokens"] == 610
    assert provenance["scripted"] is True and provenance["view"] == "full" and provenance["stop_reason"] == "answer"
    expected = {"model", "protocol", "task", "data_files", "started_at", "finished_at", "error", "version"}
    assert expected <= set(provenance)
    bare = build_notebook(make_run(info=RunInfo(task="t", workspace="/srv/ws")), notebook_dir="/home/me/runs")
    assert bare.metadata.language_info == {"name": "python"}
    assert bare.metadata.kernel_agent["workspace"] == "/srv/ws"  # only the root in common: stays absolute


def test_final_cell_gives_the_answer_or_why_there_is_none() -> None:
    assert build_notebook(make_run()).cells[-1].source == "## Answer\n\nThe ratios sum to **10.0**."
    failed = build_notebook(make_run(answer=None, stop_reason="llm_error", error="HTTP 503 from the model"))
    assert "No answer" in failed.cells[-1].source and "HTTP 503 from the model" in failed.cells[-1].source
    assert "model endpoint failed" in failed.cells[-1].source
    running = build_notebook(make_run(answer=None, stop_reason=None))
    assert "In progress" in running.cells[-1].source


def test_an_answer_round_without_text_keeps_its_record_on_the_final_cell() -> None:
    rounds = (Round(1, reply="<Answer>42</Answer>", answer="42", usage=Usage(5, 1, 6)),)
    nb = build_notebook(make_run(rounds=rounds, answer="42"))
    assert roles(nb) == ["header:", "setup:0", "answer:1"]
    assert meta(nb.cells[-1])["reply"] == "<Answer>42</Answer>"


def test_unknown_view_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown notebook view"):
        build_notebook(make_run(), view="tidy")  # type: ignore[arg-type]


# -- the clean view --------------------------------------------------------------------------------


def test_clean_view_drops_failed_attempts_and_renumbers() -> None:
    run = make_run()
    nb = build_notebook(run, view="clean")
    assert result_of(run.rounds[4]).outputs[0]["execution_count"] == 4  # renumbering touched copies only
    nbformat.validate(nb)
    assert roles(nb) == [
        "header:", "setup:0", "reasoning:1", "code:1", "reasoning:5", "code:5", "reasoning:6", "code:6",
        "reasoning:8", "answer:",
    ]  # fmt: skip
    codes = [c for c in nb.cells if c.cell_type == "code"]
    assert [c.execution_count for c in codes] == [1, 2, 3, 4]
    results = [o for c in codes for o in c.outputs if o.output_type == "execute_result"]
    assert [o.execution_count for o in results] == [3, 4]
    assert code_cell(nb, 6).outputs[1]["data"]["image/png"] == result_of(run.rounds[5]).outputs[1]["data"]["image/png"]
    assert "Clean view" in nb.cells[0].source and nb.metadata.kernel_agent["view"] == "clean"
    assert not any("tags" in c.metadata for c in codes)


def test_clean_view_keeps_a_failed_cell_whose_names_later_cells_use() -> None:
    rounds = (
        Round(
            1,
            reply="",
            code="df = load()\ndf['r'] = df.a / df.b\ndf.plot(kind='no')",
            result=error(2, "ValueError", "no"),
        ),
        Round(2, reply="", code="total = 1 +", result=error(3, "SyntaxError", "invalid syntax")),
        Round(3, reply="", code="x = undefined_name", result=error(4, "NameError", "undefined_name")),
        Round(4, reply="", code="x = 2\nprint(df['r'].sum() + x)", result=ok(5, stdout("3\n"))),
    )
    nb = build_notebook(make_run(rounds=rounds, answer=None, stop_reason="max_rounds"), view="clean")
    assert [meta(c).get("round") for c in nb.cells if c.cell_type == "code"] == [0, 1, 4]
    assert code_cell(nb, 1).metadata["tags"] == ["raises-exception"]
    note = next(c.source for c in nb.cells if meta(c)["role"] == "note")
    assert "Kept although it failed" in note and "`df`" in note


def test_clean_view_follows_names_through_a_kept_failure() -> None:
    rounds = (
        Round(1, reply="", code="base = 10\nboom()", result=error(2, "NameError", "boom")),
        Round(2, reply="", code="value = base * 2\nraise RuntimeError", result=error(3, "RuntimeError", "")),
        Round(3, reply="", code="print(value)", result=ok(4, stdout("20\n"))),
    )
    nb = build_notebook(make_run(rounds=rounds, answer=None, stop_reason="max_rounds"), view="clean")
    assert [meta(c).get("round") for c in nb.cells if c.cell_type == "code"] == [0, 1, 2, 3]


# -- writing ---------------------------------------------------------------------------------------


def test_export_run_writes_both_views_next_to_each_other(tmp_path: Path) -> None:
    path = export_run(make_run(), tmp_path / "run.ipynb")
    assert path == tmp_path / "run.ipynb"
    assert clean_path(path) == tmp_path / ".run.clean.ipynb"
    full, clean = nbformat.read(path, as_version=4), nbformat.read(clean_path(path), as_version=4)
    nbformat.validate(full)
    nbformat.validate(clean)
    assert full.metadata.kernel_agent["view"] == "full" and clean.metadata.kernel_agent["view"] == "clean"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.clean.ipynb", "run.ipynb"]


def test_write_is_atomic_when_the_notebook_cannot_be_serialised(tmp_path: Path) -> None:
    path = write_notebook(build_notebook(make_run()), tmp_path / "run.ipynb")
    before = path.read_bytes()
    broken = build_notebook(make_run())
    broken.cells[2].metadata["kernel_agent"]["oops"] = object()
    with pytest.raises(NotebookError, match="cannot serialise") as caught:
        write_notebook(broken, path)
    assert caught.value.path == str(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.ipynb"]


def test_write_keeps_the_old_file_when_the_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_notebook(build_notebook(make_run()), tmp_path / "run.ipynb")
    before = path.read_bytes()

    def refuse(src: object, dst: object, *, src_dir_fd: int, dst_dir_fd: int) -> None:
        assert os.read(os.open(str(src), os.O_RDONLY, dir_fd=src_dir_fd), 1 << 20).endswith(b"}\n")  # fully written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(NotebookError, match="No space left"):
        write_notebook(build_notebook(make_run(answer="other")), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.ipynb"]


def test_write_refuses_an_invalid_notebook(tmp_path: Path) -> None:
    nb = build_notebook(make_run())
    nb.cells[1].execution_count = "1"
    with pytest.raises(NotebookError, match="invalid notebook") as raised:
        write_notebook(nb, tmp_path / "run.ipynb")
    assert list(tmp_path.iterdir()) == []
    assert "'1' is not of type 'integer'" in str(raised.value)  # jsonschema's message, naming the field


def test_saves_validate_on_the_fast_backend_whatever_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NBFORMAT_VALIDATOR", "jsonschema")
    nb = build_notebook(make_run())  # the test's own outputs (new_output) validate as the environment says
    used: list[str] = []
    real: Callable[..., Any] = nbformat.validator.get_validator

    def spy(*args: Any, **kwargs: Any) -> Any:
        validator = real(*args, **kwargs)
        used.append(validator.name)
        return validator

    monkeypatch.setattr(nbformat.validator, "get_validator", spy)
    write_notebook(nb, tmp_path / "run.ipynb")
    assert used == ["fastjsonschema"]


# -- goldens ---------------------------------------------------------------------------------------


def normalised(nb: nbformat.NotebookNode) -> str:
    nb = copy.deepcopy(nb)
    nb.metadata.kernel_agent.update(version="<version>", started_at="<time>", finished_at="<time>")
    for number, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{number}"
        for out in cell.get("outputs", []):
            if "image/png" in out.get("data", {}):
                size = png_size(out["data"]["image/png"])
                out["data"]["image/png"] = f"<png {size[0]}x{size[1]}>" if size else "<not a png>"
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("view", ["full", "clean"])
def test_golden_notebooks(view: str) -> None:
    nb = build_notebook(make_run(), view=view, notebook_dir="/data/project/runs")  # type: ignore[arg-type]
    text = normalised(nb)
    golden = GOLDEN / f"run.{view}.ipynb"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    nbformat.validate(nbformat.reads(golden.read_text(encoding="utf-8"), as_version=4))


# -- loading back ----------------------------------------------------------------------------------


def test_load_run_rebuilds_rounds_results_and_info(tmp_path: Path) -> None:
    run = make_run()
    run = dataclasses.replace(run, info=dataclasses.replace(run.info, workspace=str(tmp_path / "ws")))
    (tmp_path / "out").mkdir()
    loaded = load_run(export_run(run, tmp_path / "out" / "run.ipynb"))
    assert loaded.view == "full" and loaded.version
    assert loaded.info == dataclasses.replace(run.info, endpoint="api.example.com:8443")  # workspace back absolute
    assert loaded.run.setup_result is not None and loaded.run.setup_result.execution_count == 1
    assert (loaded.run.answer, loaded.run.stop_reason, loaded.run.usage) == (run.answer, run.stop_reason, run.usage)
    assert [r.index for r in loaded.rounds] == [r.index for r in run.rounds]
    for got, want in zip(loaded.rounds, run.rounds, strict=True):
        assert (got.reply, got.reasoning, got.code, got.status, got.answer, got.problem) == (
            want.reply, want.reasoning, want.code, want.status, want.answer, want.problem,
        )  # fmt: skip
        assert (got.usage, got.artifacts, got.model_s) == (want.usage, want.artifacts, want.model_s)
        if want.result is not None:
            assert got.result is not None
            assert got.result.to_llm_text() == want.result.to_llm_text()
            assert (got.result.error, got.result.state_lost, got.result.note) == (
                want.result.error, want.result.state_lost, want.result.note,
            )  # fmt: skip
    assert loaded.rebuild_code == (SETUP, run.rounds[0].code, run.rounds[4].code, run.rounds[5].code)


def test_load_run_reads_the_clean_view(tmp_path: Path) -> None:
    loaded = load_run(clean_path(export_run(make_run(), tmp_path / "run.ipynb")))
    assert loaded.view == "clean"
    assert [r.index for r in loaded.rounds] == [1, 5, 6, 8]
    assert [r.result.execution_count for r in loaded.rounds if r.result] == [2, 3, 4]


def test_load_run_tolerates_hand_edits(tmp_path: Path) -> None:
    nb = build_notebook(make_run())
    code_cell(nb, 1).source = "df = pd.read_csv('sales.csv')  # edited by hand"
    del code_cell(nb, 2).metadata["kernel_agent"]  # stripped metadata: outputs still show the error
    nb.cells.insert(4, new_markdown_cell("A note I added."))
    nb.cells.insert(5, new_code_cell("print('added')", outputs=[stdout("added\n")], execution_count=9))
    nb.metadata.kernel_agent["usage"] = "lots"
    path = tmp_path / "edited.ipynb"
    nbformat.write(nb, path)
    loaded = load_run(path)
    first, added, second = loaded.rounds[:3]
    assert first.index == 1 and first.code is not None and first.code.endswith("# edited by hand")
    assert added.index == 2 and added.reasoning == "A note I added." and result_of(added).stdout == "added\n"
    assert added.reply == "A note I added.\n\n```python\nprint('added')\n```"
    assert second.index == 3  # indexes stay increasing
    error = result_of(second).error
    assert second.status == "error" and error is not None and error.ename == "KeyError"
    assert loaded.run.usage == Usage()
    assert "print('added')" in loaded.rebuild_code and "total = df['missing'].sum()" not in loaded.rebuild_code


def test_load_run_reads_a_notebook_we_did_not_write(tmp_path: Path) -> None:
    nb = new_notebook(cells=[
        new_markdown_cell("# Exploring"),
        new_code_cell("x = 1"),
        new_markdown_cell("Now print it."),
        new_code_cell("print(x)", execution_count=2, outputs=[new_output("stream", name="stdout", text="1\n")]),
    ])  # fmt: skip
    path = tmp_path / "plain.ipynb"
    nbformat.write(nb, path)
    loaded = load_run(path)
    assert loaded.view == "" and loaded.info.task == ""
    found = [(r.index, r.reasoning, r.code) for r in loaded.rounds]
    assert found == [(1, "# Exploring", "x = 1"), (2, "Now print it.", "print(x)")]
    assert loaded.rounds[0].result is None and result_of(loaded.rounds[1]).stdout == "1\n"
    assert loaded.rebuild_code == ("print(x)",)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("hello, not json", "not JSON"),
        ('{"cells": []}', "no 'nbformat'"),
        ('{"nbformat": 4, "nbformat_minor": 5}', "not a"),
    ],
)
def test_load_run_refuses_what_is_not_a_notebook(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.ipynb"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(NotebookError, match=message) as caught:
        load_run(path)
    assert caught.value.path == str(path)


def test_load_run_of_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(NotebookError, match="nowhere.ipynb"):
        load_run(tmp_path / "nowhere.ipynb")
