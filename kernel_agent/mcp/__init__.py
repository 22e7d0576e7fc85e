"""kernel-agent as an MCP server: a live, confined kernel as a tool for any MCP client.

``server.py`` holds the tools and transports (the official ``mcp`` SDK),
``workbench.py`` one client's kernel and the notebook of what it ran,
``content.py`` results as MCP content blocks, ``files.py`` the workspace's
files, ``connections.py`` which workbench serves a connection. Importing this
package imports the ``mcp`` SDK; ``import kernel_agent`` does not. ``Workbench``
(the kernel, notebooks) loads on first use, so the server answers ``initialize``
without it.
"""

from typing import TYPE_CHECKING, Any

from .content import ContentLimits
from .server import McpOptions, build_server, serve

if TYPE_CHECKING:
    from .workbench import Workbench

__all__ = ["ContentLimits", "McpOptions", "Workbench", "build_server", "serve"]


def __getattr__(name: str) -> Any:
    if name == "Workbench":
        from .workbench import Workbench

        return Workbench
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
