"""The public API: ``import kernel_agent`` stays light, and ``__all__`` is exactly the documented names."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import kernel_agent
from kernel_agent import errors

FRONT_END_LIBRARIES = (
    "click",
    "rich",
    "IPython",
    "openai",
    "mcp",
    "jupyter_ai_persona_manager",
    "jupyterlab_chat",
    "jupyter_server_ydoc",
)

DOCUMENTED = {
    "__version__",
    "KernelSession",
    "AsyncKernelSession",  # one live kernel
    "ExecutionResult",
    "ErrorInfo",  # what one execution gave back
    "Agent",
    "AsyncAgent",
    "AgentConfig",
    "Event",  # the analysis loop, its settings and events
    "Run",
    "Round",
    "Usage",
    "Artifact",  # the record of a run
    "PythonTool",
    "replay",
    "ReplayReport",
    "Limits",
    "OutputCaps",
    "ChatModel",
    "ModelReply",
    "SessionState",  # public in practice: plug in a model, read a session's state
    *errors.__all__,
}


def imported_by(statement: str) -> list[str]:
    """Which of the front-end libraries a fresh interpreter has loaded after ``statement``."""
    probe = (
        f"import sys\n{statement}\nprint(__import__('json').dumps([m for m in {FRONT_END_LIBRARIES!r} if m in "
        "sys.modules]))"
    )
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    value: list[str] = json.loads(output)
    return value


def test_import_kernel_agent_loads_no_front_end_or_sdk() -> None:
    assert imported_by("import kernel_agent") == []


def test_the_cli_loads_neither_ipython_nor_the_sdk() -> None:
    # rich too waits for a command that renders (tests/test_startup_imports.py holds the rest).
    assert imported_by("import kernel_agent.cli") == ["click"]


def test_all_is_the_documented_api_and_every_name_resolves() -> None:
    assert set(kernel_agent.__all__) == DOCUMENTED == {"__version__", *kernel_agent._EXPORTS}
    assert len(kernel_agent.__all__) == len(set(kernel_agent.__all__))
    for name in kernel_agent.__all__:
        assert getattr(kernel_agent, name) is not None, name
    assert sorted(dir(kernel_agent)) == sorted(kernel_agent.__all__)


def test_every_error_is_a_kernel_agent_error() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(kernel_agent, name), kernel_agent.KernelAgentError)


PACKAGE = Path(kernel_agent.__file__).parent
SHARED = {
    "errors",
    "result",
    "records",
    "events",
    "shapes",
    "redact",
    "safe",
    "plugins",
    "_loop",
    "_net",
    "_nbformat",
    "_python",
    "_boot",
    "_connections",
    "_version",
}
BELOW_FRONT_ENDS = SHARED | {"kernel", "sources", "model", "notebook", "agent", "demo"}
# What each top-level module or subpackage may import of kernel_agent besides itself, bottom up:
# shared values, then the kernel and the model seam (apart), notebooks, the agent, then front ends,
# which never import one another (the CLI starts the service and the MCP server: it may import those).
ALLOWED = {
    "_version": set(),
    "_loop": set(),
    "_net": set(),
    "_nbformat": set(),
    "_python": set(),  # the one rule for starting a Python process
    "_boot": set(),  # the script it starts: imports nothing of ours itself
    "_connections": {"errors"},  # HTTP connections bounded in time and number, for both servers
    "errors": set(),
    "result": {"errors"},
    "records": {"errors", "result"},
    "events": {"errors", "result", "records", "shapes"},
    "shapes": {"errors", "result", "records"},  # the record's JSON shapes: notebook metadata, events' JSON
    "redact": {"errors"},
    "plugins": {"errors"},  # the entry-point registries' mechanism: each layer keeps its own group
    "safe": set(),  # making kernel and model content safe to show: for every layer above, of none
    "kernel": SHARED,
    "sources": SHARED | {"kernel"},  # live data sources and their broker: the kernel's side is kernel/inside/
    "model": SHARED,
    "notebook": SHARED | {"kernel"},
    "agent": SHARED | {"kernel", "sources", "model", "notebook"},
    "demo": SHARED | {"model"},
    "testing": SHARED | {"kernel"},  # FakeKernel, for tests of code that drives a kernel
    "magic": BELOW_FRONT_ENDS,
    "server": BELOW_FRONT_ENDS,
    "mcp": BELOW_FRONT_ENDS,
    "jupyter": BELOW_FRONT_ENDS,  # the JupyterLab chat persona (Jupyter AI's entry point loads it)
    "eval": BELOW_FRONT_ENDS,  # benchmark suites run through the agent: a layer above it
    "cli": BELOW_FRONT_ENDS | {"server", "mcp", "eval"},
}
INSIDE = "kernel_agent.kernel.inside"  # runs in the kernel process: imports nothing of ours from outside it


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(module: str) -> set[str]:
    """The kernel_agent modules ``module`` imports anywhere in it (top level, in functions, under
    TYPE_CHECKING), relative or absolute, each resolved to the module that holds the name."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name.startswith("kernel_agent.") and name != module:
                found.add(name)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "kernel_agent"


def test_every_module_belongs_to_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if layer(m) not in ALLOWED and layer(m) != "kernel_agent")
    assert unplaced == []


def test_layers_never_import_upwards_or_across() -> None:
    broken = []
    for module in sorted(MODULES):
        if layer(module) == "kernel_agent":  # the package root re-exports the public API, lazily
            continue
        allowed = ALLOWED[layer(module)] | {layer(module)}
        broken += [f"{module} imports {name}" for name in sorted(imports_of(module)) if layer(name) not in allowed]
    assert broken == []


def test_code_inside_the_kernel_imports_nothing_from_outside_it() -> None:
    inside = [m for m in MODULES if m == INSIDE or m.startswith(INSIDE + ".")]
    assert {f"{INSIDE}.launcher", f"{INSIDE}.figure_cap"} <= set(inside)
    leaks = [
        f"{m} imports {name}" for m in sorted(inside) for name in sorted(imports_of(m)) if not name.startswith(INSIDE)
    ]
    assert leaks == []


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_cycles() -> None:
    assert find_cycles({module: imports_of(module) for module in MODULES}) == []


def test_the_checks_see_what_they_must() -> None:
    # relative imports, names that are modules (``from . import files``), and a cycle when there is one
    assert {"kernel_agent.kernel.session", "kernel_agent.model.chat", "kernel_agent.notebook.export"} <= imports_of(
        "kernel_agent.agent.run.agent"
    )
    assert {
        "kernel_agent.agent.run.loop",
        "kernel_agent.agent.run.preparation",
        "kernel_agent.agent.run.rounds",
        "kernel_agent.agent.run.staging",
    } <= imports_of("kernel_agent.agent.run.agent")
    assert "kernel_agent.mcp.files" in imports_of("kernel_agent.mcp.server")
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
