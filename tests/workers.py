"""Pytest plugin: how the suite splits over pytest-xdist workers (``make test PYTEST_WORKERS=2``).

Each module is one unit of work (``--dist loadgroup`` with an ``xdist_group`` per module): its tests run
on one worker, in their order, so a module-scoped server (a JupyterLab, an MCP server, a model server)
starts once, as in a serial run. Units are handed out in collection order, and the browser tests come
last (``browser.py``): a worker that has opened its chromium gets no other test afterwards (Playwright's
sync API leaves its event loop marked running, which breaks ``asyncio.run``), while the two workers may
run different browser modules side by side, each with its own chromium. Each worker has its own temp
root (``leaks.py``), its own Kernel Gateway and PostgreSQL cluster (session fixtures), and every server a
test starts binds port 0 (``ports.py``).
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):  # -p no:xdist: the marker is not registered
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
