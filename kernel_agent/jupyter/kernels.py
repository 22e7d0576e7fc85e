"""The Jupyter server's kernels as the persona meets them: the open notebook's own kernel, and its interrupts.

``notebook_kernel`` attaches to the kernel the server runs for a notebook (the persona's opt-in
``kernel = "notebook"``): an ``AsyncKernelSession`` over ``AttachedProvider``, moved into the run's
workspace, so data files and figures are where the agent's own kernel would have them. Attached, never
owned: closing the session leaves that kernel running. ``InterruptWatch`` calls back when the server
interrupts a notebook's kernel (JupyterLab's stop button, Kernel > Interrupt: the REST interrupt, which
jupyter_server announces as a ``kernel_actions`` event). Does not run the agent (``persona.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..errors import KernelStartError
from ..kernel.providers.attached import AttachedProvider
from ..kernel.session import AsyncKernelSession

__all__ = ["InterruptWatch", "notebook_kernel", "notebook_kernel_id"]

log = logging.getLogger(__name__)

KERNEL_ACTIONS = "https://events.jupyter.org/jupyter_server/kernel_actions/v1"


async def notebook_kernel_id(serverapp: Any, path: str) -> str | None:
    """The id of the kernel the server runs for the notebook at ``path`` (relative to its root), if any."""
    for session in await serverapp.session_manager.list_sessions():
        if session.get("path") == path and session.get("kernel"):
            return str(session["kernel"]["id"])
    return None


async def notebook_kernel(
    serverapp: Any, path: str, workspace: Path, session_for: Callable[[AttachedProvider], AsyncKernelSession]
) -> AsyncKernelSession:
    """A started session (``session_for(provider)`` makes it) on the kernel the server runs for the notebook at
    ``path``, its working folder moved to ``workspace``. Raises ``KernelStartError`` when the notebook has no
    kernel (it is not open, or its kernel is not started) or it cannot be reached."""
    kernel_id = await notebook_kernel_id(serverapp, path)
    connection_file = (
        getattr(serverapp.kernel_manager.get_kernel(kernel_id), "connection_file", "") if kernel_id else ""
    )
    if not connection_file:
        raise KernelStartError(
            f"`{path}` has no running kernel here: open it in JupyterLab (its kernel starts), then ask again"
        )
    session = session_for(AttachedProvider(connection_file, workspace=workspace))
    await session.start()
    try:
        await session.run_quietly(f"__import__('os').chdir({json.dumps(str(workspace))})")
    except BaseException:
        await session.close()
        raise
    return session


class InterruptWatch:
    """Calls ``on_interrupt()`` each time the server interrupts the kernel of the notebook at ``path()`` (read
    when the interrupt comes: the notebook's kernel may change; None: nothing to watch now, no look-up).
    ``close`` stops watching."""

    def __init__(
        self, serverapp: Any, path: Callable[[], str | None], on_interrupt: Callable[[], Awaitable[None]]
    ) -> None:
        self.serverapp = serverapp
        self.path = path
        self.on_interrupt = on_interrupt
        serverapp.event_logger.add_listener(schema_id=KERNEL_ACTIONS, listener=self._heard)

    def close(self) -> None:
        self.serverapp.event_logger.remove_listener(schema_id=KERNEL_ACTIONS, listener=self._heard)

    async def _heard(self, logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        """The listener (jupyter_events names its arguments): a task of its own, so nothing raised here can fail
        the interrupt request."""
        if data.get("action") != "interrupt" or data.get("status") != "success":
            return
        path = self.path()
        if path is not None and data.get("kernel_id") == await notebook_kernel_id(self.serverapp, path):
            log.info("the kernel of %s was interrupted: stopping the run", path)
            await self.on_interrupt()
