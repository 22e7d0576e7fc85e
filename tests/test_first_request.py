"""The first model request goes out while the kernel starts (issue 38 item 11), and the first code waits.

Real parts: the openai SDK over HTTP to the scripted server, a real sandboxed kernel started by the agent.
The kernel's start is held until the model has been asked (bounded): with a run that asked only once
its kernel had started, the request would come second and the order below would be reversed.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from openai_server import OpenAIServer, Reply

from kernel_agent import AsyncAgent
from kernel_agent.agent.config import AgentConfig
from kernel_agent.agent.run.preparation import KNOWN_PACKAGES
from kernel_agent.errors import KernelStartError
from kernel_agent.events import RunFinished
from kernel_agent.kernel.interface import KernelsAhead, MadeKernels, kernels_ahead, kernels_ahead_of
from kernel_agent.kernel.pool import KernelPool
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


class _Ordered:
    """The scripted model's replies, each noting ``request`` in ``order`` as it is asked; the kernel's start,
    while ``held``, waits for the first request (bounded) and notes ``kernel ready`` once up."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.order: list[str] = []
        self.asked = threading.Event()
        self.held = True
        start = AsyncKernelSession.start

        async def held_start(session: AsyncKernelSession) -> AsyncKernelSession:
            if self.held:
                await asyncio.to_thread(self.asked.wait, HELD_S)
            started = await start(session)
            self.order.append("kernel ready")
            return started

        monkeypatch.setattr(AsyncKernelSession, "start", held_start)

    def replies(self, answer: str) -> tuple[Any, Reply]:
        def first(body: dict[str, Any]) -> Reply:
            self.order.append("request")
            self.asked.set()
            return Reply("<Code>\nprint(6 * 7)\n</Code>")

        return first, Reply(f"<Answer>{answer}</Answer>")


def test_the_chats_first_request_goes_out_while_its_conversation_kernel_starts(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernel_agent.jupyter.live import LiveNotebook
    from kernel_agent.jupyter.persona import _Conversation

    ordered = _Ordered(monkeypatch)
    openai_server.add(*ordered.replies("42"))
    options = {"model": "m", "base_url": openai_server.base_url, "api_key": "sk-test", "protocol": "tags"}

    async def scenario() -> Any:
        # The persona's own path: its conversation's agent, whose factory holds the chat's one kernel.
        conversation = _Conversation(options, tmp_path, "chat.ipynb", cast(LiveNotebook, None))
        try:
            final = None
            async for event in conversation.stream("What is 6 times 7?", []):
                final = event.run if isinstance(event, RunFinished) else final
            assert conversation.session is not None and await conversation.session.is_alive()  # kept for more
            return final
        finally:
            await conversation.close()

    run = asyncio.run(scenario())
    assert ordered.order == ["request", "kernel ready"]
    assert run is not None and run.answer == "42"
    (code_round,) = [r for r in run.rounds if r.code is not None]
    assert code_round.result is not None and code_round.result.stdout == "42\n"


def test_a_factory_that_says_nothing_of_its_kernels_is_waited_for(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ordered = _Ordered(monkeypatch)
    ordered.held = False
    openai_server.add(*ordered.replies("42"))
    factory = MadeKernels(lambda workspace: AsyncKernelSession(workspace))  # a plain maker: not known ahead

    async def scenario() -> Any:
        async with AsyncAgent(
            model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tags", session_factory=factory
        ) as agent:
            return await agent.run("6 times 7?", [], tmp_path / "ws", tmp_path / "run.ipynb")

    assert asyncio.run(scenario()).answer == "42"
    assert ordered.order == ["kernel ready", "request"]


def test_another_environments_packages_are_a_cached_probe_so_its_first_run_waits_and_the_next_does_not(
    openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernels said to run another interpreter (here named by its path, so not "this interpreter"): their
    packages cannot be asked here, so the first run waits and probes; the next run's prompt goes ahead."""
    monkeypatch.setattr(KNOWN_PACKAGES, "_by_environment", {})  # this process's runs so far probed nothing
    ordered = _Ordered(monkeypatch)
    ordered.held = False
    openai_server.add(*ordered.replies("one"), *ordered.replies("two"))
    said = kernels_ahead_of({"python": sys.executable})
    assert said is not None and not said.this_interpreter
    factory = MadeKernels(lambda workspace: AsyncKernelSession(workspace, python=sys.executable), kernels_ahead=said)

    async def scenario() -> list[Any]:
        runs = []
        async with AsyncAgent(
            model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tags", session_factory=factory
        ) as agent:
            runs.append(await agent.run("6 times 7?", [], tmp_path / "ws1", tmp_path / "one.ipynb"))
            ordered.asked.clear()
            ordered.held = True
            runs.append(await agent.run("6 times 7?", [], tmp_path / "ws2", tmp_path / "two.ipynb"))
        return runs

    first, second = asyncio.run(scenario())
    assert (first.answer, second.answer) == ("one", "two")
    assert ordered.order == ["kernel ready", "request", "request", "kernel ready"]
    probed = KNOWN_PACKAGES.get(said.environment)
    assert probed is not None and any(package.startswith("pandas ") for package in probed)  # the kernel's probe
    prompt = "\n".join(str(m.get("content")) for m in openai_server.requests[2]["messages"])
    assert "pandas" in prompt  # the cached probe's packages line


def test_what_a_pool_and_the_settings_say_of_their_kernels_before_one_starts() -> None:
    assert KernelPool(0).kernels_ahead == KernelsAhead("python")
    assert KernelPool(0, python="/other/bin/python").kernels_ahead == KernelsAhead("python", python="/other/bin/python")
    assert KernelPool(0, kernel_name="ir").kernels_ahead is None  # its language is the kernelspec's
    assert AgentConfig.resolve(model="m", kernel="kernel-agent").kernel.ahead() is None  # even ours, named
    assert KernelPool(0, gateway=object()).kernels_ahead is None  # elsewhere: nothing can be asked here
    assert kernels_ahead(MadeKernels(lambda workspace: AsyncKernelSession(workspace))) is None
    assert AgentConfig.resolve(model="m").kernel.ahead() == KernelsAhead("python")
    assert AgentConfig.resolve(model="m", gateway_url="http://gateway.invalid:8888").kernel.ahead() is None
