"""The chat persona's pure parts: the chat message a run's events make, and the sync of the agent's cells
into a notebook's shared document (jupyter-ydoc's ``YNotebook`` on a local pycrdt document, no server)."""

from __future__ import annotations

import json
from typing import Any

from jupyter_ydoc import YNotebook

from kernel_agent.events import (
    AnswerReady,
    CodeReady,
    Event,
    ExecutionFinished,
    ExecutionOutput,
    ExecutionStarted,
    ReasoningDelta,
    RoundFinished,
    RoundStarted,
    RunStarted,
    TextDelta,
)
from kernel_agent.jupyter.chat import ChatReply
from kernel_agent.jupyter.live import STARTING_ID, LiveNotebook, new_notebook
from kernel_agent.records import Round
from kernel_agent.result import ErrorInfo, ExecutionResult


def test_the_chat_message_folds_reasoning_says_each_rounds_status_and_ends_with_the_answer() -> None:
    reply = ChatReply(notebook="analysis.ipynb")
    failed = ExecutionResult(
        "error",
        ({"output_type": "stream", "name": "stdout", "text": "half\n"},),
        2,
        0.4,
        error=ErrorInfo("ZeroDivisionError", "division by zero", ()),
    )
    events: list[Event] = [
        RunStarted("t", "m", "tools", "/w", "/w.ipynb"),
        RoundStarted(1, 30),
        ReasoningDelta(1, "secret <plan>"),
        TextDelta(1, "Dividing"),
        TextDelta(1, " now."),
        CodeReady(1, "1/0", "Dividing now."),
        ExecutionStarted(1, 120.0),
        ExecutionOutput(1, "half\n", 0.1),
        ExecutionFinished(1, failed, ()),
        RoundFinished(Round(1, "Dividing now.", "Dividing now.", "1/0", failed)),
        RoundStarted(2, 30),
        TextDelta(2, "It is **undefined**."),
        RoundFinished(Round(2, "It is **undefined**.", answer="It is **undefined**.")),
        AnswerReady(2, "## Answer\n\nIt is **undefined**."),
    ]
    for event in events:
        reply.feed(event)
    body = reply.body
    assert "each round becomes cells in `analysis.ipynb`" in body
    assert "<details><summary>Model reasoning (13 characters)</summary>\n\nsecret &lt;plan&gt;" in body
    assert "**Round 1** · ✗ error · 0.4 s · `ZeroDivisionError: division by zero`" in body
    assert "Dividing now." in body and "```text\nhalf\n```" in body
    assert body.endswith("### Answer\n\nIt is **undefined**.")  # the model's own heading is not repeated
    assert body.count("It is **undefined**.") == 1  # the answer round's text is the answer, said once


def test_a_streaming_tagged_reply_shows_no_raw_tag_or_code() -> None:
    """Issue 49: mid-stream, a DeepAnalyze-style reply read "asking the model… `<Understand> The`"."""
    reply = ChatReply()
    reply.feed(RoundStarted(5, 30))
    reply.feed(TextDelta(5, "<Understand> The"))
    assert "<Understand>" not in reply.body and "**Understand**\n\nThe" in reply.body
    reply.feed(TextDelta(5, " totals.</Understand>\n<Code>\n```python\nprint(1)"))
    assert "<Code>" not in reply.body and "print(1)" not in reply.body and "The totals." in reply.body
    plain = ChatReply()
    plain.feed(RoundStarted(1, 30))
    plain.feed(TextDelta(1, "Summing **now**."))  # untagged text (tools protocol) is as written
    assert "Summing **now**." in plain.body


def test_a_stopped_run_says_so_on_its_running_round() -> None:
    reply = ChatReply()
    events: list[Event] = [RoundStarted(1, 30), CodeReady(1, "sleep()", "Waiting."), ExecutionStarted(1, None)]
    for event in events:
        reply.feed(event)
    reply.stopped()
    assert "**Round 1** · ✗ stopped" in reply.body and "**Stopped.**" in reply.body


def _cell(cell_id: str, source: str, kind: str = "markdown") -> dict[str, Any]:
    cell: dict[str, Any] = {
        "id": cell_id,
        "cell_type": kind,
        "metadata": {"kernel_agent": {"role": cell_id}},
        "source": source,
    }
    if kind == "code":
        cell.update(outputs=[], execution_count=1)
    return cell


def _live() -> tuple[LiveNotebook, YNotebook]:
    notebook = YNotebook()
    notebook.set({"cells": [_cell("mine", "# my notes")], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    live = LiveNotebook(ydoc=None, contents=None, path="a.ipynb")
    live.document = notebook
    return live, notebook


def _sources(notebook: YNotebook) -> list[tuple[str, str]]:
    return [(cell["id"], cell["source"]) for cell in json.loads(json.dumps(notebook.get()["cells"]))]


def test_sync_adds_the_runs_cells_after_the_users_and_keeps_the_users_edits() -> None:
    live, notebook = _live()
    assert live.sync([_cell("header", "# Task"), _cell("answer", "## In progress")]) == 2
    assert _sources(notebook) == [("mine", "# my notes"), ("header", "# Task"), ("answer", "## In progress")]

    notebook.set_cell(1, source="# Task, edited by the user")
    code = _cell("round-1-code", "x = 1", "code")
    written = live.sync([_cell("header", "# Task"), code, _cell("answer", "## Answer\n\n1")])
    assert written == 2  # the new code cell and the changed answer; the header the user edited is left alone
    assert _sources(notebook) == [
        ("mine", "# my notes"),
        ("header", "# Task, edited by the user"),
        ("round-1-code", "x = 1"),
        ("answer", "## Answer\n\n1"),
    ]
    assert live.sync([_cell("header", "# Task"), code, _cell("answer", "## Answer\n\n1")]) == 0


def test_a_notebook_the_run_creates_is_never_empty_and_its_first_sync_leaves_only_the_runs_cells() -> None:
    """Issue 49: a page that opened the notebook mid-run, while it had no cell, gave it a blank code cell of its
    own, saved with the run's. Created with a note in place, it never is empty; the note then goes."""
    created = new_notebook()
    assert [cell["id"] for cell in created.cells] == [STARTING_ID]
    notebook = YNotebook()
    notebook.set(json.loads(json.dumps(created)))
    live = LiveNotebook(ydoc=None, contents=None, path="a.ipynb")
    live.document, live._created = notebook, True
    live.sync([_cell("header", "# Task"), _cell("answer", "## In progress")])
    assert _sources(notebook) == [("header", "# Task"), ("answer", "## In progress")]
    live.sync([_cell("header", "# Task"), _cell("answer", "## Answer")])  # later syncs leave the user's cells
    notebook.ycells.insert(0, notebook.create_ycell(_cell("mine", "")))
    live.sync([_cell("header", "# Task"), _cell("answer", "## Answer")])
    assert [cell_id for cell_id, _ in _sources(notebook)] == ["mine", "header", "answer"]


def test_a_running_round_shows_its_code_and_output_before_the_answer_then_the_runs_cells_replace_them() -> None:
    live, notebook = _live()
    live.sync([_cell("header", "# Task"), _cell("answer", "## In progress")])
    live.running(1, "Looking.", "print(1)")
    live.output(1, "1\n")
    live.output(1, "2\n")
    assert _sources(notebook) == [
        ("mine", "# my notes"),
        ("header", "# Task"),
        ("round-1-reasoning", "Looking."),
        ("round-1-code", "print(1)"),
        ("answer", "## In progress"),
    ]
    running = json.loads(json.dumps(notebook.get()["cells"]))[3]
    assert running["outputs"] == [{"output_type": "stream", "name": "stdout", "text": "1\n2\n"}]
    finished = _cell("round-1-code", "print(1)", "code")
    live.sync(
        [_cell("header", "# Task"), _cell("round-1-reasoning", "Looking."), finished, _cell("answer", "## Answer")]
    )
    cells = json.loads(json.dumps(notebook.get()["cells"]))
    assert [c["id"] for c in cells] == ["mine", "header", "round-1-reasoning", "round-1-code", "answer"]
    assert cells[3]["outputs"] == [] and cells[3]["metadata"] == finished["metadata"]  # the run's version now


def test_the_runs_cells_change_in_place_so_the_page_keeps_its_cell_widgets() -> None:
    live, notebook = _live()
    live.sync([_cell("header", "# Task"), _cell("answer", "## In progress")])
    live.running(1, "Looking.", "print(1)")
    replaced: list[Any] = []  # inserts and deletes in the cell list: each is a cell the page builds anew
    notebook.ycells.observe(lambda event: replaced.append(event.delta))
    figure = {"output_type": "display_data", "data": {"image/png": "iVBOR"}, "metadata": {}}
    live.output(1, "1\n")
    live.finished(1, [{"output_type": "stream", "name": "stdout", "text": "1\n"}, figure], 3)
    code = {
        **_cell("round-1-code", "print(1)  # guarded", "code"),
        "execution_count": 3,
        "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}, figure],
    }
    live.sync(
        [_cell("header", "# Task"), _cell("round-1-reasoning", "Looking, said."), code, _cell("answer", "## Done")]
    )
    assert replaced == []
    cells = json.loads(json.dumps(notebook.get()["cells"]))
    assert {k: v for k, v in cells[3].items() if k != "execution_state"} == code
    assert cells[2]["source"] == "Looking, said." and cells[4]["source"] == "## Done"
    live.sync([_cell("header", "# Task"), _cell("round-1-reasoning", "x = 1", "code")])  # another type: replaced
    assert len(replaced) == 1 and notebook.get()["cells"][2]["cell_type"] == "code"


def _figure(png: str) -> dict[str, Any]:
    return {"output_type": "display_data", "data": {"image/png": png, "text/plain": "<Figure>"}, "metadata": {}}


def test_the_answer_shows_the_runs_last_figures_as_data_uris_size_capped_and_only_once_answered() -> None:
    reply = ChatReply()
    pngs = [f"iVBORw0KGgo{k}AAAA==" for k in range(6)]
    outputs = (*[_figure(p) for p in pngs[:5]], _figure("A" * 500_000), _figure("x)](javascript:alert(1)"))
    result = ExecutionResult("ok", outputs, 1, 0.2)
    events: list[Event] = [
        RoundStarted(1, 30),
        CodeReady(1, "plot()", "Plotting."),
        ExecutionStarted(1, None),
        ExecutionFinished(1, result, ()),
        RoundStarted(2, 30),
        TextDelta(2, "Done"),
    ]
    for event in events:
        reply.feed(event)
    assert "data:image" not in reply.body  # not while the run streams: each redraw would carry them
    reply.feed(AnswerReady(2, "Done."))
    body = reply.body
    shown = [p for p in pngs if f"(data:image/png;base64,{p})" in body]
    assert shown == pngs[1:5]  # the last four; the oversized and the malformed are not shown
    assert "![Figure of round 1](data:image/png;base64," in body and "javascript" not in body
    assert "*2 more figures are in the notebook.*" in body
    big = tuple(_figure(letter * 350_000) for letter in "BCD")
    reply.feed(ExecutionFinished(3, ExecutionResult("ok", big, 2, 0.1), ()))
    assert [png[0] for _, png in reply.figures] == ["C", "D"]  # the last ones within 800,000 characters in all
    assert "*7 more figures are in the notebook.*" in reply.body
