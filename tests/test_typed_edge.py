"""The typed public edge: ``Agent`` and ``AsyncAgent`` take the same explicit arguments, one per setting."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from kernel_agent import Agent, AsyncAgent
from kernel_agent.agent.settings import SETTINGS
from kernel_agent.model.scripted import ScriptedChatModel

# Not settings: what the agent is given besides them.
_WIRING = {"chat_model", "session_factory", "session_options", "model_options"}


def _public(cls: type) -> dict[str, Callable[..., Any]]:
    return {name: value for name, value in vars(cls).items() if not name.startswith("_") and callable(value)}


def _shown(signature: inspect.Signature) -> list[tuple[str, Any, Any, Any]]:
    """A signature as comparable values: each parameter's name, kind, annotation and default."""
    return [(p.name, p.kind, p.annotation, p.default) for p in signature.parameters.values()]


def test_the_sync_and_async_agents_take_the_same_arguments() -> None:
    assert _shown(inspect.signature(Agent.__init__)) == _shown(inspect.signature(AsyncAgent.__init__))


@pytest.mark.parametrize("name", sorted(_public(Agent)))
def test_each_sync_method_takes_what_its_async_method_takes(name: str) -> None:
    sync, asynchronous = inspect.signature(_public(Agent)[name]), inspect.signature(_public(AsyncAgent)[name])
    assert _shown(sync) == _shown(asynchronous)
    awaited = {"Run": "Run", "PlanFinished": "PlanFinished", "None": "None"}
    iterated = {
        "AsyncGenerator[Event, None]": "Generator[Event, None, None]",
        "AsyncIterator[PlanEvent | Event]": "Generator[PlanEvent | Event, None, None]",
    }
    assert {**awaited, **iterated}[asynchronous.return_annotation] == sync.return_annotation


def test_the_sync_agent_has_every_public_method_of_the_async_one() -> None:
    skipped = {"new_session"}  # the kernels' factory, used on the async agent's own loop
    assert set(_public(Agent)) == set(_public(AsyncAgent)) - skipped


def test_every_setting_is_a_keyword_argument_and_nothing_else_is() -> None:
    parameters = inspect.signature(AsyncAgent.__init__).parameters
    assert set(parameters) - {"self"} - _WIRING == set(SETTINGS)
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def test_each_keyword_argument_reaches_its_setting() -> None:
    values: dict[str, Any] = {
        "stuck_after": 5,
        "disk_quota_mb": 7,
        "memory_mb": 512,
        "data_format": "rich",
        "rebuild": False,
    }
    config = AsyncAgent(chat_model=ScriptedChatModel([]), **values).config.keywords()
    assert {name: config[name] for name in values} == values


def test_an_unknown_argument_is_a_type_error_as_python_gives() -> None:
    misspelt: dict[str, Any] = {"stuck_aftr": 5}
    with pytest.raises(TypeError, match="stuck_aftr"):
        AsyncAgent(chat_model=ScriptedChatModel([]), **misspelt)
    with pytest.raises(TypeError, match="stuck_aftr"):
        Agent(chat_model=ScriptedChatModel([]), **misspelt)
