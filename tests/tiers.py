"""Pytest plugin: the ``kernel`` marker tells the truth, so ``make test-fast`` (``-m "not kernel and not
browser"``) starts no kernel.

A test without the marker that starts a kernel in this process fails, naming the marker (also when the
code under test took the refused start as data, as the service does with a kernel that will not start): local
kernels (ours and nbclient's) all launch through jupyter_client's ``LocalProvisioner``, and gateway
kernels through ``GatewayProvider.start``. Fixtures of a wider scope run before this guard; a module
whose fixtures start kernels marks the whole module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from kernel_agent.kernel.providers.gateway.provider import GatewayProvider


@pytest.fixture(autouse=True)
def kernels_only_when_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("kernel") is not None:
        yield
        return
    message = f"{request.node.nodeid} starts a kernel: mark it with @pytest.mark.kernel"
    refused: list[str] = []

    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        refused.append(message)
        raise AssertionError(message)

    async def refuse_async(*args: Any, **kwargs: Any) -> NoReturn:
        refuse(*args, **kwargs)

    monkeypatch.setattr(LocalProvisioner, "launch_kernel", refuse_async)
    monkeypatch.setattr(GatewayProvider, "start", refuse_async)
    yield
    assert not refused, message
