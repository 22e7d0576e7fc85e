"""``PythonTool``: the live kernel as a tool for someone else's agent loop (seed 003).

The ``execute_python`` tool schema plus a handler that runs the code in a
persistent kernel session and returns the bounded text a model should see.
Exact computation (string reversal, arithmetic, parsing) without our loop::

    with KernelSession() as session:
        tool = PythonTool(session)
        reply = client.chat.completions.create(model=..., messages=..., tools=[tool.schema])
        for call in reply.choices[0].message.tool_calls or []:
            messages.append(tool.tool_message(call.id, call.function.arguments))
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from ..kernel.interface import Kernel
from ..kernel.session_sync import KernelSession
from ..model.messages import ToolMessage
from ..result import ExecutionResult
from .protocols import EXECUTE_PYTHON_TOOL

__all__ = ["PythonTool"]


class PythonTool:
    """``execute_python(code)`` backed by a live kernel; state persists between calls.

    ``session`` is a started ``KernelSession`` (use ``handle``) or any
    started async ``Kernel``, local or remote (use ``ahandle``). ``timeout``
    bounds each call; ``max_chars`` bounds the text returned.
    """

    name = EXECUTE_PYTHON_TOOL["function"]["name"]
    schema: dict[str, Any] = EXECUTE_PYTHON_TOOL

    def __init__(self, session: KernelSession | Kernel, *, timeout: float | None = 60.0, max_chars: int = 6000) -> None:
        self.session = session
        self._blocking = not inspect.iscoroutinefunction(session.execute)  # which of handle/ahandle fits
        self.timeout = timeout
        self.max_chars = max_chars
        self.last_result: ExecutionResult | None = None

    def handle(self, arguments: str | dict[str, Any]) -> str:
        """Run the call's code in a ``KernelSession``; return the text for the tool message.
        Raises ``TypeError`` for an async kernel (use ``ahandle``)."""
        if not self._blocking:
            raise TypeError("handle() needs a KernelSession; use `await ahandle(...)` with an async Kernel")
        code, problem = _code(arguments)
        if code is None:
            return problem
        return self._text(self.session.execute(code, self.timeout))  # type: ignore[arg-type]  # _blocking: a KernelSession

    async def ahandle(self, arguments: str | dict[str, Any]) -> str:
        """Run the call's code in an async ``Kernel``; return the text for the tool message.
        Raises ``TypeError`` for a ``KernelSession`` (use ``handle``)."""
        if self._blocking:
            raise TypeError("ahandle() needs an async Kernel; use handle(...) with a KernelSession")
        code, problem = _code(arguments)
        if code is None:
            return problem
        return self._text(await self.session.execute(code, self.timeout))  # type: ignore[misc]  # not _blocking: async

    def tool_message(self, tool_call_id: str, arguments: str | dict[str, Any]) -> ToolMessage:
        """``handle`` wrapped as the ``{"role": "tool", ...}`` message OpenAI expects."""
        return {"role": "tool", "tool_call_id": tool_call_id, "content": self.handle(arguments)}

    def _text(self, result: ExecutionResult) -> str:
        self.last_result = result
        return result.to_llm_text(max_chars=self.max_chars)


def _code(arguments: str | dict[str, Any]) -> tuple[str | None, str]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return None, f'[error] the arguments are not valid JSON ({exc}); send {{"code": "..."}}'
    code = arguments.get("code") if isinstance(arguments, dict) else None
    if not isinstance(code, str) or not code.strip():
        return None, '[error] missing "code": send {"code": "<python source>"}'
    return code, ""
