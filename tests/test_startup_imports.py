"""Start-up stays light: ``import kernel_agent``, ``import kernel_agent.cli``, ``--version``, ``--help``
and every ``COMMAND --help`` load none of the heavy libraries.

An import-graph check, not a timing: each probe runs in a fresh interpreter and lists what it loaded.
``bench/bench_startup.py`` times the same commands.
"""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from kernel_agent.cli import cli

HEAVY = (
    "nbformat",
    "jsonschema",
    "jupyter_client",
    "pandas",
    "numpy",
    "fastapi",
    "uvicorn",
    "mcp",
    "rich",
    "openai",
    "zmq",
    "matplotlib",
)


def heavy_loaded_by(code: str) -> list[str]:
    """The heavy top-level packages a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(__import__('json').dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    loaded = {name.partition(".")[0] for name in json.loads(run.stdout.splitlines()[-1])}
    return sorted(loaded & set(HEAVY))


def command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand under ``group``, as the words that name it."""
    paths = []
    for name, command in sorted(group.commands.items()):
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths.extend(command_paths(command, (*prefix, name)))
    return paths


def invoked(args: tuple[str, ...]) -> str:
    """A probe that runs the CLI with ``args`` in click's runner and fails unless it exits 0."""
    return (
        "from click.testing import CliRunner\n"
        "from kernel_agent.cli import cli\n"
        f"result = CliRunner().invoke(cli, {list(args)!r})\n"
        "assert result.exit_code == 0, (result.output, result.exception)\n"
    )


@pytest.mark.parametrize("module", ["kernel_agent", "kernel_agent.cli"])
def test_importing_loads_nothing_heavy(module: str) -> None:
    assert heavy_loaded_by(f"import {module}") == []


@pytest.mark.parametrize("args", [("--version",), ("--help",)], ids=" ".join)
def test_version_and_help_load_nothing_heavy(args: tuple[str, ...]) -> None:
    assert heavy_loaded_by(invoked(args)) == []


@pytest.mark.parametrize("command", command_paths(cli), ids=" ".join)
def test_every_command_help_loads_nothing_heavy(command: tuple[str, ...]) -> None:
    assert heavy_loaded_by(invoked((*command, "--help"))) == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The check can fail: a probe that does load something heavy is caught."""
    assert heavy_loaded_by("import kernel_agent.cli\nimport rich.console") == ["rich"]


def test_the_mcp_server_answers_initialize_without_the_kernel_modules() -> None:
    """The SDK has to load before ``initialize`` is answered; kernels, notebooks and zmq load after, in the
    background (``mcp/connections.py``)."""
    probe = "import kernel_agent.cli, kernel_agent.agent.config, kernel_agent.kernel.workspace, kernel_agent.mcp.server"
    loaded = heavy_loaded_by(probe)
    assert "mcp" in loaded
    assert not {"nbformat", "jsonschema", "jupyter_client", "zmq", "pandas", "numpy"} & set(loaded), loaded


def test_serve_binds_before_importing_the_app() -> None:
    """What ``kernel-agent serve`` imports before uvicorn binds; FastAPI and the rest load in a thread after."""
    loaded = heavy_loaded_by(
        "import kernel_agent.cli, kernel_agent.agent.config, kernel_agent.server.config, "
        "kernel_agent.server.run, uvicorn"
    )
    assert loaded == ["uvicorn"]
