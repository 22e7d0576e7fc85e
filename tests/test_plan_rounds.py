"""A plan's code task runs in rounds, through the real openai SDK to the scripted server and a real kernel:
each round's output goes back to the model within the task, which corrects itself and ends the task with a
reply without code (kept as the task's analysis); a model that never says it is done is stopped by
``max_task_rounds`` with the reason recorded, and the plan goes on (its code ran: later tasks build on it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent import Agent
from kernel_agent.agent.plan.runner import PlanOptions
from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.events import NodeFinished, NodeStarted, PlanFinished
from kernel_agent.notebook.replay import replay

pytestmark = pytest.mark.kernel

PLAN = {
    "nodes": [
        {"id": "mean", "title": "Mean price", "purpose": "the mean price in euros"},
        {"id": "endless", "title": "Keep looking", "depends_on": ["mean"]},
        {"id": "wrap", "title": "Conclusion", "kind": "text", "depends_on": ["mean", "endless"]},
    ]
}


def call(code: str) -> Reply:
    return Reply("Running it.", tool_calls=(python_call(code),))


def tool_result(body: dict[str, Any]) -> str:
    """The tool message answering the model's last call: what the task was told of its last round."""
    last = body["messages"][-1]
    assert last["role"] == "tool" and last["tool_call_id"] == body["messages"][-2]["tool_calls"][0]["id"]
    return str(last["content"])


def test_a_task_sees_its_output_corrects_itself_and_a_bound_stops_one_that_never_ends(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    def corrected(body: dict[str, Any]) -> Reply:
        told = tool_result(body)
        assert "mean price 1234.5" in told and "3 code round(s) left" in told  # its own first output
        return call("mean_price = prices.mean() / 100\nprint('mean price in euros', mean_price)")

    def finished(body: dict[str, Any]) -> Reply:
        assert "mean price in euros 12.345" in tool_result(body)
        return Reply("The mean price is 12.345 euros (the prices were in cents).")

    def again(number: int) -> Any:
        def reply(body: dict[str, Any]) -> Reply:
            assert f"look {number - 1}" in tool_result(body)
            return call(f"print('look', {number}, mean_price)")

        return reply

    def wrap(body: dict[str, Any]) -> Reply:
        sent = json.dumps(body["messages"])
        assert "The mean price is 12.345 euros" in sent and "look 4" in sent  # both tasks' ends reach it
        return Reply("The mean price is 12.345 euros.")

    openai_server.add(
        Reply("```json\n" + json.dumps(PLAN) + "\n```"),
        call("import pandas as pd\nprices = pd.Series([1000, 1469])\nprint('mean price', prices.mean())"),
        corrected,
        finished,
        call("print('look', 1, mean_price)"),
        again(2),
        again(3),
        again(4),
        wrap,
    )
    notebook = tmp_path / "plan.ipynb"
    with Agent(
        model="m", base_url=openai_server.base_url, api_key="sk-test", model_options={"max_retries": 0}
    ) as agent:
        events = list(
            agent.stream_plan(
                "What is the mean price?", (), tmp_path / "run", notebook, options=PlanOptions(max_task_rounds=4)
            )
        )
    assert openai_server.remaining == 0  # the bounded task was not asked a fifth time
    finished_events = {e.node_id: e for e in events if isinstance(e, NodeFinished)}
    assert {k: (e.status, e.attempts) for k, e in finished_events.items()} == {
        "mean": ("done", 1),
        "endless": ("done", 1),
        "wrap": ("done", 1),
    }
    assert [e.attempt for e in events if isinstance(e, NodeStarted)] == [1, 1, 1]  # rounds are not fix attempts
    assert finished_events["mean"].reason == ""
    assert "stopped after 4 code round(s) without the model saying the task was done" in (
        finished_events["endless"].reason
    )

    state = PlanState.load(state_path(notebook))
    mean, endless = state.results["mean"], state.results["endless"]
    assert [c.code.splitlines()[-1] for c in mean.cells] == [
        "print('mean price', prices.mean())",
        "print('mean price in euros', mean_price)",
    ]  # both rounds kept, in order: the notebook replays the state the later tasks saw
    assert mean.analysis == "The mean price is 12.345 euros (the prices were in cents)."
    assert len(endless.cells) == 4 and endless.analysis == "" and "max_task_rounds 4" in endless.reason
    assert state.results["wrap"].text == "The mean price is 12.345 euros."

    done = events[-1]
    assert isinstance(done, PlanFinished) and done.counts["done"] == 3
    nb = nbformat.read(notebook, as_version=4)
    header = next(c.source for c in nb.cells if c.source.startswith("## Keep looking"))
    assert "Reason: stopped after 4 code round(s)" in header  # recorded where a reader looks
    assert "*Analysis:* The mean price is 12.345 euros (the prices were in cents)." in Path(done.report).read_text()
    check = replay(notebook)
    assert check.ok, check.to_text()
