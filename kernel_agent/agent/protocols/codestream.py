"""A tool call's code as the model writes it: ``CodeStream``.

Owns decoding the ``code`` argument of the one tool call that runs from the
pieces of its raw JSON arguments as they stream (``ToolCallDelta``), so a
front end can show the code before the reply is whole. Partial JSON is read
with jiter's partial mode, which leaves out an escape not yet complete, so
the decoded code only grows. Long arguments are decoded in growing steps
(each read costs their whole length); ``flush`` gives what is left once the
reply has arrived. What the model sends is hostile data: arguments that are
not (yet) an object with a string ``code`` give nothing, and what runs is
still what the protocol parses from the whole reply. Pure.
"""

from __future__ import annotations

import json
from typing import Any

import jiter

from ...model.chat import ToolCallDelta

__all__ = ["CodeStream"]

_EVERY_PIECE = 4096  # arguments up to this length are read at every piece; longer ones at each 1/8 growth


class CodeStream:
    """Feed it a reply's ``ToolCallDelta`` pieces in order; each call returns the code they add.

    ``tool`` is the tool whose ``code`` argument is the code (None: the protocol has none, and nothing
    ever streams). Only the reply's first call streams, as only it runs.
    """

    def __init__(self, tool: str | None) -> None:
        self.tool = tool
        self._arguments: list[str] = []
        self._length = 0
        self._read_at = 0  # the arguments' length when last decoded
        self._code = ""  # the code given out so far
        self._first: int | None = None  # the index of the first call seen

    def feed(self, delta: ToolCallDelta) -> str:
        """The code ``delta`` adds ("" when none yet). Raises nothing."""
        if self.tool is None or not delta.arguments:
            return ""
        if self._first is None:
            self._first = delta.index
        if delta.index != self._first or delta.name != self.tool:
            return ""
        self._arguments.append(delta.arguments)
        self._length += len(delta.arguments)
        if self._length > _EVERY_PIECE and self._length - self._read_at < self._length // 8:
            return ""
        return self._decode()

    def flush(self) -> str:
        """The code not given out yet (the reply is whole). Raises nothing."""
        return self._decode() if self._length > self._read_at else ""

    def _decode(self) -> str:
        self._read_at = self._length
        code = _partial_code("".join(self._arguments))
        if code is None or len(code) <= len(self._code) or not code.startswith(self._code):
            return ""
        added, self._code = code[len(self._code) :], code
        return added


def _partial_code(arguments: str) -> str | None:
    """The ``code`` string of partial JSON ``arguments`` so far, or None."""
    try:
        value: Any = jiter.from_json(arguments.encode("utf-8", "surrogatepass"), partial_mode="trailing-strings")
    except ValueError:  # jiter reads UTF-8 only: a lone surrogate is not; the whole arguments may still be JSON
        try:
            value = json.loads(arguments)
        except ValueError:
            return None
    code = value.get("code") if isinstance(value, dict) else None
    return code if isinstance(code, str) else None
