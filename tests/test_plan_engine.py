"""Plan mode has run mode's guarantees, its nodes' rounds being run by the same engine (``loop.RoundEngine``):
each proven here as run mode's is (test_agent.py, test_agent_stream.py, test_quota.py), through the real openai
SDK to the scripted server and a real kernel. A node's reply streams as events; a node repeating its failing
code stops as stuck; ``--disk-quota`` stops a node that writes past it (and the plan); a node cancelled while
its code runs keeps its rounds so far in the state and report; a partly used reply is explained to the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from leaks import our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call
from test_quota import MANY_FILES

from kernel_agent import Agent
from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.events import CodeDelta, ExecutionOutput, NodeFinished, NodeStarted, Notice, PlanFinished, TextDelta

pytestmark = pytest.mark.kernel


def plan(*ids: str) -> Reply:
    """The design reply: independent code tasks named ``ids``."""
    return Reply("```json\n" + json.dumps({"nodes": [{"id": i, "title": i.title()} for i in ids]}) + "\n```")


def call(code: str, words: str = "Running it.") -> Reply:
    return Reply(words, tool_calls=(python_call(code),))


def agent_for(openai_server: OpenAIServer, **options: Any) -> Agent:
    return Agent(
        model="m", base_url=openai_server.base_url, api_key="sk-test", model_options={"max_retries": 0}, **options
    )


def finished(events: list[Any]) -> dict[str, NodeFinished]:
    return {e.node_id: e for e in events if isinstance(e, NodeFinished)}


def test_a_nodes_reply_streams_as_events_while_it_arrives(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(plan("count"), call("print('counted', 3)", "Counting the rows."), Reply("There are 3."))
    with agent_for(openai_server) as agent:
        events = list(agent.stream_plan("Count.", (), tmp_path / "ws", tmp_path / "plan.ipynb"))
    started = next(i for i, e in enumerate(events) if isinstance(e, NodeStarted))
    ended = next(i for i, e in enumerate(events) if isinstance(e, NodeFinished))
    node = events[started:ended]
    assert "".join(e.text for e in node if isinstance(e, TextDelta) and e.round == 1) == "Counting the rows."
    assert "print('counted', 3)" in "".join(e.text for e in node if isinstance(e, CodeDelta))
    assert "".join(e.text for e in node if isinstance(e, TextDelta) and e.round == 2) == "There are 3."
    assert "counted 3" in "".join(e.text for e in node if isinstance(e, ExecutionOutput))
    assert isinstance(events[-1], PlanFinished) and events[-1].counts["done"] == 1


def test_a_node_repeating_its_failing_code_stops_as_stuck(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(plan("loop"), *(call("print(undefined_name)") for _ in range(3)))
    with agent_for(openai_server) as agent:  # stuck_after 3, while max_fix_attempts (5) would allow six
        events = list(agent.stream_plan("Loop.", (), tmp_path / "ws", tmp_path / "plan.ipynb"))
    loop = finished(events)["loop"]
    assert loop.status == "failed" and "the same failing code 3 times in a row" in loop.reason
    assert openai_server.remaining == 0 and len(openai_server.requests) == 4  # the plan, then three rounds


def test_the_disk_quota_stops_a_node_that_writes_past_it_and_the_plan(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(plan("fill", "later"), call(MANY_FILES))
    with agent_for(openai_server, disk_quota_mb=8) as agent:
        events = list(agent.stream_plan("Fill the disk.", (), tmp_path / "ws", tmp_path / "plan.ipynb"))
    nodes = finished(events)
    assert nodes["fill"].status == "failed" and "over its disk quota of 8 MB" in nodes["fill"].reason
    assert nodes["later"].status == "skipped" and "the plan stopped" in nodes["later"].reason
    assert openai_server.remaining == 0 and len(openai_server.requests) == 2  # never asked after the quota
    state = PlanState.load(state_path(tmp_path / "plan.ipynb"))
    assert "wrote 3 parts" in state.results["fill"].output_text()  # the round that wrote is kept


def test_a_node_cancelled_while_its_code_runs_keeps_its_rounds(openai_server: OpenAIServer, tmp_path: Path) -> None:
    code = "import time\nprint('early output', flush=True)\nwhile True:\n    time.sleep(0.05)"
    openai_server.add(plan("slow"), call("ready = 1\nprint('set up')"), call(code))
    notebook = tmp_path / "plan.ipynb"
    with agent_for(openai_server) as agent:
        stream = agent.stream_plan("Wait.", (), tmp_path / "ws", notebook)
        first = next(e for e in stream if isinstance(e, ExecutionOutput) and "early" in e.text)
        stream.close()  # between two events, as a consumer that stops reading does
    assert "early output" in first.text
    assert our_kernel_pids() == []
    slow = PlanState.load(state_path(notebook)).results["slow"]
    assert slow.status == "interrupted" and slow.reason == "cancelled by the user"
    assert [c.code for c in slow.cells] == ["ready = 1\nprint('set up')"]  # the round that ran
    assert "while True" in slow.failed[-1].code and "early output" in json.dumps(slow.failed[-1].outputs)
    assert "while True" in notebook.with_name("plan.report.md").read_text(encoding="utf-8")


def test_a_partly_used_reply_in_a_node_is_explained_to_the_model(openai_server: OpenAIServer, tmp_path: Path) -> None:
    both = Reply("", tool_calls=(python_call("print('first')"), python_call("print('second')")))
    openai_server.add(plan("two"), both, Reply("Only the first ran."))
    with agent_for(openai_server) as agent:
        events = list(agent.stream_plan("Two at once.", (), tmp_path / "ws", tmp_path / "plan.ipynb"))
    assert finished(events)["two"].status == "done"
    sent = json.dumps(openai_server.requests[2]["messages"])
    assert "[about your reply:" in sent and "first" in sent
    assert any(isinstance(e, Notice) and "round 1" in e.message for e in events)


def test_a_nodes_code_gets_the_agents_timeout_whatever_budgets_are_given(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """The per-cell timeout is the agent's one setting (``exec_timeout``): a plan given budgets of its own
    (``PlanOptions``) keeps it, the node's code is interrupted at it, the model is told, and the state the
    kernel had before survives the interrupt."""
    from kernel_agent.agent.plan.runner import PlanOptions

    def told(body: dict[str, Any]) -> Reply:
        last = str(body["messages"][-1]["content"])
        assert last.startswith("[timeout]") and "variables from earlier cells are still defined" in last
        assert "after the sleep" not in last
        return call("print('still here', kept)")

    openai_server.add(
        plan("wait"), call("kept = 7\nimport time\ntime.sleep(30)\nprint('after', 'the sleep')"), told, Reply("Done.")
    )
    with agent_for(openai_server, exec_timeout=2) as agent:
        events = list(
            agent.stream_plan(
                "Wait.", (), tmp_path / "ws", tmp_path / "plan.ipynb", options=PlanOptions(max_task_rounds=3)
            )
        )
    assert finished(events)["wait"].status == "done"
    outputs = "".join(e.text for e in events if isinstance(e, ExecutionOutput))
    assert "still here 7" in outputs and "after the sleep" not in outputs
    assert openai_server.remaining == 0


def test_a_node_whose_code_kills_the_kernel_is_told_and_the_plan_goes_on_in_a_rebuilt_kernel(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """A kernel death in a node's round: the model is told the kernel died, the next round runs in a kernel
    rebuilt from the earlier node's successful cells (its variable is back), and the later node runs."""

    def told(body: dict[str, Any]) -> Reply:
        last = str(body["messages"][-1]["content"])
        assert last.startswith("[kernel died]") and "earlier cells were re-run" in last  # what the kernel kept
        return call("print('rebuilt', base * 2)")

    openai_server.add(
        plan("first", "second", "third"),
        call("base = 21\nprint('base set')"),
        Reply("Set."),
        call("import os\nos._exit(1)"),
        told,
        Reply("Doubled."),
        call("print('third sees', base)"),
        Reply("Seen."),
    )
    with agent_for(openai_server) as agent:
        events = list(agent.stream_plan("Crash.", (), tmp_path / "ws", tmp_path / "plan.ipynb"))
    assert {node: e.status for node, e in finished(events).items()} == {
        "first": "done",
        "second": "done",
        "third": "done",
    }
    outputs = "".join(e.text for e in events if isinstance(e, ExecutionOutput))
    assert "rebuilt 42" in outputs and "third sees 21" in outputs
    assert openai_server.remaining == 0
    assert our_kernel_pids() == []
