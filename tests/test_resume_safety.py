"""``resume`` refuses notebooks it must not act on, before any kernel starts.

Each notebook's setup cell would write a marker file if it ever ran; every
test checks the marker is absent, the notebook is byte-for-byte unchanged, and
files outside the workspace were neither copied nor chmodded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from click.testing import CliRunner, Result

from kernel_agent.cli import cli
from kernel_agent.errors import NotebookError
from kernel_agent.notebook.load import load_resumable


def marker_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('ran')"


def write_notebook(path: Path, marker: Path, meta: dict[str, Any] | None) -> bytes:
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell(marker_code(marker))
    if meta is not None:
        setup.metadata["kernel_agent"] = {"role": "setup"}
        nb.metadata["kernel_agent"] = meta
    nb.cells = [setup, nbformat.v4.new_code_cell("print(1)")]
    nbformat.write(nb, path)
    return path.read_bytes()


def resume(notebook: Path) -> Result:
    # A port nothing listens on: a refusal must come before the model is ever asked.
    args = ["resume", str(notebook), "And then?", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def assert_refused(result: Result, message: str, notebook: Path, before: bytes, marker: Path) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert not marker.exists()
    assert notebook.read_bytes() == before


def test_a_notebook_kernel_agent_did_not_write_is_refused(tmp_path: Path) -> None:
    notebook, marker = tmp_path / "foreign.ipynb", tmp_path / "ran"
    before = write_notebook(notebook, marker, None)
    assert_refused(resume(notebook), "is not a kernel-agent run", notebook, before, marker)


@pytest.mark.parametrize("name", ["../outside.csv", "/etc/passwd", "sub/data.csv", "..", ""])
def test_recorded_data_files_must_be_plain_names(tmp_path: Path, name: str) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "data.csv").write_text("x\n1\n")
    outside = tmp_path / "outside.csv"
    outside.write_text("secret\n1\n")
    notebook, marker = workspace / "run.ipynb", tmp_path / "ran"
    before = write_notebook(notebook, marker, {"view": "full", "workspace": str(workspace), "data_files": [name]})
    with pytest.raises(NotebookError, match="not a plain file name"):
        load_resumable(notebook)
    assert_refused(resume(notebook), "not a plain file name", notebook, before, marker)
    assert sorted(p.name for p in workspace.iterdir()) == ["run.ipynb", "sub"]  # nothing copied in


def test_a_data_file_symlinked_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    private = tmp_path / "private.csv"
    private.write_text("token\nhunter2\n")
    private.chmod(0o600)
    (workspace / "data.csv").symlink_to(private)
    notebook, marker = workspace / "run.ipynb", tmp_path / "ran"
    before = write_notebook(notebook, marker, {"view": "full", "workspace": str(workspace), "data_files": ["data.csv"]})
    assert_refused(resume(notebook), "leads outside the workspace", notebook, before, marker)
    assert private.stat().st_mode & 0o777 == 0o600  # never chmodded read-only as a data copy would be
    assert (workspace / "data.csv").is_symlink()


def test_a_recorded_workspace_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    notebook, marker = tmp_path / "run.ipynb", tmp_path / "ran"
    missing = tmp_path / "gone"
    before = write_notebook(notebook, marker, {"view": "full", "workspace": str(missing), "data_files": []})
    assert_refused(resume(notebook), "is not a folder", notebook, before, marker)
    assert not os.path.exists(missing)  # never created from a notebook's say-so
