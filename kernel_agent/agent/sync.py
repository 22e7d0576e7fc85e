"""``Agent``: the blocking facade of ``AsyncAgent``.

Same methods, same meaning, run on a private event-loop thread so it works
inside Jupyter (whose kernel already runs a loop): ``run`` and ``resume``
return a ``Run``; ``stream`` and ``stream_resume`` are plain iterators of
events. A ``KeyboardInterrupt`` cancels the run, which saves the notebook
and shuts the kernel down before the interrupt propagates.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._loop import LoopThread
from ..events import Event
from ..records import Run
from .agent import AsyncAgent

__all__ = ["Agent"]


class Agent:
    """An analyst model working in a live kernel (blocking API). Takes ``AsyncAgent``'s arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = LoopThread("kernel-agent")
        try:
            self._async: AsyncAgent = self._loop.run(_build(args, kwargs))
        except BaseException:
            self._loop.stop()
            raise
        self._loop.on_exit(self._async.close)

    def __repr__(self) -> str:
        return repr(self._async).replace("AsyncAgent", "Agent", 1)

    @property
    def config(self) -> Any:
        return self._async.config

    def run(self, task: str, data: Any = (), workspace: Any = None, notebook: Any = None, *, setup: str = "") -> Run:
        """Run the analysis; see ``AsyncAgent.run``."""
        return self._loop.run(self._async.run(task, data, workspace, notebook, setup=setup))

    def stream(
        self, task: str, data: Any = (), workspace: Any = None, notebook: Any = None, *, setup: str = ""
    ) -> Iterator[Event]:
        """The run as an iterator of events; see ``AsyncAgent.stream``."""
        return self._loop.iterate(self._async.stream(task, data, workspace, notebook, setup=setup))

    def resume(
        self, notebook_path: Any, task: str, *, notebook: Any = None, workspace: Any = None, data: Any = ()
    ) -> Run:
        """Continue an earlier run; see ``AsyncAgent.resume``."""
        return self._loop.run(
            self._async.resume(notebook_path, task, notebook=notebook, workspace=workspace, data=data)
        )

    def stream_resume(
        self, notebook_path: Any, task: str, *, notebook: Any = None, workspace: Any = None, data: Any = ()
    ) -> Iterator[Event]:
        """``resume`` as an iterator of events."""
        return self._loop.iterate(
            self._async.stream_resume(notebook_path, task, notebook=notebook, workspace=workspace, data=data)
        )

    def plan(
        self,
        task: str,
        data: Any = (),
        workspace: Any = None,
        notebook: Any = None,
        *,
        options: Any = None,
        resume: Any = None,
    ) -> Any:
        """Sync facade of ``AsyncAgent.plan``: the ``PlanFinished`` event; raises the same."""
        return self._loop.run(self._async.plan(task, data, workspace, notebook, options=options, resume=resume))

    def stream_plan(
        self,
        task: str,
        data: Any = (),
        workspace: Any = None,
        notebook: Any = None,
        *,
        options: Any = None,
        resume: Any = None,
    ) -> Iterator[Any]:
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


async def _build(args: tuple[Any, ...], kwargs: dict[str, Any]) -> AsyncAgent:
    return AsyncAgent(*args, **kwargs)
