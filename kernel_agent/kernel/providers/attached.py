"""A kernel someone else started: ``AttachedProvider``, reached by its connection file, never restarted or killed."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient

from ...errors import ConfigError, KernelError, KernelStartError
from ..sandbox.limits import Limits
from .base import bound_messages, max_message_bytes
from .guard import MessageGuard
from .registry import ProviderSettings

__all__ = ["AttachedProvider", "attached_provider"]


class AttachedProvider:
    """A kernel someone else started, reached by its connection file. Never restarted or killed.

    ``workspace``: the kernel's working folder on this machine, when the caller knows it shares our
    files (a kernel of this machine's Jupyter server that the caller moved into that folder); then the
    session's files are that folder's (``LocalFiles``). None: its files are not ours (``RemoteFiles``)."""

    owns_kernel = False
    supports_sockets = False  # another's kernel, already running: nothing can be bound into it

    def __init__(
        self,
        connection_file: str | os.PathLike[str],
        *,
        startup_timeout: float = 60.0,
        max_output_bytes: int = 10_000_000,
        workspace: Path | None = None,
    ) -> None:
        self.connection_file = str(connection_file)
        self.startup_timeout = startup_timeout
        self.max_output_bytes = max_output_bytes
        self.guard: MessageGuard | None = None
        self.limits = replace(Limits.off(), sandbox="off")  # not ours: we confine nothing there
        self.client: AsyncKernelClient | None = None
        self._workspace = workspace

    def __repr__(self) -> str:
        return f"<AttachedProvider {self.connection_file}>"

    @property
    def workspace(self) -> Path | None:
        return self._workspace

    async def start(self) -> dict[str, Any]:
        """Connect and wait until the kernel answers. Raises ``KernelStartError``."""
        client = AsyncKernelClient()
        limit = max_message_bytes(self.max_output_bytes)
        try:
            client.load_connection_file(self.connection_file)
            bound_messages(client, limit)
            client.start_channels()
            await client.wait_for_ready(timeout=self.startup_timeout)
        except (OSError, RuntimeError, ValueError) as exc:
            client.stop_channels()
            raise KernelStartError(f"cannot attach to the kernel in {self.connection_file}: {exc}") from exc
        self.client = client
        self.guard = MessageGuard(client, limit)
        self.guard.start()
        return {}

    @property
    def dropped_messages(self) -> int:
        return self.guard.dropped if self.guard is not None else 0

    async def is_alive(self) -> bool:
        return self.client is not None and self.client.hb_channel.is_beating()

    async def interrupt(self) -> None:
        if self.client is not None:
            self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))

    async def restart(self) -> dict[str, Any]:
        raise KernelError("restart needs a kernel this session started; this one was attached")

    def describe_exit(self) -> str:
        return "its heartbeat stopped"

    async def close(self) -> None:
        if self.guard is not None:
            await self.guard.close()
        if self.client is not None:
            self.client.stop_channels()


def attached_provider(settings: ProviderSettings) -> AttachedProvider:
    """The ``attached`` entry point of ``kernel_agent.providers``: the running kernel whose connection file
    the settings name (never restarted or killed). Raises ``ConfigError`` without one."""
    if settings.sockets:
        raise ConfigError(
            "an attached kernel cannot be given a socket (a live data source needs a kernel started here)"
        )
    if not settings.connection_file:
        raise ConfigError("the attached kernel provider needs a running kernel's connection file")
    return AttachedProvider(
        settings.connection_file, startup_timeout=settings.startup_timeout, max_output_bytes=settings.max_output_bytes
    )
