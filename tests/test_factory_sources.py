"""A kernel factory that brings its own open live sources (a service thread's, a chat conversation's): the
agent uses them, a run cannot add others, and a notebook naming a source they lack is refused by name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kernel_agent.agent.run.live import LiveSources, factory_sources, provided_for
from kernel_agent.agent.run.staging import DataStaging
from kernel_agent.errors import ConfigError, SourceError
from kernel_agent.sources.spec import parse_source


class _Held:
    """A factory's face as ``factory_sources`` reads it: its ``live_sources`` attribute."""

    kernels_apart = False

    def __init__(self, live: LiveSources) -> None:
        self.live_sources = live


def test_a_factorys_sources_are_the_runs_and_a_run_cannot_add_others(tmp_path: Path) -> None:
    live = LiveSources([parse_source("shop=postgresql://ann@db/shop")])
    held = _Held(live)
    assert factory_sources(held) is live and factory_sources(object()) is None
    with pytest.raises(SourceError, match="cannot add 'crm'"):
        factory_sources(held, [parse_source("crm=postgresql://ann@db/crm")])
    assert provided_for(["shop"], live) is live
    with pytest.raises(SourceError, match="'gone' is not one of this agent's sources"):
        provided_for(["shop", "gone"], live)
    with pytest.raises(ConfigError, match="'crm' cannot be added"):
        asyncio.run(DataStaging.check(["crm=postgresql://ann@db/crm"], tmp_path / "ws", live))
    assert not (tmp_path / "ws").exists()  # refused before anything was made
