"""Plan mode in each chat protocol, through the real openai SDK to the scripted server: nodes send
code as ``execute_python`` calls (tools) or ``<Code>`` blocks (tags, deepanalyze); fix requests and each
round's output (with its figure under --vision) go back as tool messages, ``<Execute>`` blocks or ``execute``
messages, and a code task ends with the protocol's answer; the plan stays plain JSON.
The task has three data files (CSV, NPY, MAT): all are summarised for the design and read by a node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.io
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent import Agent
from kernel_agent.agent.plan.runner import PlanOptions
from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.events import NodeFinished, PlanFinished

pytestmark = pytest.mark.kernel

PLAN = {
    "directions": ["descriptive", "visualisation"],
    "nodes": [
        {"id": "load", "title": "Load"},
        {"id": "plot", "title": "Plot", "kind": "visualisation", "purpose": "see the trend", "depends_on": ["load"]},
        {"id": "wrap", "title": "Wrap up", "kind": "text", "depends_on": ["plot"]},
    ],
}


def code_reply(protocol: str, code: str) -> Reply:
    if protocol == "tools":
        return Reply("Running it.", tool_calls=(python_call(code),))
    if protocol == "deepanalyze":  # vLLM stops on </Code> and drops it
        return Reply(f"<Analyze>Running it.</Analyze>\n<Code>\n```python\n{code}\n```\n", stop_reason="</Code>")
    return Reply(f"<Analyze>Running it.</Analyze>\n<Code>\n```python\n{code}\n```\n</Code>")


def prose_reply(protocol: str, text: str) -> Reply:
    return Reply(text if protocol == "tools" else f"<Answer>{text}</Answer>")


def result_of_last_call(protocol: str, body: dict[str, Any]) -> str:
    """The text the runner sent back for the model's last code, checked to be in the protocol's shape."""
    messages = body["messages"]
    last = messages[-1]
    if protocol == "tools":
        call = messages[-2]["tool_calls"][0]
        assert last["role"] == "tool" and last["tool_call_id"] == call["id"]
        assert call["function"]["name"] == "execute_python"
        value: str = last["content"]
        return value
    if protocol == "deepanalyze":  # raw output in DeepAnalyze's own role, no system message
        assert last["role"] == "execute" and messages[0]["role"] == "user"
        value = last["content"]
        return value
    assert last["role"] == "user" and last["content"].startswith("<Execute>")
    value = last["content"]
    return value


LOAD = (
    "import scipy.io\nx = list(pd.read_csv(data.counts)['n'])\nx[2] += int(np.load(data.extra).sum())\n"
    "x[0] += int(scipy.io.loadmat(data.offsets)['offset'][0, 0])\nprint('total', sum(x))"
)


def data_files(folder: Path) -> list[Path]:
    """Three formats for one task: a CSV, an NPY and a MAT file."""
    folder.mkdir()
    (folder / "counts.csv").write_text("n\n1\n2\n3\n")
    np.save(folder / "extra.npy", np.array([1, 1]))
    scipy.io.savemat(folder / "offsets.mat", {"offset": np.array([[10.0]])})
    return [folder / "counts.csv", folder / "extra.npy", folder / "offsets.mat"]


def script(protocol: str) -> list[Any]:
    def design(body: dict[str, Any]) -> Reply:
        prompt = body["messages"][-1]["content"]
        assert "3 rows" in prompt and "shape (2,)" in prompt and "`offset`: double 1 x 1" in prompt
        return Reply("```json\n" + json.dumps(PLAN) + "\n```")

    def fix(body: dict[str, Any]) -> Reply:
        assert "NameError" in result_of_last_call(protocol, body)
        return code_reply(protocol, LOAD)

    def loaded(body: dict[str, Any]) -> Reply:
        assert "total 18" in result_of_last_call(protocol, body)  # the task sees its own output
        return prose_reply(protocol, "The total is 18.")

    def analysis(body: dict[str, Any]) -> Reply:
        if protocol == "tools":  # with --vision the figure follows the tool message as an image part
            *messages, figure = body["messages"]
            assert [part["type"] for part in figure["content"]] == ["text", "image_url"]
            body = {**body, "messages": messages}
        result = result_of_last_call(protocol, body)
        assert "drew 1 figure(s)" in result
        assert ("you cannot see them" in result) == (protocol != "tools")  # without vision: not sent, and said
        return prose_reply(protocol, "The line rises steadily.")

    def wrap(body: dict[str, Any]) -> Reply:
        assert "The line rises steadily." in json.dumps(body["messages"])  # the prerequisite's analysis
        return prose_reply(protocol, "The total is 6 and the trend is up.")

    return [
        design,
        code_reply(protocol, "print(undefined_total)"),
        fix,
        loaded,
        code_reply(protocol, "import matplotlib.pyplot as plt\nplt.plot(x)\nplt.show()"),
        analysis,
        wrap,
    ]


@pytest.mark.parametrize("protocol", ["tools", "tags", "deepanalyze"])
def test_plan_nodes_speak_the_protocol(protocol: str, openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(*script(protocol))
    notebook = tmp_path / "plan.ipynb"
    with Agent(
        model="m",
        base_url=openai_server.base_url,
        api_key="sk-test",
        protocol=protocol,
        vision=protocol == "tools",
        model_options={"max_retries": 0},
    ) as agent:
        events = list(
            agent.stream_plan(
                "Sum and plot",
                data_files(tmp_path / "in"),
                tmp_path / "run",
                notebook,
                options=PlanOptions(max_fix_attempts=1),
            )
        )
    assert openai_server.remaining == 0
    finished = {e.node_id: (e.status, e.attempts, e.figures) for e in events if isinstance(e, NodeFinished)}
    assert finished == {"load": ("done", 2, 0), "plot": ("done", 1, 1), "wrap": ("done", 1, 0)}
    assert isinstance(events[-1], PlanFinished) and events[-1].counts["done"] == 3

    design, *nodes = openai_server.requests
    assert "tools" not in design and "stop" not in design  # the plan is plain JSON chat in every protocol
    *code, prose = nodes  # the last request is the text task's: told to answer in prose, offered no tool
    for request in code:
        assert ("tools" in request) == (protocol == "tools")
    assert "tools" not in prose and "tool_choice" not in prose
    for request in nodes:
        assert ("stop" in request) == (protocol == "deepanalyze")
    state = PlanState.load(state_path(notebook))
    assert state.results["load"].failures == ("NameError: name 'undefined_total' is not defined",)
    assert state.results["load"].output_text() == "total 18\n"  # 6 from the CSV, 2 from the NPY, 10 from the MAT
    assert state.results["plot"].analysis == "The line rises steadily."
    assert state.results["load"].analysis == "The total is 18."
    assert state.results["wrap"].text == "The total is 6 and the trend is up."
