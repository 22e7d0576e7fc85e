"""Shared pytest fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest_plugins = ["leaks", "browser"]

from openai_server import OpenAIServer


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A started scripted OpenAI-compatible server; ``add()`` replies, read ``requests``."""
    with OpenAIServer() as server:
        yield server
