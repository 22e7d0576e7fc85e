"""Which model answers: the ``kernel_agent.models`` entry points, and the rule that reads ``--model``.

An entry point is ``make(name: str, settings: ModelSettings) -> ChatModel``: given the model's name (the
part after the plug-in's prefix) and the settings every model gets, it returns a ``ChatModel``
(``model/chat.py``; not yet connected: the first ``stream`` may connect, ``aclose`` releases it), or
raises ``ConfigError``. Ours, ``openai`` (``llm.openai_model``: any OpenAI-compatible endpoint), is
registered by our pyproject as a third party's is by theirs::

    [project.entry-points."kernel_agent.models"]
    theirs = "their_package.model:make"

The rule (``split_model``): ``--model theirs:x`` asks the plug-in ``theirs`` for ``x`` only when the part
before the first ``:`` is a registered plug-in's name (any case); any other name, ``:`` and ``/``
included (``qwen2.5:7b``, ``ollama/llama3:8b``, ``gpt-4o``), is the OpenAI-compatible endpoint's, whole.
So a plain endpoint model name keeps working unless a plug-in is installed under the very name of its
prefix. A notebook records the model's ``name``, and ``resume`` asks for it again by that name: a
plug-in's model names itself with its prefix (``theirs:x``) to be found again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..plugins import Registry
from .chat import ChatModel

__all__ = [
    "DEFAULT_MODEL_PLUGIN",
    "MODEL_GROUP",
    "MODEL_REGISTRY",
    "ModelFactory",
    "ModelSettings",
    "make_model",
    "model_names",
    "split_model",
]

MODEL_GROUP = "kernel_agent.models"
DEFAULT_MODEL_PLUGIN = "openai"  # a name without a registered prefix goes to the OpenAI-compatible client
MODEL_REGISTRY: Registry[ChatModel] = Registry(MODEL_GROUP, "model plug-in", ChatModel, (DEFAULT_MODEL_PLUGIN,))


@dataclass(frozen=True)
class ModelSettings:
    """What every model is made with; a plug-in uses what applies to it. ``api_key`` is a secret: never
    logged or shown (it is left out of the repr). ``options`` are client-specific keywords (ours:
    ``max_retries``, ``backoff``, ``extra_body``); ``request_timeout`` None means the client's default."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    temperature: float | None = None
    top_p: float | None = None
    stream: bool = True
    request_timeout: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)


class ModelFactory(Protocol):
    """A ``kernel_agent.models`` entry point."""

    def __call__(self, name: str, settings: ModelSettings, /) -> ChatModel: ...


def model_names() -> tuple[str, ...]:
    """Every installed model plug-in's name (the prefixes ``--model`` knows): ours first."""
    return MODEL_REGISTRY.names()


def split_model(model: str) -> tuple[str, str]:
    """``(plug-in, name)`` for a ``--model`` value, by the rule in this module's docstring."""
    prefix, colon, rest = model.partition(":")
    if colon and rest and prefix.strip() and prefix in MODEL_REGISTRY:
        return prefix.strip().lower(), rest
    return DEFAULT_MODEL_PLUGIN, model


def make_model(model: str, settings: ModelSettings) -> ChatModel:
    """The ``ChatModel`` for ``model`` (a ``--model`` value), made by its plug-in. Raises ``ConfigError`` when
    the plug-in cannot be loaded, refuses the settings, or makes something that is not a ``ChatModel``."""
    plugin, name = split_model(model)
    return MODEL_REGISTRY.make(plugin, name, settings)
