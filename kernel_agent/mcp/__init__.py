"""kernel-agent as an MCP server: a live, confined kernel as a tool for any MCP client.

``server.py`` holds the tools and transports (the official ``mcp`` SDK),
``workbench.py`` one client's kernel and the notebook of what it ran,
``content.py`` results as MCP content blocks, ``files.py`` the workspace's
files. Importing this package imports the ``mcp`` SDK; ``import kernel_agent``
does not.
"""

from .content import ContentLimits
from .server import McpOptions, build_server, serve
from .workbench import Workbench

__all__ = ["ContentLimits", "McpOptions", "Workbench", "build_server", "serve"]
