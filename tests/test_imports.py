"""The public API: ``import kernel_agent`` stays light, and ``__all__`` is exactly the documented names."""

from __future__ import annotations

import json
import subprocess
import sys

import kernel_agent
from kernel_agent import errors

FRONT_END_LIBRARIES = ("click", "rich", "IPython", "openai")

DOCUMENTED = {
    "__version__",
    "KernelSession", "AsyncKernelSession",  # one live kernel
    "ExecutionResult", "ErrorInfo",  # what one execution gave back
    "Agent", "AsyncAgent", "AgentConfig", "Event",  # the analysis loop, its settings and events
    "Run", "Round", "Usage", "Artifact",  # the record of a run
    "PythonTool",
    "replay", "ReplayReport",
    "Limits", "OutputCaps",
    *errors.__all__,
}


def imported_by(statement: str) -> list[str]:
    """Which of the front-end libraries a fresh interpreter has loaded after ``statement``."""
    probe = f"import sys\n{statement}\nprint(__import__('json').dumps([m for m in {FRONT_END_LIBRARIES!r} if m in sys.modules]))"
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(output)


def test_import_kernel_agent_loads_no_front_end_or_sdk() -> None:
    assert imported_by("import kernel_agent") == []


def test_the_cli_loads_neither_ipython_nor_the_sdk() -> None:
    assert imported_by("import kernel_agent.cli") == ["click", "rich"]


def test_all_is_the_documented_api_and_every_name_resolves() -> None:
    assert set(kernel_agent.__all__) == DOCUMENTED
    assert len(kernel_agent.__all__) == len(set(kernel_agent.__all__))
    for name in kernel_agent.__all__:
        assert getattr(kernel_agent, name) is not None, name
    assert sorted(dir(kernel_agent)) == sorted(kernel_agent.__all__)


def test_every_error_is_a_kernel_agent_error() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(kernel_agent, name), kernel_agent.KernelAgentError)
