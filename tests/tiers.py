"""Pytest plugin: the ``kernel`` marker tells the truth, so ``make test-fast`` (``-m "not kernel and not
browser"``) starts no kernel.

A test without the marker that starts a kernel in this process fails at once, naming the marker: local
kernels (ours and nbclient's) all launch through jupyter_client's ``LocalProvisioner``, and gateway
kernels through ``GatewayProvider.start``. Fixtures of a wider scope run before this guard; a module
whose fixtures start kernels marks the whole module.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pytest
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from kernel_agent.kernel.providers.gateway.provider import GatewayProvider


@pytest.fixture(autouse=True)
def kernels_only_when_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("kernel") is not None:
        return

    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError(f"{request.node.nodeid} starts a kernel: mark it with @pytest.mark.kernel")

    async def refuse_async(*args: Any, **kwargs: Any) -> NoReturn:
        refuse(*args, **kwargs)

    monkeypatch.setattr(LocalProvisioner, "launch_kernel", refuse_async)
    monkeypatch.setattr(GatewayProvider, "start", refuse_async)
