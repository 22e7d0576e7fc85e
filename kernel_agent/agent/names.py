"""The agent's option vocabularies, importable without the agent: protocol names and data-list formats.

Owns the names only (the CLI's choices, the magic's, the service's ``/config``); what each one does lives
in ``protocols/``. Imports nothing of ours, so a front end can offer them without loading the agent.

Protocols are found through the ``kernel_agent.protocols`` entry-point group (``protocol_names``): ours
(``PROTOCOLS``) are registered there by our pyproject, a third party's by its own, e.g.::

    [project.entry-points."kernel_agent.protocols"]
    theirs = "their_package.protocol:make"   # make(ProtocolSettings) -> Protocol
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Literal, get_args

__all__ = [
    "DATA_FORMATS",
    "PROTOCOLS",
    "PROTOCOL_GROUP",
    "DataFormat",
    "ProtocolName",
    "protocol_entry_points",
    "protocol_for_model",
    "protocol_names",
]

ProtocolName = Literal["tools", "tags", "deepanalyze"]  # ours; any registered name is a protocol
PROTOCOLS: tuple[str, ...] = get_args(ProtocolName)
PROTOCOL_GROUP = "kernel_agent.protocols"


@cache
def protocol_entry_points() -> dict[str, EntryPoint]:
    """The installed protocols by name (lower case), as their entry points say; read once a process."""
    return {entry.name.strip().lower(): entry for entry in entry_points(group=PROTOCOL_GROUP)}


def protocol_names() -> tuple[str, ...]:
    """Every installed protocol's name: ours first, then the others in order."""
    found = protocol_entry_points()
    return (*(name for name in PROTOCOLS if name in found), *sorted(name for name in found if name not in PROTOCOLS))


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
