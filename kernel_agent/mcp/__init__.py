"""kernel-agent as an MCP server: a live, confined kernel as a tool for any MCP client.

``server.py`` holds the tools and transports (the official ``mcp`` SDK),
``workbench.py`` one client's kernel and the notebook of what it ran,
``content.py`` results as MCP content blocks, ``files.py`` the workspace's
files, ``connections.py`` which workbench serves a connection, ``settings.py``
the ``kernel-agent mcp`` options' table. The names here load on first use:
``import kernel_agent`` does not import the ``mcp`` SDK, nor does the command
line reading ``settings.py``; ``Workbench`` (the kernel, notebooks) loads after
the server answers ``initialize``.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .content import ContentLimits
    from .server import McpOptions, build_server, serve
    from .workbench import Workbench

__all__ = ["ContentLimits", "McpOptions", "Workbench", "build_server", "serve"]
_HOMES = {"ContentLimits": "content", "McpOptions": "server", "build_server": "server", "serve": "server"}


def __getattr__(name: str) -> Any:
    if name in _HOMES or name == "Workbench":
        return getattr(import_module(f"{__name__}.{_HOMES.get(name, 'workbench')}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
