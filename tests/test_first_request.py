"""The first model request goes out while the kernel starts (issue 38 item 11), and the first code waits.

Real parts: the openai SDK over HTTP to the scripted server, a real sandboxed kernel started by the agent.
The kernel's start is held until the model has been asked (bounded): with a run that asked only once
its kernel had started, the request would come second and the order below would be reversed.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIServer, Reply

from kernel_agent import AsyncAgent
from kernel_agent.errors import KernelStartError
from kernel_agent.kernel.session import AsyncKernelSession

pytestmark = pytest.mark.kernel

HELD_S = 60.0  # how long a kernel's start waits for the request before going on without it


def test_the_first_request_is_sent_before_the_kernel_has_started_and_its_code_waits_for_it(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    asked = threading.Event()
    seen: list[dict[str, Any]] = []

    def first(body: dict[str, Any]) -> Reply:
        order.append("request")
        seen.append(body)
        asked.set()
        return Reply("<Code>\nprint(open(data.sales).read().count(chr(10)), 6 * 7)\n</Code>")

    openai_server.add(first, Reply("<Answer>42</Answer>"))
    start = AsyncKernelSession.start

    async def held_start(session: AsyncKernelSession) -> AsyncKernelSession:
        await asyncio.to_thread(asked.wait, HELD_S)
        started = await start(session)
        order.append("kernel ready")
        return started

    monkeypatch.setattr(AsyncKernelSession, "start", held_start)
    sales = tmp_path / "sales.csv"
    sales.write_text("region,amount\nnorth,1\nsouth,2\n", encoding="utf-8")

    async def scenario() -> Any:
        async with AsyncAgent(
            model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tags", max_rounds=3
        ) as agent:
            return await agent.run("How much?", [sales], tmp_path / "ws", tmp_path / "run.ipynb")

    run = asyncio.run(scenario())
    assert order == ["request", "kernel ready"]
    assert run.stop_reason == "answer" and run.answer == "42"
    (code_round,) = [r for r in run.rounds if r.code is not None]
    assert code_round.result is not None and code_round.result.stdout == "3 42\n"  # ran once it was up
    prompt = "\n".join(str(m.get("content")) for m in seen[0]["messages"])
    assert "sales.csv" in prompt and "amount" in prompt  # the data description, made host side, is in it
    assert "pandas" in prompt  # the packages line, known without the kernel
    assert run.info.confinement  # the record still says how the kernel ran
    assert run.info.started_at <= run.rounds[0].started_at  # the run starts before its first round's request


def test_a_kernel_that_fails_to_start_after_the_request_went_out_is_raised_with_nothing_left_running(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = threading.Event()

    def first(body: dict[str, Any]) -> Reply:
        asked.set()
        return Reply("<Answer>never used</Answer>", pause=1.0)

    openai_server.add(first)

    async def failed_start(session: AsyncKernelSession) -> AsyncKernelSession:
        await asyncio.to_thread(asked.wait, HELD_S)
        raise KernelStartError("the kernel would not start")

    monkeypatch.setattr(AsyncKernelSession, "start", failed_start)

    async def scenario() -> set[asyncio.Task[Any]]:
        async with AsyncAgent(model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tags") as agent:
            with pytest.raises(KernelStartError, match="would not start"):
                await agent.run("Anything?", [], tmp_path / "ws", tmp_path / "run.ipynb")
        return asyncio.all_tasks() - {asyncio.current_task()}  # the request in flight was dropped with the run

    assert not asyncio.run(scenario())
    assert asked.is_set()
