"""kernel-agent: an LLM analyses data in rounds against a live Jupyter kernel.

Public API (imported lazily, so ``import kernel_agent`` stays light and the
kernel's launcher does not load the agent's dependencies)::

    KernelSession / AsyncKernelSession   one live kernel: execute, interrupt, restart
    ExecutionResult, ErrorInfo           what one execution gave back
    Agent / AsyncAgent, AgentConfig      the analysis loop over an OpenAI-compatible model
    Event                                the typed events of ``Agent.stream`` (``kernel_agent.events``)
    Run, Round, Usage, Artifact          the record of a run
    PythonTool                           the live kernel as a tool for other agent loops
    replay, ReplayReport                 re-execute an exported notebook and compare outputs
    Limits, OutputCaps                   confinement and output caps of a kernel
    KernelAgentError and subclasses      the one exception tree (``kernel_agent.errors``)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .agent import AsyncAgent
    from .agent_sync import Agent
    from .config import AgentConfig
    from .errors import (
        ConfigError,
        ContextLengthError,
        DataFileError,
        ExecutionError,
        KernelAgentError,
        KernelError,
        KernelStartError,
        ModelError,
        ModelUnreachableError,
        NotebookError,
        SandboxUnavailableError,
        SessionClosedError,
    )
    from .events import Event
    from .limits import Limits
    from .outputs import OutputCaps
    from .replay import ReplayReport, replay
    from .result import ErrorInfo, ExecutionResult
    from .run import Artifact, Round, Run, Usage
    from .session import AsyncKernelSession
    from .session_sync import KernelSession
    from .tool import PythonTool

_EXPORTS = {
    "AsyncKernelSession": "session",
    "KernelSession": "session_sync",
    "ExecutionResult": "result",
    "ErrorInfo": "result",
    "AsyncAgent": "agent",
    "Agent": "agent_sync",
    "AgentConfig": "config",
    "Run": "run",
    "Round": "run",
    "Usage": "run",
    "Artifact": "run",
    "Event": "events",
    "PythonTool": "tool",
    "replay": "replay",
    "ReplayReport": "replay",
    "Limits": "limits",
    "OutputCaps": "outputs",
    "KernelAgentError": "errors",
    "ConfigError": "errors",
    "DataFileError": "errors",
    "KernelError": "errors",
    "KernelStartError": "errors",
    "SessionClosedError": "errors",
    "SandboxUnavailableError": "errors",
    "ModelError": "errors",
    "ModelUnreachableError": "errors",
    "ContextLengthError": "errors",
    "ExecutionError": "errors",
    "NotebookError": "errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kernel_agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext kernel_agent``: register the ``%%agent`` magic."""
    from .magic import load_ipython_extension as load

    load(ipython)
