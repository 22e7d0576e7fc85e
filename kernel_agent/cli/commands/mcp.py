"""``kernel-agent mcp``: a live kernel served over the Model Context Protocol, its options the rows of
``mcp/settings.MCP`` and the agent's kernel rows (``--timeout`` among them)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ...errors import ConfigError
from ...mcp.settings import MCP
from ..drive import EXIT_USAGE
from ..edge import Failure, edge
from ..options import kernel_arguments, kernel_options, table_options, timeout_option

__all__ = ["mcp"]


@click.command()
@table_options(MCP["transport"], MCP["workspace"], MCP["data"])
@timeout_option
@table_options(
    *[row for row in MCP.values() if row.part == "mcp" and row.name not in ("transport", "workspace", "data")]
)
@kernel_options
def mcp(
    transport: str,
    workspace: str | None,
    data: tuple[str, ...],
    host: str,
    port: int,
    key_file: str | None,
    allow_remote: bool,
    session_idle: float,
    max_sessions: int,
    **options: Any,
) -> None:
    """Serve a live kernel over the Model Context Protocol (Claude Desktop, IDE agents, any MCP client).

    Tools: execute_python, interrupt, restart, list_variables, describe_data, list_files, read_file,
    write_file, export_notebook. Every execution is recorded in WORKSPACE.ipynb (beside the workspace) as it happens.
    """
    from ...agent.config import AgentConfig
    from ...kernel.workspace import default_workspace

    root = Path(workspace) if workspace else default_workspace("mcp")
    with edge():
        from ...agent.run.live import split_data
        from ...mcp.server import McpOptions, serve

        files, sources = split_data(data)  # a source with a password refused here, never echoed
        missing = [str(name) for name in files if not Path(name).is_file()]
        if missing:
            raise Failure(f"no such data file: {', '.join(missing)}", EXIT_USAGE)

        # The agent's own kernel options: local with its limits, or on the gateway (--gateway...).
        config = AgentConfig.resolve(**kernel_arguments(options), exec_timeout=options["exec_timeout"])
        if sources and config.kernel.provider_name() != "local":
            raise ConfigError("a live data source needs a kernel on this machine (a gateway's cannot reach its broker)")
        key = _mcp_key(key_file) if transport == "http" else None
        mcp_options = McpOptions(
            workspace=root.resolve(),
            data=tuple(str(Path(d).resolve()) for d in files),
            sources=sources,
            exec_timeout=config.kernel.exec_timeout or McpOptions.exec_timeout,
            transport="http" if transport == "http" else "stdio",
            host=host,
            port=port,
            key=key,
            allow_remote=allow_remote,
            session_idle=session_idle,
            max_sessions=max_sessions,
        )
        kernel_options = config.kernel.session_options()
        if config.kernel.name and config.kernel.provider_name() == "local":
            _require_python_kernel(
                config.kernel.name,
                config.kernel.python,
                "the MCP server's tools (execute_python, list_variables, describe_data) are Python's",
            )
        limits = kernel_options.get("limits")
        if limits is not None and limits.sandbox == "off":  # stderr: on stdio, stdout is the protocol
            click.echo(f"Warning: the kernel runs unconfined (sandbox off): {limits.describe()}", err=True)
        if transport == "http":  # an operator's view of the sessions: how many are live, as they open and end
            from ..logs import show_info_from

            show_info_from("kernel_agent.mcp.connections")
        serve(mcp_options, _session_builder(kernel_options))


def _session_builder(kernel_options: dict[str, Any]) -> Callable[..., Any]:
    """A connection's kernel session with ``kernel_options`` (and a build's own, ``sockets``); the kernel modules
    load on the first build, after the MCP server is up (it answers ``initialize`` without them)."""

    def build(workspace: Path, /, **more: Any) -> Any:
        from ...kernel.session import AsyncKernelSession

        return AsyncKernelSession(workspace, **kernel_options, **more)

    return build


def _require_python_kernel(kernel: str, python: str | None, why: str) -> None:
    """A ``ConfigError`` unless ``kernel`` (an installed kernelspec) runs Python: ``why`` says what needs it."""
    from ...kernel.kernelspec import choose_kernel

    choice = choose_kernel(kernel, python)
    if choice.language.lower() != "python":
        raise ConfigError(f"kernel {kernel!r} runs {choice.language}, and {why}: give a Python kernel")


def _mcp_key(key_file: str | None) -> str:
    """The MCP server's HTTP key: from ``key_file``, else the environment, else a new one printed once."""
    import secrets

    from ...mcp.auth import KEY_VARIABLE
    from ...redact import read_secret

    if key_file:
        return read_secret(key_file)
    if os.environ.get(KEY_VARIABLE, "").strip():
        return os.environ[KEY_VARIABLE].strip()
    key = secrets.token_urlsafe(32)
    click.echo(f"MCP key for this server (clients send Authorization: Bearer KEY): {key}", err=True)
    return key
