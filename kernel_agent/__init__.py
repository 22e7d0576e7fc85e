"""kernel-agent: an LLM analyses data in rounds against a live Jupyter kernel.

Public API (imported lazily, so ``import kernel_agent`` stays light and the
kernel's launcher does not load the agent's dependencies)::

    KernelSession / AsyncKernelSession   one live kernel: execute, interrupt, restart
    ExecutionResult, ErrorInfo           what one execution gave back
    Agent / AsyncAgent, AgentConfig      the analysis loop over an OpenAI-compatible model
    ChatModel, ModelReply                the model seam: plug in any model
    SessionState                         a session's lifecycle state
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
    from .agent.config import AgentConfig
    from .agent.run.agent import AsyncAgent
    from .agent.sync import Agent
    from .agent.tool import PythonTool
    from .errors import (
        ConfigError,
        ContextLengthError,
        DataFileError,
        ExecutionError,
        ExtraMissingError,
        KernelAgentError,
        KernelChoiceError,
        KernelError,
        KernelStartError,
        ModelError,
        ModelTimeoutError,
        ModelUnreachableError,
        NotebookError,
        PlanError,
        QueryError,
        SandboxUnavailableError,
        ServiceError,
        SessionClosedError,
        SourceError,
        StorageError,
        WorkspaceFileError,
    )
    from .events import Event
    from .kernel.outputs import OutputCaps
    from .kernel.sandbox.limits import Limits
    from .kernel.session import AsyncKernelSession, SessionState
    from .kernel.session_sync import KernelSession
    from .model.chat import ChatModel, ModelReply
    from .notebook.replay import ReplayReport, replay
    from .records import Artifact, Round, Run, Usage
    from .result import ErrorInfo, ExecutionResult

_EXPORTS = {
    "AsyncKernelSession": "kernel.session",
    "KernelSession": "kernel.session_sync",
    "ExecutionResult": "result",
    "ErrorInfo": "result",
    "AsyncAgent": "agent.run.agent",
    "Agent": "agent.sync",
    "AgentConfig": "agent.config",
    "Run": "records",
    "Round": "records",
    "Usage": "records",
    "Artifact": "records",
    "Event": "events",
    "ChatModel": "model.chat",
    "ModelReply": "model.chat",
    "SessionState": "kernel.session",
    "PythonTool": "agent.tool",
    "replay": "notebook.replay",
    "ReplayReport": "notebook.replay",
    "Limits": "kernel.sandbox.limits",
    "OutputCaps": "kernel.outputs",
    "KernelAgentError": "errors",
    "ConfigError": "errors",
    "DataFileError": "errors",
    "WorkspaceFileError": "errors",
    "ExtraMissingError": "errors",
    "SourceError": "errors",
    "StorageError": "errors",
    "KernelError": "errors",
    "KernelStartError": "errors",
    "KernelChoiceError": "errors",
    "SessionClosedError": "errors",
    "SandboxUnavailableError": "errors",
    "ModelError": "errors",
    "ModelUnreachableError": "errors",
    "ModelTimeoutError": "errors",
    "ContextLengthError": "errors",
    "ExecutionError": "errors",
    "NotebookError": "errors",
    "PlanError": "errors",
    "QueryError": "errors",
    "ServiceError": "errors",
}

# Spelt out, not built from _EXPORTS: type checkers read a literal list as what the package exports.
__all__ = [
    "__version__",
    "AsyncKernelSession",
    "KernelSession",
    "ExecutionResult",
    "ErrorInfo",
    "AsyncAgent",
    "Agent",
    "AgentConfig",
    "Run",
    "Round",
    "Usage",
    "Artifact",
    "Event",
    "ChatModel",
    "ModelReply",
    "SessionState",
    "PythonTool",
    "replay",
    "ReplayReport",
    "Limits",
    "OutputCaps",
    "KernelAgentError",
    "ConfigError",
    "DataFileError",
    "WorkspaceFileError",
    "ExtraMissingError",
    "SourceError",
    "StorageError",
    "KernelError",
    "KernelStartError",
    "KernelChoiceError",
    "SessionClosedError",
    "SandboxUnavailableError",
    "ModelError",
    "ModelUnreachableError",
    "ModelTimeoutError",
    "ContextLengthError",
    "ExecutionError",
    "NotebookError",
    "PlanError",
    "QueryError",
    "ServiceError",
]


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
    from .magic.cell import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext kernel_agent``: shut the magic's warm kernel down."""
    from .magic.cell import unload_ipython_extension as unload

    unload(ipython)
