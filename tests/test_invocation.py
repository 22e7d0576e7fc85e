"""The commands the CLI tells the user to run name kernel-agent as the user's shell finds it (``command_line``):
bare only when PATH's ``kernel-agent`` is the running one, else the path it was started by. Each case is checked
by running the printed line in bash, from the same folder and with the same PATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernel_agent.cli.invocation import command_line


def script(folder: Path) -> Path:
    """A ``kernel-agent`` that prints its arguments, one a line."""
    folder.mkdir(parents=True)
    path = folder / "kernel-agent"
    path.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n', encoding="utf-8")
    path.chmod(0o755)
    return path


def started_as(monkeypatch: pytest.MonkeyPatch, argv0: Path | str, cwd: Path, path: str) -> None:
    monkeypatch.setattr(sys, "argv", [str(argv0), "demo"])
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("PATH", path)


def runs_as_printed(line: str, cwd: Path, path: str) -> list[str]:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env={"PATH": path}, capture_output=True, text=True)
    assert done.returncode == 0, line + done.stderr
    return done.stdout.splitlines()


def test_a_kernel_agent_not_on_path_is_named_by_its_path_relative_to_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started_as(monkeypatch, script(tmp_path / ".venv" / "bin"), tmp_path, "/usr/bin:/bin")
    line = command_line("show", "notebooks/my run.ipynb")
    assert line == ".venv/bin/kernel-agent show 'notebooks/my run.ipynb'"
    assert runs_as_printed(line, tmp_path, "/usr/bin:/bin") == ["show", "notebooks/my run.ipynb"]


def test_outside_the_current_folder_the_path_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program = script(tmp_path / "env" / "bin")
    (tmp_path / "elsewhere").mkdir()
    started_as(monkeypatch, program, tmp_path / "elsewhere", "/usr/bin:/bin")
    assert command_line("replay", "x.ipynb", "--check") == f"{program} replay x.ipynb --check"


def test_the_bare_name_when_path_finds_this_very_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    program = script(tmp_path / "bin")
    path = f"{program.parent}:/usr/bin:/bin"
    started_as(monkeypatch, program, tmp_path, path)
    assert command_line("show", "x.ipynb") == "kernel-agent show x.ipynb"
    assert runs_as_printed(command_line("show", "x.ipynb"), tmp_path, path) == ["show", "x.ipynb"]


def test_another_kernel_agent_on_path_is_not_taken_for_this_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = script(tmp_path / "other")
    started_as(monkeypatch, script(tmp_path / "mine"), tmp_path, f"{other.parent}:/usr/bin:/bin")
    assert command_line("show", "x.ipynb") == "mine/kernel-agent show x.ipynb"


def test_not_started_as_the_script_it_is_this_python_with_dash_m(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started_as(monkeypatch, Path(sys.modules["kernel_agent.cli"].__file__ or "").parent / "__main__.py", tmp_path, "")
    assert command_line("show", "x.ipynb") == f"{sys.executable} -m kernel_agent.cli show x.ipynb"
