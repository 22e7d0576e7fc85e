"""Pytest plugin: the ``kernel`` and ``postgresql`` markers tell the truth, so ``make test-fast`` (``-m "not
kernel and not browser and not postgresql"``) starts no kernel and no PostgreSQL cluster.

A test without the marker that starts a kernel in this process fails, naming the marker (also when the
code under test took the refused start as data, as the service does with a kernel that will not start): local
kernels (ours and nbclient's) all launch through jupyter_client's ``LocalProvisioner``, and gateway
kernels through ``GatewayProvider.start``. Fixtures of a wider scope run before this guard; a module
whose fixtures start kernels marks the whole module. Likewise a test that starts a cluster
(``postgres.PostgresServer``) without the ``postgresql`` marker fails; a test that asks for a wider-scoped
``postgres`` fixture by name must carry the marker too (checked at collection).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

import pytest
from jupyter_client.provisioning.local_provisioner import LocalProvisioner
from postgres import PostgresServer

from kernel_agent.kernel.providers.gateway.provider import GatewayProvider


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unmarked = [
        item.nodeid
        for item in items
        if "postgres" in getattr(item, "fixturenames", ()) and item.get_closest_marker("postgresql") is None
    ]
    if unmarked:
        raise pytest.UsageError(f"these tests start PostgreSQL: mark them with @pytest.mark.postgresql: {unmarked}")


@pytest.fixture(autouse=True)
def postgres_only_when_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if request.node.get_closest_marker("postgresql") is not None:
        yield
        return
    message = f"{request.node.nodeid} starts PostgreSQL: mark it with @pytest.mark.postgresql"

    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise AssertionError(message)

    monkeypatch.setattr(PostgresServer, "__init__", refuse)
    yield


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
