"""The Jupyter server's own query broker: ``ServerSources``, so a notebook's own kernel (Run All) has ``sql()``.

The operator's live sources (``c.KernelAgentPersona.sources``, the persona's setting, read from the server's
config: no second way to give them) are opened at server start with ONE broker for the server (``LiveSources``,
on a loop thread of its own), and the server's environment gets ``KERNEL_AGENT_SQL`` naming the broker's socket,
which every kernel the server starts inherits: those kernels are the user's own, unsandboxed, and reach the
sources by name only, read-only, through the broker (the credentials stay in the server's process). Nothing is
opened without a configured source. A source that cannot be reached at start is logged by name (never its URI)
and its queries fail naming it; the server keeps running. Closed (broker, sources, the variable) when the
server stops. Imports the persona's trait and ``agent/run/live.py``.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import Future
from typing import Any

from traitlets import List, Unicode
from traitlets.config import Config, Configurable

from .._loop import LoopThread, in_thread
from ..agent.run.live import LiveSources, split_data
from ..errors import KernelAgentError
from ..kernel.inside.sql_client import SOCKET_ENV

__all__ = ["ServerSources", "configured_sources", "serve_sources"]


def sources_trait() -> List[str]:
    """The ``KernelAgentPersona.sources`` setting: the persona's trait, and what the server reads here."""
    return List(
        Unicode(),
        default_value=[],
        config=True,
        help="live databases every conversation may query with sql(), and every kernel this Jupyter server starts "
        "(a notebook's Run All), each [NAME=]postgresql://USER@HOST/DB (no password: ~/.pgpass, PGPASSFILE or a "
        "pg_service.conf service gives it); the server's operator's, never a chat message's; not with "
        "kernel = 'notebook'",
    )


def configured_sources(config: Config) -> list[str]:
    """``KernelAgentPersona.sources`` as the server's ``config`` gives it (read as the persona reads it)."""
    reader = type("KernelAgentPersona", (Configurable,), {"sources": sources_trait()})
    return [str(value) for value in reader(config=config).sources]


class ServerSources:
    """The server's live sources and their broker (see the module), on a loop thread of its own."""

    def __init__(self, values: list[str], log: Any) -> None:
        files, specs = split_data(values)  # a password refused (ConfigError), never echoed
        if files:
            raise KernelAgentError("KernelAgentPersona.sources takes live databases' URIs, NAME=postgresql://…")
        self.log = log
        self.live = LiveSources(specs)
        self._runner = LoopThread("kernel-agent-server-sources")
        self._checked: Future[None] | None = None

    def open(self) -> None:
        """Open the sources and the broker, set ``KERNEL_AGENT_SQL`` for the kernels to come, and start reaching
        each source (one that cannot be reached is logged by name)."""
        try:
            self._runner.run(self.live.open())
        except BaseException:
            self._runner.stop()
            raise
        os.environ[SOCKET_ENV] = str(self.live.socket)
        self._checked = asyncio.run_coroutine_threadsafe(self._check(), self._runner.loop)
        names = ", ".join(spec.name for spec in self.live.specs)
        self.log.info("kernel-agent: the server's kernels may query %s with sql()", names)

    async def _check(self) -> None:
        try:
            await self.live.described()
        except KernelAgentError as exc:  # its message names the source, never a password or the URI's password
            self.log.warning("kernel-agent: a data source cannot be reached now: %s", exc)

    async def aclose(self) -> None:
        """Close the broker and the sources; the variable goes. Idempotent."""
        if os.environ.get(SOCKET_ENV) == str(self.live.socket):
            del os.environ[SOCKET_ENV]
        if self._checked is not None:
            self._checked.cancel()
        if self._runner.running:
            await in_thread(self._runner.run, self.live.aclose())
            self._runner.stop()


def serve_sources(serverapp: Any) -> ServerSources | None:
    """Open the server's sources (none configured: None, nothing opened) and close them after the server's
    extensions stop (jupyter_server calls stop hooks of extension apps only; this is a plain extension)."""
    values = configured_sources(serverapp.config)
    if not values:
        return None
    served = ServerSources(values, serverapp.log)
    served.open()
    cleanup = serverapp.cleanup_extensions

    async def cleanup_then_close() -> None:
        try:
            await cleanup()
        finally:
            await served.aclose()

    serverapp.cleanup_extensions = cleanup_then_close
    return served
