"""Shared pytest fixtures."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from IPython.core.interactiveshell import InteractiveShell
from openai_server import OpenAIServer
from ports import closed_port
from postgres import PostgresServer
from traitlets.config import Config

if TYPE_CHECKING:
    from gateway import KernelGateway
    from pgshop import Shop

pytest_plugins = ["leaks", "tiers", "browser", "kernelstart"]


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A started scripted OpenAI-compatible server; ``add()`` replies, read ``requests``."""
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A local port where every connection is refused for the whole test (bound, never listening)."""
    with closed_port() as port:
        yield port


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL cluster for the whole run (initdb and a start cost seconds): each test makes its own
    database on it (``postgres.database(name)``); a test that stops its server starts one of its own."""
    with PostgresServer() as server:
        yield server


@pytest.fixture
def shop(postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shop]:
    """A two-table database whose role's password only ``PGPASSFILE`` holds (``pgshop.py``), for one test."""
    from pgshop import shop_database  # psycopg only for the tests that use it

    with shop_database(postgres, tmp_path, monkeypatch) as made:
        yield made


@pytest.fixture(scope="session")
def kernel_gateway_server() -> Iterator[KernelGateway]:
    """One stock Kernel Gateway for the whole run (its start costs seconds); use ``kernel_gateway``. Whatever
    is left on it at the end fails the run."""
    from gateway import KernelGateway  # after the plugins: it imports ``leaks``, which pytest rewrites

    with KernelGateway() as running:
        yield running


@pytest.fixture
def kernel_gateway(kernel_gateway_server: KernelGateway) -> Iterator[KernelGateway]:
    """The run's Kernel Gateway for one test: a kernel or a kernel's folder the test left on it fails the test,
    as leaving ``with KernelGateway()`` did."""
    yield kernel_gateway_server
    kernel_gateway_server.assert_clean()


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAIServer]:
    """One scripted model server for a whole module (a service's model behind a module-scoped server)."""
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """A fresh IPython shell with the extension loaded, working in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ipython = InteractiveShell.instance(config=config)
    ipython.run_line_magic("load_ext", "kernel_agent")
    yield ipython
    ipython.run_line_magic("unload_ext", "kernel_agent")  # shuts the magic's warm kernel down
    InteractiveShell.clear_instance()


def pytest_configure(config: pytest.Config) -> None:
    """SIGINT back to Python's default when the suite inherited it ignored (a shell starts a background job,
    ``make test &``, with SIGINT ignored, and every child then ignores it too): the tests that send a CLI
    or an owner process SIGINT need it to arrive as Ctrl-C does."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
