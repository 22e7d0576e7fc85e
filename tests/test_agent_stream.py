"""The agent's event stream while a round's code runs: ``ExecutionOutput`` events, and closing the stream
between two of them stops the code and keeps the run (notebook saved as cancelled, kernel gone)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from leaks import our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent import Agent
from kernel_agent.events import ExecutionOutput

pytestmark = pytest.mark.kernel


def test_output_events_come_between_start_and_finish(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(
        Reply("Count.", tool_calls=(python_call("for i in range(3):\n    print('line', i)"),)), Reply("Counted.")
    )
    with Agent(model="m", base_url=openai_server.base_url) as agent:
        events = list(agent.stream("Count.", workspace=tmp_path / "ws"))
    kinds = [event.kind for event in events]
    outputs = [event for event in events if isinstance(event, ExecutionOutput)]
    at = [index for index, kind in enumerate(kinds) if kind == "execution_output"]
    assert at and kinds.index("execution_started") < at[0] and at[-1] < kinds.index("execution_finished")
    assert "".join(event.text for event in outputs) == "line 0\nline 1\nline 2\n"
    assert json.loads(json.dumps(outputs[0].to_dict()))["event"] == "execution_output"


def test_closing_the_stream_while_code_runs_stops_it_and_keeps_what_it_printed(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    code = "import time\nprint('early output', flush=True)\nwhile True:\n    time.sleep(0.05)"
    openai_server.add(Reply("Loop.", tool_calls=(python_call(code),)))
    with Agent(model="m", base_url=openai_server.base_url) as agent:
        stream = agent.stream("Loop.", workspace=tmp_path / "ws")
        first = next(event for event in stream if isinstance(event, ExecutionOutput))
        stream.close()  # between two events, as a consumer that stops reading does
    assert "early output" in first.text
    assert our_kernel_pids() == []
    saved = nbformat.read(tmp_path / "ws.ipynb", as_version=4)
    assert saved.metadata["kernel_agent"]["stop_reason"] == "cancelled"
    looped = [cell for cell in saved.cells if "while True" in cell.source]
    assert looped and "early output" in json.dumps(looped[-1].get("outputs", []))
