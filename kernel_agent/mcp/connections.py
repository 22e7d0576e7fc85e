"""Every MCP connection's workbench, and the kernel started ahead for the first one: ``Workbenches``.

Owns which ``Workbench`` serves a connection (stdio: the one connection, in the workspace itself;
HTTP: one per session, in a subfolder named after its id), and closing them all when the server
stops. Also the work done while the client's first requests are read: once the server is up,
the kernel modules are imported in a worker thread (the server answers ``initialize`` without
them) and, on stdio, the connection's kernel is started with pandas, numpy and matplotlib
preloaded (``KernelPool``'s ``PRELOAD``: imports only, nothing the notebook would miss), so the
first ``execute_python`` does not wait for them either. A kernel started ahead that no call takes
is shut down with the rest. ``edge`` turns our errors into tool errors.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from .._loop import in_thread
from ..errors import KernelAgentError
from ..kernel.interface import EXEC_TIMEOUT_S

if TYPE_CHECKING:
    from ..kernel.session import AsyncKernelSession
    from ..sources.base import SourceSpec
    from .workbench import SessionBuilder, Workbench

__all__ = ["Workbenches", "edge"]

log = logging.getLogger(__name__)

_STATE_KEY = "kernel_agent.workbench"
_WORKBENCH = f"{__package__}.workbench"  # the kernel, notebooks and data files: imported after start-up


class Workbenches:
    """Every connection's workbench, so that a server shutdown closes them all.

    ``workspace`` is the kernel's folder (``stdio``: the one connection's; else each session gets
    a subfolder named after its id), ``data`` the files installed in it, ``sources`` the live databases each
    connection's kernel queries (through a broker of the connection's own; no kernel is started ahead for them:
    it must be given the broker's socket), ``timeout`` the default seconds per execution; ``factory`` builds a
    connection's kernel session (None: the agent's default).
    """

    def __init__(
        self,
        workspace: Path,
        *,
        data: Sequence[str] = (),
        sources: Sequence[SourceSpec] = (),
        timeout: float = EXEC_TIMEOUT_S,
        stdio: bool = True,
        factory: SessionBuilder | None = None,
    ) -> None:
        self.workspace = workspace
        self.data = tuple(data)
        self.sources = tuple(sources)
        self.timeout = timeout
        self.stdio = stdio
        self._factory = factory
        self.open: set[Workbench] = set()
        self._warming: asyncio.Future[Any] | None = None
        self._ahead: asyncio.Future[AsyncKernelSession] | None = None  # stdio: the connection's kernel

    @property
    def factory(self) -> SessionBuilder:
        if self._factory is None:
            self._factory = importlib.import_module(_WORKBENCH).default_session
        return self._factory

    def start_ahead(self) -> None:
        """Begin importing the kernel modules and, on stdio, starting the connection's kernel; return at once."""
        if self.stdio and not self.sources:
            self._ahead = self._warming = asyncio.ensure_future(self._start_kernel(self.workspace))
        else:
            self._warming = asyncio.ensure_future(in_thread(importlib.import_module, _WORKBENCH))

    async def _start_kernel(self, workspace: Path) -> AsyncKernelSession:
        await in_thread(importlib.import_module, _WORKBENCH)
        from ..kernel.pool import PRELOAD

        await in_thread(workspace.mkdir, parents=True, exist_ok=True)
        session = self.factory(workspace)
        try:
            await session.start()
            reply = await session.engine.run_silently(PRELOAD, {}, 120.0)
            if reply.get("status") != "ok":
                log.warning("preloading the kernel started ahead failed: %s", reply.get("evalue"))
        except BaseException:
            await session.close()
            raise
        return session

    def get(self, ctx: Context) -> Workbench:
        """The workbench of the connection ``ctx`` belongs to, made on its first call."""
        connection = _connection(ctx)
        bench: Workbench | None = connection.state.get(_STATE_KEY)
        if bench is None:
            bench = self._new(connection.session_id, _client_name(ctx))
            connection.state[_STATE_KEY] = bench
            connection.exit_stack.push_async_callback(self._close, bench)
        return bench

    def _new(self, session_id: str | None, client: str) -> Workbench:
        from ..agent.datafiles.data import prepare_data
        from .workbench import Workbench

        workspace = self.workspace / f"session-{session_id[:12]}" if session_id else self.workspace
        with edge():
            workspace.mkdir(parents=True, exist_ok=True)
            installed = prepare_data(self.data, workspace)
        ahead, self._ahead = self._ahead, None  # stdio's one connection: the kernel started for it
        bench = Workbench(
            workspace,
            files=installed,
            session_factory=self.factory,
            timeout=self.timeout,
            client=client,
            ahead=ahead,
            sources=self.sources,
        )
        self.open.add(bench)
        log.info("MCP session opened (%r): %d live", client[:80], len(self.open))
        return bench

    async def _close(self, bench: Workbench) -> None:
        known = bench in self.open
        self.open.discard(bench)
        try:
            await bench.close()
        finally:
            if known:
                log.info("MCP session ended, its kernel shut down: %d live", len(self.open))

    async def close_all(self) -> None:
        """Close every workbench and a kernel started ahead that none took; wait for the warm-up."""
        for bench in list(self.open):
            await self._close(bench)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            from .workbench import close_ahead

            await close_ahead(ahead)
        if self._warming is not None and not self._warming.done():
            await asyncio.wait({self._warming})
        if self._warming is not None and not self._warming.cancelled() and self._warming.exception() is not None:
            log.debug("the MCP server's warm-up failed", exc_info=self._warming.exception())


def _connection(ctx: Context) -> Any:
    # The SDK keeps per-connection state and teardown on ``Connection`` but MCPServer's tool
    # Context does not expose it (the lowlevel Context does); the request's session holds it.
    connection = getattr(ctx.request_context.session, "_connection", None)
    if connection is None or not hasattr(connection, "exit_stack"):
        raise ToolError("this version of the mcp SDK does not expose per-connection state")
    return connection


def _client_name(ctx: Context) -> str:
    params = ctx.request_context.session.client_params
    info = getattr(params, "client_info", None)
    return f"{info.name} {info.version}".strip() if info is not None else "an MCP client"


@contextmanager
def edge() -> Iterator[None]:
    """Our refusals and machinery failures become tool errors the model can read."""
    try:
        yield
    except KernelAgentError as exc:
        raise ToolError(str(exc)) from exc
