"""The ``kernel-agent`` commands, a module each (``run``, ``resume``, ``plan``, ``demo``, ``replay``, ``show``,
``serve``, ``mcp``, ``kernelspec``); ``cli/app.py`` assembles them into the group, with ``keys`` (``cli/keys.py``)
and ``eval`` (``cli/eval.py``). ``common.py`` holds what several share: the output options, the renderer, the
drive of one run, the epilog. Each command's own options are rows of a table (``agent/settings.Table``), its
module's, the service's (``server/config.SERVE``) or the MCP server's (``mcp/settings.MCP``); the agent's are
``cli/options.py``'s. At import a command loads click and its rows only: the agent, kernels, notebooks, rich
and the servers load inside the command that uses them (``tests/test_startup_imports.py``).
"""
