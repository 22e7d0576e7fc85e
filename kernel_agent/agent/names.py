"""The agent's option vocabularies, importable without the agent: protocol names and data-list formats.

Owns the names only (the CLI's choices, the service's ``/config``); what each one does lives in
``protocols/``. Imports nothing, so a front end can offer them without loading the agent.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["DATA_FORMATS", "PROTOCOLS", "DataFormat", "ProtocolName"]

ProtocolName = Literal["tools", "tags", "deepanalyze"]
PROTOCOLS: tuple[str, ...] = get_args(ProtocolName)

DataFormat = Literal["files", "rich"]
DATA_FORMATS: tuple[str, ...] = get_args(DataFormat)
