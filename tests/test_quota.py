"""The workspace's disk quota: one file is capped in the kernel, the whole workspace after each round.

The end-to-end test runs the CLI against the scripted OpenAI server and a
real kernel with ``--disk-quota 8``: round 1 writes one 20 MB file (stopped at
8 MB by ``RLIMIT_FSIZE``: an error the model sees), round 2 writes three 3 MB
files (each allowed, together over the quota), and the run ends there with
``disk_quota``, both rounds in the notebook and a ``finished`` event.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.agent.run.quota import over_quota, workspace_usage
from kernel_agent.cli import cli
from kernel_agent.notebook.load import load_run

MB = 1 << 20


def test_usage_counts_hidden_and_sparse_files_by_blocks_and_never_follows_links(tmp_path: Path) -> None:
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "f").write_bytes(b"x" * MB)
    with open(tmp_path / "sparse", "wb") as handle:
        handle.truncate(100 * MB)  # takes (almost) no blocks
    elsewhere = tmp_path.parent / f"{tmp_path.name}-outside"
    elsewhere.mkdir()
    (elsewhere / "big").write_bytes(b"y" * (3 * MB))
    (tmp_path / "link").symlink_to(elsewhere)
    (tmp_path / "run.ipynb").write_bytes(b"z" * (2 * MB))
    try:
        used, unwalked = workspace_usage(tmp_path, exclude=[tmp_path / "run.ipynb"])
        assert MB <= used < MB + 256 * 1024 and unwalked is None
        assert workspace_usage(tmp_path)[0] >= used + 2 * MB
    finally:
        (elsewhere / "big").unlink()
        elsewhere.rmdir()


def test_over_quota_says_how_much_and_what_to_do() -> None:
    assert over_quota(8 * MB, 8) is None
    message = over_quota(12 * MB, 8)
    assert message is not None and "grew by 12 MB" in message and "quota of 8 MB" in message
    assert "--disk-quota" in message


def test_a_negative_quota_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["run", "task", "--model", "m", "--disk-quota", "-1"])
    assert result.exit_code == 2


BIG_FILE = "open('big.bin', 'wb').write(b'x' * (20 << 20))"
MANY_FILES = "for n in range(3):\n    open(f'part{n}.bin', 'wb').write(b'y' * (3 << 20))\nprint('wrote 3 parts')"


@pytest.mark.kernel
def test_a_run_over_its_quota_ends_cleanly_with_every_round_kept(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("One big file.", tool_calls=(python_call(BIG_FILE),)))
    openai_server.add(Reply("Then smaller ones.", tool_calls=(python_call(MANY_FILES),)))
    openai_server.add(Reply("Never asked.", tool_calls=(python_call("print('no')"),)))
    workspace, notebook = tmp_path / "ws", tmp_path / "run.ipynb"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "Fill the disk",
            "--model",
            "m",
            "--base-url",
            openai_server.base_url,
            "--disk-quota",
            "8",
            "--workspace",
            str(workspace),
            "--out",
            str(notebook),
            "--json",
        ],
    )
    assert result.exit_code == 1, result.output
    events = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert events[-1]["event"] == "finished"
    assert "over its disk quota of 8 MB" in json.dumps(events)
    assert openai_server.remaining == 1  # the run ended before asking again

    run = load_run(notebook)
    assert run.run.stop_reason == "disk_quota" and "quota of 8 MB" in (run.run.error or "")
    first, second = run.rounds
    assert first.result is not None and first.result.status == "error" and "File too large" in str(first.result.error)
    assert os.path.getsize(workspace / "big.bin") == 8 * MB  # stopped at the per-file cap
    assert second.result is not None and second.result.ok and "wrote 3 parts" in second.result.stdout
