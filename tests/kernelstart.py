"""Pytest plugin: which way the suite's local kernels start, so the confinement batteries run on both paths.

By default as the product starts them: forked from a warmed template where their kind has one
(``LocalProvider(template=True)``). ``KERNEL_AGENT_TEST_TEMPLATE=0`` starts every one cold: in this process each
``LocalProvider`` is made with ``template=False`` (whatever its caller passed: the suite's sessions rarely say),
and the processes a test starts (the CLI, the service, the MCP server) get ``KERNEL_AGENT_TEMPLATE=0``, the
``template`` setting. A cold run fails a test at whose end a kernel template runs below this process (in it, or
in a server it started and still runs), so it cannot pass on the forked path by accident; a process that started
one and has ended is not seen. The header of the run says which path it took.

The batteries' second run, cold (the whole suite has run forked; ``test_template*.py`` test forked kernels only)::

    KERNEL_AGENT_TEST_TEMPLATE=0 python -m pytest -q -n 2 --dist loadfile tests/test_hostile.py \
        tests/test_boundary.py tests/test_faults.py tests/test_seccomp.py tests/test_kernel_sockets.py \
        tests/test_secrets.py tests/test_host_python.py tests/test_hostile_records.py
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from kernel_agent.kernel.providers.local import LocalProvider
from kernel_agent.kernel.sandbox.template import TEMPLATE_MODULE

VARIABLE = "KERNEL_AGENT_TEST_TEMPLATE"
SETTING = "KERNEL_AGENT_TEMPLATE"  # the template setting's variable, read by every front end
_COLD = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    value = os.environ.get(VARIABLE, "1")
    if value not in ("0", "1"):
        raise pytest.UsageError(f"{VARIABLE} is 1 (kernels forked from a template where they can be) or 0 (cold)")
    config.stash[_COLD] = value == "0"
    if value == "0":
        _start_cold()
        os.environ[SETTING] = "0"  # for the processes module-wide fixtures start, before any test's own


def pytest_report_header(config: pytest.Config) -> str:
    if config.stash[_COLD]:
        return f"kernels: started cold ({VARIABLE}=0)"
    return f"kernels: forked from a warmed template where their kind has one ({VARIABLE}=0 starts them cold)"


def _start_cold() -> None:
    made = LocalProvider.__init__

    @functools.wraps(made)
    def cold(self: LocalProvider, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.template = False

    LocalProvider.__init__ = cold  # type: ignore[method-assign]


def templates_below() -> list[int]:
    """Kernel templates (and the kernels they forked) running below this process, the processes it started included."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if TEMPLATE_MODULE in process.cmdline():
                found.append(process.pid)
        except psutil.Error:  # ended meanwhile
            continue
    return found


@pytest.fixture(autouse=True)
def kernel_start_path(
    request: pytest.FixtureRequest, clean_environ: None, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """In a cold run: the setting for the processes this test starts (``clean_environ`` took it out), and no
    template below this process when the test ends."""
    if not request.config.stash[_COLD]:
        yield
        return
    monkeypatch.setenv(SETTING, "0")
    yield
    running = templates_below()
    assert not running, f"{request.node.nodeid}: a kernel template runs in a cold run ({VARIABLE}=0): {running}"
