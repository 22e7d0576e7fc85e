"""Driving one agent run in the CLI process: the event loop, the signals and the exit code.

Owns ``drive()``: run ``AsyncAgent.stream`` under ``asyncio.run``, hand every
event to a renderer, and turn the way the run ended into an exit code. The
first Ctrl-C (asyncio's own SIGINT handling) and SIGTERM (a handler installed
here) cancel the run; the agent then interrupts the code, saves the notebook
with ``stop_reason="cancelled"`` and shuts its kernel down before the
cancellation reaches us. Errors the agent raises (bad data file, kernel that
will not start) propagate to the command (``commands/``), which translates them.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..events import RunFinished, RunStarted

if TYPE_CHECKING:
    from ..agent.run.agent import AsyncAgent
    from .render import Renderer

__all__ = ["EXIT_ANSWER", "EXIT_INTERRUPTED", "EXIT_NO_ANSWER", "EXIT_TERMINATED", "EXIT_USAGE", "Job", "drive"]

EXIT_ANSWER = 0
EXIT_NO_ANSWER = 1  # max rounds, stuck, model error: the notebook is written all the same
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


@dataclass(frozen=True)
class Job:
    """What to run: the task, its data files and where the workspace and notebook go (None: defaults).

    With ``resume_from`` the task is a follow-up to that earlier run's notebook.
    """

    task: str
    data: Sequence[str | os.PathLike[str]] = ()
    workspace: str | os.PathLike[str] | None = None
    notebook: str | os.PathLike[str] | None = None
    resume_from: str | os.PathLike[str] | None = None

    def events(self, agent: AsyncAgent) -> Any:
        """The agent's event stream for this job."""
        if self.resume_from is not None:
            return agent.stream_resume(
                self.resume_from, self.task, notebook=self.notebook, workspace=self.workspace, data=self.data
            )
        return agent.stream(self.task, self.data, self.workspace, self.notebook)


@dataclass
class _Progress:
    notebook: str | None = None
    signal: str | None = None


def drive(agent: AsyncAgent, job: Job, renderer: Renderer) -> int:
    """Run ``job`` to its end, rendering every event; return the exit code.

    0 when the run reached an answer, 1 when it ended without one, 130 after
    Ctrl-C and 143 after SIGTERM (notebook saved, kernel shut down). Raises
    what ``AsyncAgent.stream`` raises (``DataFileError``, ``KernelError``, ...).
    """
    progress = _Progress()
    try:
        return asyncio.run(_drive(agent, job, renderer, progress))
    except KeyboardInterrupt:  # a second Ctrl-C while the first one was being handled
        renderer.interrupted(progress.notebook, "SIGINT")
        return EXIT_INTERRUPTED


async def _drive(agent: AsyncAgent, job: Job, renderer: Renderer, progress: _Progress) -> int:
    loop = asyncio.get_running_loop()
    handled = _cancel_on_sigterm(loop, asyncio.current_task(), progress)
    answered = False
    try:
        async with agent:
            async for event in job.events(agent):
                if isinstance(event, RunStarted):
                    progress.notebook = event.notebook_path
                renderer.handle(event)
                if isinstance(event, RunFinished):
                    answered = event.run.answer is not None
    except asyncio.CancelledError:
        name = progress.signal or "SIGINT"
        renderer.interrupted(progress.notebook, name)
        return EXIT_TERMINATED if name == "SIGTERM" else EXIT_INTERRUPTED
    finally:
        if handled:
            loop.remove_signal_handler(signal.SIGTERM)
    return EXIT_ANSWER if answered else EXIT_NO_ANSWER


def _cancel_on_sigterm(loop: asyncio.AbstractEventLoop, task: Any, progress: _Progress) -> bool:
    """Make SIGTERM cancel ``task`` the way asyncio makes the first Ctrl-C do; False where impossible."""

    def on_sigterm() -> None:
        progress.signal = "SIGTERM"
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
        return False
    return True
