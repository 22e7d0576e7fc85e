"""The agent's option vocabularies, importable without the agent: protocol names and data-list formats.

Owns the names only (the CLI's choices, the service's ``/config``); what each one does lives in
``protocols/``. Imports nothing, so a front end can offer them without loading the agent.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["DATA_FORMATS", "PROTOCOLS", "DataFormat", "ProtocolName", "protocol_for_model"]

ProtocolName = Literal["tools", "tags", "deepanalyze"]
PROTOCOLS: tuple[str, ...] = get_args(ProtocolName)

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
