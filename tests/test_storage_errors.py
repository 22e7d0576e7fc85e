"""Errors name who must act: a disk that fills up while the data files are copied into a workspace is the
machine's (``StorageError``, the CLI exits 1), not the user's file (``DataFileError``, exit 2).

The full disk is real: a small tmpfs mounted over the workspace by bubblewrap, in a child process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_agent.errors import ConfigError, DataFileError, KernelAgentError, StorageError

CHILD = """
import json, sys
from kernel_agent.agent.datafiles.data import check_data
from kernel_agent.cli.edge import Failure, edge

checked = check_data([sys.argv[1]], sys.argv[2])
try:
    with edge():
        checked.install()
except Failure as failure:
    cause = failure.__context__
    print(json.dumps({"exit": failure.exit_code, "error": type(cause).__name__, "message": failure.message}))
else:
    print(json.dumps({"exit": 0}))
finally:
    checked.close()
"""


def install_into(workspace: Path, data: Path, *, tmpfs_bytes: int | None) -> dict[str, object]:
    """Copy ``data`` into ``workspace`` in a child process (over a tmpfs of ``tmpfs_bytes`` when given)."""
    command = [sys.executable, "-c", CHILD, str(data), str(workspace)]
    if tmpfs_bytes is not None:
        bwrap = shutil.which("bwrap")
        assert bwrap, "bubblewrap is needed (make bubblewrap)"
        command = [bwrap, "--bind", "/", "/", "--size", str(tmpfs_bytes), "--tmpfs", str(workspace), *command]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    value: dict[str, object] = json.loads(run.stdout.splitlines()[-1])
    return value


def test_a_full_disk_while_copying_the_data_is_a_machinery_error(tmp_path: Path) -> None:
    data = tmp_path / "big.csv"
    data.write_text("a,b\n" + "1234567,7654321\n" * 65_536)  # 1 MiB, into a 64 KiB disk
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    full = install_into(workspace, data, tmpfs_bytes=64 * 1024)

    assert full["error"] == "StorageError"
    assert full["exit"] == 1  # the machinery's, not a usage error
    assert "No space left on device" in str(full["message"])
    assert list(workspace.iterdir()) == []  # nothing half-written left behind (the tmpfs is gone, too)


def test_the_same_copy_with_room_succeeds_and_a_missing_file_stays_a_usage_error(tmp_path: Path) -> None:
    data = tmp_path / "big.csv"
    data.write_text("a,b\n" + "1234567,7654321\n" * 65_536)
    (tmp_path / "workspace").mkdir()
    assert install_into(tmp_path / "workspace", data, tmpfs_bytes=4 * 1024 * 1024) == {"exit": 0}

    with pytest.raises(DataFileError):
        from kernel_agent.agent.datafiles.data import check_data

        check_data([tmp_path / "missing.csv"], tmp_path / "elsewhere")


def test_storage_errors_sit_outside_the_usage_branch() -> None:
    assert issubclass(StorageError, KernelAgentError)
    assert not issubclass(StorageError, ConfigError)
    assert StorageError("full", path="x").path == "x"
