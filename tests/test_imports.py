"""The public API: ``import kernel_agent`` stays light, and ``__all__`` is exactly the documented names."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import kernel_agent
from kernel_agent import errors

FRONT_END_LIBRARIES = ("click", "rich", "IPython", "openai", "mcp")

DOCUMENTED = {
    "__version__",
    "KernelSession", "AsyncKernelSession",  # one live kernel
    "ExecutionResult", "ErrorInfo",  # what one execution gave back
    "Agent", "AsyncAgent", "AgentConfig", "Event",  # the analysis loop, its settings and events
    "Run", "Round", "Usage", "Artifact",  # the record of a run
    "PythonTool",
    "replay", "ReplayReport",
    "Limits", "OutputCaps",
    "ChatModel", "ModelReply", "SessionState",  # public in practice: plug in a model, read a session's state
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


PACKAGE = Path(kernel_agent.__file__).parent
# What each layer may not import: a lower layer never imports a higher one.
FORBIDDEN = {
    "kernel": ("model", "agent", "notebook", "plan", "cli", "magic", "server", "mcp", "web"),
    "model": ("kernel", "agent", "notebook", "plan", "cli", "magic", "server", "mcp", "web"),
    "notebook": ("agent", "plan", "cli", "magic", "server", "mcp", "web"),
    "agent": ("cli", "magic", "server", "mcp", "web"),
}


def internal_imports(path: Path) -> set[str]:
    """The kernel_agent subpackages/modules (first component) a file imports, relative or absolute."""
    module = path.relative_to(PACKAGE.parent).with_suffix("").parts
    package = module[:-1] if module[-1] != "__init__" else module[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = [*base, *(node.module.split(".") if node.module else [])]
                names = [target] if node.module else [[*target, alias.name] for alias in node.names]
            else:
                names = [(node.module or "").split(".")]
        elif isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        else:
            continue
        for parts in names:
            if len(parts) > 1 and parts[0] == "kernel_agent":
                found.add(parts[1])
    return found


def test_layers_never_import_upwards() -> None:
    broken = []
    for layer, forbidden in FORBIDDEN.items():
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            for name in sorted(internal_imports(path) & set(forbidden)):
                broken.append(f"{path.relative_to(PACKAGE)} imports kernel_agent.{name}")
    assert broken == []


def test_the_layer_check_sees_relative_imports() -> None:
    agent_loop = internal_imports(PACKAGE / "agent" / "loop.py")
    assert {"kernel", "model", "notebook"} <= agent_loop
