"""``KernelFactory`` says whether its kernels work apart, explicitly: a pool does, a plain callable does not,
and an agent's own kernels do on a gateway only. Nothing here starts a kernel."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from kernel_agent.agent.run.agent import AsyncAgent
from kernel_agent.kernel.interface import Kernel, KernelFactory, MadeKernels, kernel_factory
from kernel_agent.kernel.pool import KernelPool
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.model.scripted import ScriptedChatModel


def agent(**options: object) -> AsyncAgent:
    return AsyncAgent(chat_model=ScriptedChatModel(["done"]), **options)  # type: ignore[arg-type]


def test_a_pool_is_a_factory_whose_kernels_work_apart() -> None:
    pool = KernelPool(size=0)
    assert isinstance(pool, KernelFactory)
    assert pool.kernels_apart is True
    assert kernel_factory(pool) is pool
    assert agent(session_factory=pool)._kernels_apart() is True


def test_a_plain_callable_is_made_a_factory_whose_kernels_work_in_the_run_folder(tmp_path: Path) -> None:
    def make(folder: Path) -> AbstractAsyncContextManager[Kernel]:
        return AsyncKernelSession(folder)

    assert not isinstance(make, KernelFactory)
    factory = kernel_factory(make)
    assert isinstance(factory, KernelFactory) and factory.kernels_apart is False
    session = factory(tmp_path)
    assert isinstance(session, AsyncKernelSession) and session.local_folder == tmp_path  # made, not started
    assert agent(session_factory=make)._kernels_apart() is False
    assert agent(session_factory=AsyncKernelSession)._kernels_apart() is False


def test_a_factory_that_says_its_kernels_are_apart_is_believed() -> None:
    apart = MadeKernels(AsyncKernelSession, kernels_apart=True)
    assert agent(session_factory=apart)._kernels_apart() is True


@pytest.mark.parametrize(("gateway", "apart"), [(None, False), ("http://127.0.0.1:9", True)])
def test_an_agents_own_kernels_work_apart_on_a_gateway_only(gateway: str | None, apart: bool) -> None:
    own = agent(gateway_url=gateway)
    assert own._kernels_apart() is apart
    assert own._own_kernels is True
    assert agent(session_factory=KernelPool(size=0))._own_kernels is False
