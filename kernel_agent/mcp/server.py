"""The kernel-agent MCP server: ``McpOptions``, ``build_server``, ``serve``.

Owns the MCP surface (the official SDK's ``MCPServer``): the tools, their
descriptions and schemas, one ``Workbench`` (live kernel + notebook) per MCP
connection, progress notifications while code runs, and the transports. A
connection's kernel is started on its first call (stdio: ahead, while the first
requests are read) and shut down when the connection ends (stdio: the process's
stdin closes; HTTP: the session is deleted, or its client is gone: no request
in flight and no open stream for ``McpOptions.session_idle``, 60 s by default),
through the SDK's per-connection exit stack; HTTP sessions are capped
(``max_sessions``). Which workbench serves a connection, and our errors as
tool errors, are ``connections.py``'s; turning results into content blocks is
``content.py``'s; progress notifications (with the output so far) are
``progress.py``'s; workspace paths are ``files.py``'s.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import CallToolResult, ImageContent, ToolAnnotations
from pydantic import Field

from .._connections import ConnectionLimits, listen, uvicorn_options
from .._loop import in_thread
from .._version import __version__
from ..agent.settings import SETTINGS
from ..errors import ConfigError, KernelAgentError
from . import files
from .auth import BearerKey, check_listen
from .connections import Workbenches, edge
from .content import ContentLimits, execution_content, image_block, text_result
from .progress import with_progress
from .settings import MCP

if TYPE_CHECKING:
    from ..sources.base import SourceSpec
    from .workbench import SessionBuilder

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_IDLE", "McpOptions", "Transport", "build_server", "serve"]

log = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]
Seconds = Annotated[float, Field(gt=0, le=7 * 24 * 3600, description="seconds before the code is interrupted")]
NOTEBOOK_URI = "kernel-agent://notebook/{view}"
FILE_URI = "kernel-agent://files/{+path}"
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024  # a resource read whole into memory
DEFAULT_SESSION_IDLE: float = MCP["session_idle"].default  # HTTP: a session with no request in flight and no open
# stream this long is closed
DEFAULT_MAX_SESSIONS: int = MCP["max_sessions"].default  # HTTP: each session may hold a kernel (~100 MB); the
# SDK's own cap is 10,000

_INSTRUCTIONS = """A live, confined Python (IPython) kernel. Variables persist between execute_python calls.
Figures (matplotlib) come back as images. Long output is cut in the middle and says so. A timeout interrupts
the code and keeps the variables when it can; the result says when state was lost. Everything executed is
recorded in a notebook in the workspace (export_notebook writes a copy)."""


@dataclass(frozen=True)
class McpOptions:
    """How the server runs.

    ``workspace`` is the kernel's folder (for HTTP each session gets a subfolder
    named after its id); ``data`` are files copied into it read-only and preloaded; ``sources`` live databases
    each session's kernel queries with ``sql()`` through a broker of the session's own;
    ``exec_timeout`` is the default seconds per execution; ``limits`` bound what goes back.
    Over HTTP every request must carry ``key`` (``auth.py``), and ``host`` must be loopback
    unless ``allow_remote``; a session whose client has gone (no request in flight and no open
    stream for ``session_idle`` seconds) is closed with its kernel, and at most ``max_sessions``
    are open at once (the one key's: one more is refused with a 503 saying so). Raises
    ``ConfigError`` for an idle time or cap out of range. Each field but ``workspace``, ``data``, ``limits``
    and ``key`` is the row of its name of ``MCP`` (``settings.py``; ``exec_timeout`` the agent's), which gives
    its default and its checks.
    """

    workspace: Path
    data: tuple[str, ...] = ()
    sources: tuple[SourceSpec, ...] = ()
    exec_timeout: float = SETTINGS["exec_timeout"].default
    limits: ContentLimits = field(default_factory=ContentLimits)
    transport: Transport = MCP["transport"].default
    host: str = MCP["host"].default
    port: int = MCP["port"].default
    key: str | None = field(default=None, repr=False)  # HTTP: the bearer key every request must carry
    allow_remote: bool = MCP["allow_remote"].default  # HTTP: listen on an address other than loopback (TLS
    # must be in front)
    session_idle: float = DEFAULT_SESSION_IDLE  # HTTP: seconds without a request or open stream before a
    # session (and its kernel) is closed: a client that vanished (killed, network gone) leaves nothing behind
    max_sessions: int = DEFAULT_MAX_SESSIONS  # HTTP: sessions open at once for the key; one more gets a 503

    def __post_init__(self) -> None:
        SETTINGS["exec_timeout"].check(self.exec_timeout)
        given = ("transport", "host", "port", "allow_remote", "session_idle", "max_sessions")
        MCP.check({name: getattr(self, name) for name in given})


def build_server(options: McpOptions, session_factory: SessionBuilder | None = None) -> MCPServer:
    """The MCP server with its tools; each connection gets its own kernel from ``session_factory``
    (None: the agent's default session). Once it runs, the kernel modules load (and, on stdio,
    the connection's kernel starts) in the background (``Workbenches.start_ahead``)."""
    benches = Workbenches(
        options.workspace,
        data=options.data,
        sources=options.sources,
        timeout=options.exec_timeout,
        stdio=options.transport == "stdio",
        factory=session_factory,
    )

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        try:
            benches.start_ahead()
            yield {}
        finally:
            with anyio.CancelScope(shield=True):
                await benches.close_all()

    server = MCPServer(
        "kernel-agent", instructions=_INSTRUCTIONS, version=__version__, lifespan=lifespan, log_level="WARNING"
    )
    _add_kernel_tools(server, benches, options)
    _add_file_tools(server, benches, options.limits.max_side)
    _add_resources(server, benches)
    return server


def _add_kernel_tools(server: MCPServer, benches: Workbenches, options: McpOptions) -> None:
    limits = options.limits
    default_timeout = options.exec_timeout

    @server.tool(
        description=(
            "Run Python code in the live kernel; variables persist between calls. Returns the status "
            "(ok, error, timeout, died; state_lost says whether variables are gone), the printed output and "
            "results (long output keeps its head and tail and says what was cut; errors keep their tail), "
            f"and each figure as an image. timeout is in seconds (default {default_timeout:g}): when it passes "
            "the code is interrupted and the variables are kept when possible. A call whose code did not end ok "
            "(it raised, timed out or the kernel died) is marked isError, with its output and traceback."
        )
    )
    async def execute_python(code: str, ctx: Context, timeout: Seconds | None = None) -> CallToolResult:
        bench = benches.get(ctx)
        with edge():
            result = await with_progress(
                ctx, lambda on_output: bench.execute(code, timeout, on_output=on_output), timeout or default_timeout
            )
        return execution_content(result, limits)

    @server.tool(description="Interrupt the code running in the kernel (like Ctrl-C); variables are kept.")
    async def interrupt(ctx: Context) -> str:
        with edge():
            sent = await benches.get(ctx).interrupt()
        return "interrupt sent" if sent else "no kernel is running yet: nothing to interrupt"

    @server.tool(
        description="Restart the kernel. ALL variables and imports are lost; data files are loaded again.",
        annotations=ToolAnnotations(destructive_hint=True),
    )
    async def restart(ctx: Context) -> CallToolResult:
        with edge():
            setup = await benches.get(ctx).restart()
        text = "kernel restarted: all variables were lost; the setup code ran again"
        if not setup.ok:
            text += f"\nthe setup code failed:\n{setup.to_llm_text(limits.max_chars)}"
        return text_result(text, structured={"status": setup.status, "state_lost": True})

    @server.tool(
        description="List the kernel's variables: name, type, shape (DataFrames, arrays) and a short repr.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def list_variables(ctx: Context, limit: int = 100) -> CallToolResult:
        with edge():
            rows = await benches.get(ctx).variables(max(1, min(limit, 500)))
        lines = [
            f"{name}: {kind}" + (f" shape={shape}" if shape else "") + (f" = {value}" if value else "")
            for name, kind, shape, value in rows
        ]
        return text_result(
            "\n".join(lines) or "no variables defined",
            structured={"variables": [dict(zip(("name", "type", "shape", "repr"), row, strict=True)) for row in rows]},
        )

    @server.tool(
        description=(
            "Describe the session's data: each file's types, sizes, columns and previews; each live database's "
            "tables, columns and keys, queried in the kernel with sql(query, source=None), which returns a DataFrame."
        ),
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def describe_data(ctx: Context) -> str:
        with edge():
            return await benches.get(ctx).describe_data()

    @server.tool(
        description=(
            "Write everything executed in this session so far as an executable Jupyter notebook (python3 "
            "kernelspec; it replays with `kernel-agent replay`). path is relative to the workspace "
            "(default: the live session notebook). Returns the notebook's path."
        )
    )
    async def export_notebook(ctx: Context, path: str | None = None) -> str:
        bench = benches.get(ctx)
        with edge():
            written = await bench.export(path or None)
        return str(written)


def _add_file_tools(server: MCPServer, benches: Workbenches, max_side: int) -> None:

    @server.tool(
        description="List the files in the kernel's workspace (or a folder in it), with sizes.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def list_files(ctx: Context, folder: str = ".") -> str:
        bench = benches.get(ctx)
        with edge():
            found, total, unwalked = await in_thread(files.list_files, bench.workspace, folder)
        lines = [f"{entry.path}  ({entry.size} bytes)" for entry in found]
        if total > len(found):
            lines.append(f"[{total - len(found)} more files not listed]")
        if unwalked is not None:
            lines.append(f"[the listing is partial: {unwalked}]")
        return "\n".join(lines) or "the folder is empty"

    @server.tool(
        description=(
            "Read a file in the workspace: images (png, jpeg, gif, webp) come back as images, text is cut "
            f"after {files.MAX_READ_CHARS} characters (and says so)."
        ),
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def read_file(ctx: Context, path: str) -> CallToolResult:
        bench = benches.get(ctx)
        with edge():
            found = await in_thread(files.read_file, bench.workspace, path)
        if found.kind == "image":
            if found.mime_type == "image/png":  # scaled down like figures
                return CallToolResult(content=[image_block(found.data, max_side)])
            return CallToolResult(content=[ImageContent(type="image", data=found.data, mime_type=found.mime_type)])
        if found.kind == "binary":
            return text_result(f"{path} is a binary file of {found.size} bytes; load it with execute_python")
        note = f"\n[cut: the file has {found.size} bytes; only the start is shown]" if found.truncated else ""
        return text_result(found.text + note)

    @server.tool(
        description=(
            "Upload a file into the workspace (folders are created). encoding is 'text' (UTF-8) or 'base64' "
            "for binary files. The kernel sees it at the same relative path."
        )
    )
    async def write_file(ctx: Context, path: str, content: str, encoding: Literal["text", "base64"] = "text") -> str:
        bench = benches.get(ctx)
        with edge():
            entry = await bench.upload(path, content, encoding)
        return f"wrote {entry.path} ({entry.size} bytes)"


def _add_resources(server: MCPServer, benches: Workbenches) -> None:
    @server.resource(
        NOTEBOOK_URI,
        mime_type="application/x-ipynb+json",
        description=("This session's notebook so far: view 'full' (every execution) or 'clean' (what worked)."),
    )
    async def session_notebook(view: str, ctx: Context) -> str:
        bench = benches.get(ctx)
        if view not in ("full", "clean"):
            raise ResourceNotFoundError(f"unknown notebook view {view!r}; use 'full' or 'clean'")
        await bench.flush()
        from ..notebook.export import clean_path

        path = bench.notebook if view == "full" else clean_path(bench.notebook)
        try:  # the notebook sits in the workspace: read it through the door, as any file there
            data, size = await in_thread(files.read_head, path.parent, path.name, MAX_NOTEBOOK_BYTES)
        except KernelAgentError as exc:
            raise ResourceNotFoundError(f"no notebook to show yet ({exc})") from exc
        if size > MAX_NOTEBOOK_BYTES:
            raise ResourceError(f"the notebook is {size} bytes, over {MAX_NOTEBOOK_BYTES}; export it and read the file")
        return data.decode("utf-8", errors="replace")

    @server.resource(FILE_URI, description="A file in the session's workspace (figures, outputs, data).")
    async def workspace_file(path: str, ctx: Context) -> str | bytes:
        bench = benches.get(ctx)
        try:
            data, size = await in_thread(files.read_head, bench.workspace, path, files.MAX_IMAGE_BYTES)
        except KernelAgentError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        if size > files.MAX_IMAGE_BYTES:
            raise ResourceError(f"{path!r} is larger than {files.MAX_IMAGE_BYTES} bytes; read it with execute_python")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data


def serve(options: McpOptions, session_factory: SessionBuilder | None = None) -> None:
    """Run the server until the client goes away (stdio) or the process is stopped (HTTP).

    Raises ``ConfigError`` for HTTP without a key, or on an address other than loopback without
    ``allow_remote``.

    SIGTERM and SIGINT end it cleanly: every connection's kernel is shut down first.
    """
    if options.transport == "http":  # before any kernel or socket: a refusal changes nothing
        if not options.key:
            raise ConfigError("the MCP server over HTTP needs a key (--key-file or KERNEL_AGENT_MCP_KEY)")
        check_listen(options.host, options.allow_remote)
    server = build_server(options, session_factory)
    if options.transport == "stdio":
        anyio.run(_until_signal, server.run_stdio_async)
    else:  # uvicorn handles the signals: a graceful shutdown ends the sessions, then the lifespan
        import uvicorn

        # Bound here, so the origin check knows the port (also with --port 0) before the app is made; a port
        # in use is a ConfigError naming --port, as for serve.
        sockets = listen(options.host, options.port)
        try:  # from the bind on: whatever ends this, the sockets are closed
            port = sockets[0].getsockname()[1]
            http = server.streamable_http_app(
                host=options.host,
                session_idle_timeout=options.session_idle,
                max_sessions=options.max_sessions,
                transport_security=_own_origins(options.host, port),
            )
            app = BearerKey(http, options.key or "")
            # the service's bounds: a deadline on a request's headers and body, a cap on open connections
            bounds = uvicorn_options(ConnectionLimits())
            config = uvicorn.Config(app, host=options.host, port=port, log_level="warning", **bounds)
            anyio.run(partial(uvicorn.Server(config).serve, sockets=sockets))
        finally:
            for sock in sockets:
                sock.close()


def _own_origins(host: str, port: int) -> Any:
    """The SDK's DNS-rebinding check on a loopback address, with this server's port: its default allows
    ``http://localhost:*``, so a page another program serves on another local port was let through (the
    bearer key still stopped it: a page's simple request cannot carry one). None elsewhere: as the SDK does."""
    from mcp.server.transport_security import TransportSecuritySettings

    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    names = ("127.0.0.1", "localhost", "[::1]")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{name}:*" for name in names],
        allowed_origins=[f"http://{name}:{port}" for name in names],
    )


async def _until_signal(run: Any) -> None:
    """Await ``run()``; a SIGTERM or SIGINT cancels it, so the connections' exit stacks close the kernels.

    The signal also kills our kernels at once: it comes when the client wants us gone now (an MCP
    client closes stdin, waits 2 s, sends SIGTERM, and SIGKILLs 2 s later), maybe while a kernel is
    still starting or shutting down gracefully after stdin closed; the closes then end promptly and
    remove their runtime dirs, which a SIGKILL would leave behind."""
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
                async for _ in received:
                    from ..kernel.providers.local import kill_local_kernels

                    if killed := kill_local_kernels():
                        log.warning("stopped by a signal: %d kernel(s) killed at once, closing", killed)
                    group.cancel_scope.cancel()
                    return

        group.start_soon(watch)
        await run()
        group.cancel_scope.cancel()
