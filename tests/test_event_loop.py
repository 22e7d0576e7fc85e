"""Nothing of ours does file or process work on the service's event loop, where it would pause every
other thread's stream. ``loop_watch.py`` runs a real load (three threads at once, a follow-up,
notebooks and files fetched) under an audit hook on the loop's thread, in a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kernel

HERE = Path(__file__).parent


def test_no_blocking_file_or_process_work_of_ours_on_the_service_loop(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "loop_watch.py"), str(tmp_path / "data")],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert any(item["caller"] == "library" for item in seen)  # the hook does see the loop (kernel starts)
    ours = [item for item in seen if item["caller"] == "ours"]
    assert ours == []  # no exception: the store reads from memory and writes behind, off the loop
