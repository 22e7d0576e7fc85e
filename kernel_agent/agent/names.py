"""The agent's option vocabularies, importable without the agent: protocol names and data-list formats.

Owns the names only (the CLI's choices, the magic's, the service's ``/config``); what each one does lives
in ``protocols/``. Imports only ``plugins`` (and the errors), so a front end can offer them without loading the agent.

Protocols are found through the ``kernel_agent.protocols`` entry-point group (``PROTOCOL_REGISTRY``,
``protocol_names``; ``plugins.py`` reads it): ours (``PROTOCOLS``) are registered there by our pyproject,
a third party's by its own, e.g.::

    [project.entry-points."kernel_agent.protocols"]
    theirs = "their_package.protocol:make"   # make(ProtocolSettings) -> Protocol
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args

from ..plugins import Registry

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "DATA_FORMATS",
    "PROTOCOLS",
    "PROTOCOL_GROUP",
    "PROTOCOL_REGISTRY",
    "DataFormat",
    "ProtocolName",
    "protocol_entry_points",
    "protocol_for_model",
    "protocol_names",
]

ProtocolName = Literal["tools", "tags", "deepanalyze"]  # ours; any registered name is a protocol
PROTOCOLS: tuple[str, ...] = get_args(ProtocolName)
PROTOCOL_GROUP = "kernel_agent.protocols"
# what a protocol is, named: importing it here would load the agent into every front end at import (and
# ``Registry[Protocol]`` would import it for the type alone: protocols/ imports these names)
PROTOCOL_REGISTRY: Registry[Any] = Registry(
    PROTOCOL_GROUP, "protocol", "kernel_agent.agent.protocols.base:Protocol", PROTOCOLS
)


def protocol_entry_points() -> dict[str, EntryPoint]:
    """The installed protocols by name (lower case), as their entry points say; read once a process."""
    return PROTOCOL_REGISTRY.entry_points()


def protocol_names() -> tuple[str, ...]:
    """Every installed protocol's name: ours first, then the others in order."""
    return PROTOCOL_REGISTRY.names()


DEFAULT_PROTOCOL: ProtocolName = "tools"


def protocol_for_model(model: str | None) -> tuple[ProtocolName, str]:
    """The protocol a model speaks when none is asked for, and why: DeepAnalyze's own models
    (``DeepAnalyze-8B``, any case, with or without an org prefix) speak ``deepanalyze``; any other
    model the default, ``tools``."""
    name = (model or "").strip().rsplit("/", 1)[-1].lower()
    if name.startswith("deepanalyze"):
        return "deepanalyze", f"the model {model} is DeepAnalyze's"
    return DEFAULT_PROTOCOL, "the default"


DataFormat = Literal["files", "rich"]
DATA_FORMATS: tuple[str, ...] = get_args(DataFormat)
