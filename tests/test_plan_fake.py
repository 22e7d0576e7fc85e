"""Plan mode in the fast tier: a ``ScriptedChatModel`` talks to a ``FakeKernel`` (no kernel starts).

A plan's tasks learn their environment the way a run's rounds do (``Preparation.environment``): the
analysis packages found once for the kernel's environment, the names defined so far asked before each task.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kernel_agent import AsyncAgent
from kernel_agent.agent.run.preparation import KNOWN_PACKAGES
from kernel_agent.events import NodeFinished
from kernel_agent.model.scripted import ScriptedChatModel
from kernel_agent.testing import FakeKernel, ok

PLAN = {
    "directions": ["descriptive"],
    "nodes": [
        {"id": "first", "title": "Say what the data is", "kind": "text"},
        {"id": "second", "title": "Say what it means", "kind": "text", "depends_on": ["first"]},
    ],
}


class AskedKernels:
    """Hands out one ``FakeKernel`` that keeps the keys of every ``evaluate`` it is asked."""

    kernels_apart = False

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []

    def __call__(self, workspace: Path) -> FakeKernel:
        asked = self.asked

        class Asked(FakeKernel):
            async def evaluate(self, expressions: dict[str, str], timeout: float = 30.0) -> dict[str, str | None]:
                asked.append(tuple(sorted(expressions)))
                return await super().evaluate(expressions, timeout)

        evaluations = {"packages": "['pandas 2.2.3']", "names": "['frame: DataFrame 3x2']"}
        return Asked([ok()], workspace=workspace, evaluations=evaluations)


def test_a_plan_task_is_told_its_environment_as_a_run_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(KNOWN_PACKAGES, "_by_environment", {})  # this process's runs so far probed nothing
    kernels = AskedKernels()
    replies = ["```json\n" + json.dumps(PLAN) + "\n```", "The data is small.", "It means little."]
    model = ScriptedChatModel(replies, name="scripted-test")

    async def scenario() -> list[NodeFinished]:
        finished: list[NodeFinished] = []
        async with AsyncAgent(chat_model=model, protocol="tags", session_factory=kernels) as agent:
            async for event in agent.stream_plan("the task", workspace=tmp_path / "ws", notebook=tmp_path / "p.ipynb"):
                if isinstance(event, NodeFinished):
                    finished.append(event)
        return finished

    finished = asyncio.run(scenario())
    assert [(f.node_id, f.status) for f in finished] == [("first", "done"), ("second", "done")]
    # the packages once, as the run starts (then known for its environment; the setup cell defines no names
    # yet); the names before each task
    assert kernels.asked == [("packages",), ("names",), ("names",)]
