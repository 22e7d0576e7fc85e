"""The MCP server's settings: ``MCP``, one row per ``kernel-agent mcp`` option of its own.

A table of the agent settings' rows (``agent/settings.py``): the command's options are made from it
(``cli/options.table_options``), ``McpOptions``' fields take their names, defaults and checks from its rows
(``server.py``), and the docs' configuration page lists them. Seconds per execution are the agent's
``exec_timeout`` (``--timeout``), the kernel's rows the agent's too. Light: the command line imports it
without the MCP SDK.
"""

from __future__ import annotations

from ..agent.settings import Table, option
from .auth import KEY_VARIABLE

__all__ = ["MCP"]

# fmt: off
MCP = Table(
    option(
        "mcp", "transport", str, "stdio",
        "stdio for a client that starts the server; http for streamable HTTP at http://HOST:PORT/mcp",
        choices=lambda: ("stdio", "http"),
    ),
    option(
        "mcp", "workspace", str, None, "The kernel's folder; HTTP sessions get a subfolder each", short="-w",
        metavar="DIR", optional=True, shown_default="./agent-runs/<time>-mcp",
    ),
    option(
        "mcp", "data", str, (),
        "A data file copied into the workspace and preloaded, or a live database, [NAME=]postgresql://USER@HOST/DB "
        "(no password: ~/.pgpass, PGPASSFILE or a pg_service.conf service), queried with sql() (repeatable)",
        short="-d", metavar="FILE|URI", multiple=True,
    ),
    option("mcp", "host", str, "127.0.0.1", "HTTP: the address to listen on"),
    option("mcp", "port", int, 8000, "HTTP: the port", minimum=0, maximum=65535),
    option(
        "mcp", "key_file", str, None, "HTTP: the bearer key clients must send", metavar="FILE", optional=True,
        shown_default=f"${KEY_VARIABLE}; else one is made and printed once on stderr",
    ),
    option(
        "mcp", "allow_remote", bool, False,
        "HTTP: listen on an address other than loopback (only with TLS and access control in front)",
    ),
    option(
        "mcp", "session_idle", float, 60.0,
        "HTTP: close a session (and its kernel) after S seconds with no request in flight and no open stream",
        metavar="S", minimum=0, positive=True, maximum=7 * 24 * 3600,
    ),
    option(
        "mcp", "max_sessions", int, 8, "HTTP: sessions open at once; one more is refused (503) until one ends",
        metavar="N", minimum=1,
    ),
)
# fmt: on
