"""``Agent``: the blocking facade of ``AsyncAgent``.

Same methods, same meaning, run on a private event-loop thread so it works
inside Jupyter (whose kernel already runs a loop): ``run`` and ``resume``
return a ``Run``; ``stream`` and ``stream_resume`` are plain iterators of
events. A ``KeyboardInterrupt`` cancels the run, which saves the notebook
and shuts the kernel down before the interrupt propagates.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

from .._loop import LoopThread
from ..events import Event, PlanEvent, PlanFinished
from ..kernel.interface import KernelFactory, KernelMaker
from ..kernel.sandbox.bwrap import SandboxMode
from ..model.chat import ChatModel
from ..records import Run
from .config import AgentConfig, settings_in
from .names import DataFormat, ProtocolName
from .run.agent import AsyncAgent

if TYPE_CHECKING:  # plan mode is imported when a plan starts
    from .plan.runner import PlanOptions

__all__ = ["Agent"]


class Agent:
    """An analyst model working in a live kernel (blocking API). Takes ``AsyncAgent``'s arguments."""

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        protocol: ProtocolName | str | None = None,
        max_rounds: int | None = None,
        exec_timeout: float | None = None,
        temperature: float | None = None,
        vision: bool | None = None,
        *,
        chat_model: ChatModel | None = None,
        session_factory: KernelFactory | KernelMaker | None = None,
        session_options: dict[str, Any] | None = None,
        model_options: dict[str, Any] | None = None,
        request_timeout: float | None = None,
        top_p: float | None = None,
        stream: bool | None = None,
        data_format: DataFormat | None = None,
        vllm_extras: bool | None = None,
        max_new_tokens: int | None = None,
        stuck_after: int | None = None,
        feedback_chars: int | None = None,
        full_feedback_rounds: int | None = None,
        old_feedback_chars: int | None = None,
        disk_quota_mb: int | None = None,
        preload: bool | None = None,
        rebuild: bool | None = None,
        sandbox: SandboxMode | None = None,
        network: bool | None = None,
        kernel: str | None = None,
        python: str | None = None,
        template: bool | None = None,
        provider: str | None = None,
        gateway_url: str | None = None,
        gateway_token: str | None = None,
        gateway_kernel: str | None = None,
        memory_mb: int | None = None,
    ) -> None:
        arguments = {
            "chat_model": chat_model,
            "session_factory": session_factory,
            "session_options": session_options,
            "model_options": model_options,
            **settings_in(locals()),
        }
        self._loop = LoopThread("kernel-agent")
        try:
            self._async: AsyncAgent = self._loop.run(_build(arguments))
        except BaseException:
            self._loop.stop()
            raise
        self._loop.on_exit(self._async.close)

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncAgent", "Agent", 1)

    @property
    def config(self) -> AgentConfig:
        return self._async.config

    def run(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        setup: str = "",
    ) -> Run:
        """Run the analysis; see ``AsyncAgent.run``."""
        return self._loop.run(self._async.run(task, data, workspace, notebook, setup=setup))

    def stream(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        setup: str = "",
    ) -> Generator[Event, None, None]:
        """The run as an iterator of events; see ``AsyncAgent.stream``."""
        return self._loop.iterate(self._async.stream(task, data, workspace, notebook, setup=setup))

    def resume(
        self,
        notebook_path: str | os.PathLike[str],
        task: str,
        *,
        notebook: str | os.PathLike[str] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        data: Sequence[str | os.PathLike[str]] = (),
    ) -> Run:
        """Continue an earlier run; see ``AsyncAgent.resume``."""
        return self._loop.run(
            self._async.resume(notebook_path, task, notebook=notebook, workspace=workspace, data=data)
        )

    def stream_resume(
        self,
        notebook_path: str | os.PathLike[str],
        task: str,
        *,
        notebook: str | os.PathLike[str] | None = None,
        workspace: str | os.PathLike[str] | None = None,
        data: Sequence[str | os.PathLike[str]] = (),
        restore: bool = True,
    ) -> Generator[Event, None, None]:
        """``resume`` as an iterator of events."""
        return self._loop.iterate(
            self._async.stream_resume(
                notebook_path, task, notebook=notebook, workspace=workspace, data=data, restore=restore
            )
        )

    def plan(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        options: PlanOptions | None = None,
        resume: str | os.PathLike[str] | None = None,
    ) -> PlanFinished:
        """Sync facade of ``AsyncAgent.plan``: the ``PlanFinished`` event; raises the same."""
        return self._loop.run(self._async.plan(task, data, workspace, notebook, options=options, resume=resume))

    def stream_plan(
        self,
        task: str,
        data: Sequence[str | os.PathLike[str]] = (),
        workspace: str | os.PathLike[str] | None = None,
        notebook: str | os.PathLike[str] | None = None,
        *,
        options: PlanOptions | None = None,
        resume: str | os.PathLike[str] | None = None,
    ) -> Generator[PlanEvent | Event, None, None]:
        """Sync facade of ``AsyncAgent.stream_plan``: its events, as they come."""
        return self._loop.iterate(
            self._async.stream_plan(task, data, workspace, notebook, options=options, resume=resume)
        )

    def close(self) -> None:
        """Release the model client and stop the loop thread. Idempotent."""
        self._loop.close(self._async.close)

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _build(arguments: dict[str, Any]) -> AsyncAgent:
    return AsyncAgent(**arguments)
