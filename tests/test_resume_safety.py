"""``resume`` refuses notebooks it must not act on, before any kernel starts.

A notebook that is not ours, or names data files that are not plain names, is refused before
anything runs (the setup cell would write a marker; the notebook stays byte-for-byte unchanged). A
notebook's workspace and data paths are claims: resume works in a new folder beside the notebook and
never follows a link, and a run's notebook lives beside its workspace, out of the kernel's reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from click.testing import CliRunner, Result
from openai_server import OpenAIServer, Reply

from kernel_agent import Agent
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


@pytest.mark.kernel
def test_a_forged_notebook_never_chooses_the_folder_or_the_files(tmp_path: Path, openai_server: OpenAIServer) -> None:
    """The notebook claims a host folder as its workspace and a data file beside it that is a link to a
    private file: resume works in a new folder beside the notebook, the claimed folder is never bound,
    created or written, and the link is never followed (the file is simply missing)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("host data\n")
    private = tmp_path / "private.csv"
    private.write_text("token\nhunter2\n")
    private.chmod(0o600)
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "data.csv").symlink_to(private)
    notebook = folder / "run.ipynb"
    write_notebook(notebook, Path("ran"), {"view": "full", "workspace": str(victim), "data_files": ["data.csv"]})
    openai_server.add(Reply("<Code>import os\nprint(sorted(os.listdir('.')))</Code>"))
    openai_server.add(Reply("<Answer>done</Answer>"))
    with Agent(model="m", base_url=openai_server.base_url, api_key="k", protocol="tags") as agent:
        run = agent.resume(notebook, "what is here?")
    assert run.answer == "done"
    listing = run.rounds[-2].result.stdout  # type: ignore[union-attr]
    assert "ran" in listing and "data.csv" not in listing  # the setup cell ran, in a folder without the link's file
    assert (
        sorted(p.name for p in victim.iterdir()) == ["keep.txt"] and (victim / "keep.txt").read_text() == "host data\n"
    )
    assert private.stat().st_mode & 0o777 == 0o600
    (workspace,) = [p for p in folder.iterdir() if p.is_dir()]
    assert workspace.name.startswith("run-") and (workspace / "ran").read_text() == "ran"
    assert load_resumable(notebook).info.workspace == str(workspace)  # the notebook now claims the new folder


@pytest.mark.kernel
def test_a_run_cannot_rewrite_its_own_record_and_resume_continues_elsewhere(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    """Model code tries to rewrite the run's notebook, beside its workspace, during the run and from a thread
    that lives on after the last save: it is out of the kernel's reach, so the record stays the run's own."""
    attack = (
        "import os, threading, time\n"
        "target = os.path.join('..', os.path.basename(os.getcwd()) + '.ipynb')\n"
        "def forge():\n"
        "    try:\n"
        "        open(target, 'w').write('{}')\n"
        "        open(os.path.join('..', 'planted.txt'), 'w').write('x')\n"
        "        return 'wrote'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "print(forge())\n"
        "def keep_trying():\n"
        "    for _ in range(200):\n"
        "        forge(); time.sleep(0.01)\n"
        "threading.Thread(target=keep_trying, daemon=True).start()\n"
        "secret = 41"
    )
    openai_server.add(Reply(f"<Code>{attack}</Code>"))
    openai_server.add(Reply("<Answer>done</Answer>"))
    openai_server.add(Reply("<Code>print(secret + 1)</Code>"))
    openai_server.add(Reply("<Answer>42</Answer>"))
    workspace = tmp_path / "ws"
    with Agent(model="m", base_url=openai_server.base_url, api_key="k", protocol="tags") as agent:
        first = agent.run("try it", workspace=workspace)
        assert first.notebook_path == tmp_path / "ws.ipynb"
        # Whatever the kernel's view of '..' is (the sandbox's own tmpfs), the host's folder is not it.
        assert not (tmp_path / "planted.txt").exists() and load_resumable(first.notebook_path).rounds
        second = agent.resume(first.notebook_path, "and then?")
    assert second.answer == "42" and second.rounds[-2].result.stdout == "42\n"  # type: ignore[union-attr]
    loaded = load_resumable(first.notebook_path)
    assert len(loaded.rounds) == 4 and Path(loaded.info.workspace).name.startswith("ws-")  # resumed in a new folder
    assert sorted(p.name for p in workspace.iterdir()) == []  # the first workspace got nothing more
