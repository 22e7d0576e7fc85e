"""Reasoning models end to end: ``reasoning_content`` kept on the round, never sent back, shown to people.

The real openai SDK streams ``delta.reasoning_content`` from the scripted server; a real kernel runs
the code; the notebook is written, read back and shown as the CLI shows it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import nbformat
import pytest
from openai_server import OpenAIServer, Reply
from rich.console import Console

from kernel_agent import Agent
from kernel_agent.cli.render import LiveRenderer, thinking_text
from kernel_agent.cli.show import show_run
from kernel_agent.events import ReasoningDelta, RoundFinished, RunFinished
from kernel_agent.notebook.load import load_run

pytestmark = pytest.mark.kernel

THOUGHT_1 = "The user wants a sum.\nI should print 2 + 3 <not a tag> & check it."
THOUGHT_2 = "The output was 5, so the answer is 5."


def test_reasoning_is_kept_shown_and_never_sent_back(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(
        Reply("<Code>print(2 + 3)</Code>", reasoning=THOUGHT_1, chunk_size=7, usage=(40, 20), reasoning_tokens=15),
        Reply("<Answer>5</Answer>", reasoning=THOUGHT_2, usage=(60, 10), reasoning_tokens=8),
    )
    console = Console(file=io.StringIO(), width=120, color_system=None)
    renderer = LiveRenderer(console)
    with Agent(model="reasoner", base_url=openai_server.base_url, protocol="tags") as agent:
        events = list(agent.stream("add 2 and 3", workspace=tmp_path / "ws"))
    for event in events:
        renderer.handle(event)
    renderer.close()
    run = next(e for e in events if isinstance(e, RunFinished)).run

    assert [r.reasoning_content for r in run.rounds] == [THOUGHT_1, THOUGHT_2]
    assert run.usage.reasoning_tokens == 23 and run.usage.completion_tokens == 30
    second = json.dumps(openai_server.requests[1]["messages"])
    assert "I should print" not in second and "reasoning_content" not in second  # never sent back
    streamed = "".join(e.text for e in events if isinstance(e, ReasoningDelta) and e.round == 1)
    assert streamed == THOUGHT_1
    finished = [e.to_dict() for e in events if isinstance(e, RoundFinished)]
    assert finished[0]["round"]["reasoning_content"] == THOUGHT_1
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "▾ model reasoning" in shown and THOUGHT_1 in shown and "23 of it reasoning" in shown
    assert all("dim" in str(span.style) for span in thinking_text(THOUGHT_1).spans)  # dimmed

    nb = nbformat.read(run.notebook_path, as_version=4)
    thinking = [c for c in nb.cells if c.metadata.get("kernel_agent", {}).get("role") == "thinking"]
    assert [c.id for c in thinking] == ["round-1-thinking", "round-2-thinking"]
    assert thinking[0].source.startswith("<details>\n<summary>Model reasoning")  # folded when rendered
    assert "&lt;not a tag&gt; &amp; check" in thinking[0].source
    record = nb.cells[[c.id for c in nb.cells].index("round-1-code")].metadata["kernel_agent"]
    assert record["reasoning_content"] == THOUGHT_1 and record["usage"]["reasoning_tokens"] == 15

    assert run.notebook_path is not None
    loaded = load_run(run.notebook_path)
    assert [r.reasoning_content for r in loaded.run.rounds] == [THOUGHT_1, THOUGHT_2]
    assert [r.reasoning for r in loaded.run.rounds] == [r.reasoning for r in run.rounds]
    folded = Console(file=io.StringIO(), width=200, color_system=None)
    show_run(folded, loaded)
    text = folded.file.getvalue()  # type: ignore[attr-defined]
    assert f"▸ model reasoning ({len(THOUGHT_1)} characters; --thinking shows it): The user wants a sum." in text
    assert "& check it." not in text  # folded to its first line
    expanded = Console(file=io.StringIO(), width=200, color_system=None)
    show_run(expanded, loaded, thinking=True)
    assert THOUGHT_1 in expanded.file.getvalue()  # type: ignore[attr-defined]
