"""Data files built to hurt: summarised in bounded time and memory, with a note, never a crash.

The summaries run in a child process so its peak memory (``VmHWM``) is its
own; each file's CPU time is measured there too. The 2 GB file is sparse
(NUL bytes that take no disk).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kernel_agent.agent.datafiles.summaries import MAX_SUMMARY_CHARS

CHILD = """
import json, sys, time
from pathlib import Path
from kernel_agent.agent.datafiles.data import summarize
out = {}
for name in sys.argv[1:]:
    started = time.process_time()
    text = summarize(Path(name))
    out[Path(name).name] = [time.process_time() - started, text]
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent (here, pytest) across exec.
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
out["maxrss_mb"] = int(status["VmHWM"].split()[0]) / 1024
print(json.dumps(out))
"""


def write_bomb(path: Path, unpacked: int) -> None:
    """An xlsx-named zip whose one sheet unpacks to ``unpacked`` bytes (it compresses ~1000:1)."""
    chunk = b" " * (1 << 20)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("xl/worksheets/sheet1.xml", "w") as member:
            for _ in range(unpacked // len(chunk)):
                member.write(chunk)


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("hostile")
    with open(folder / "nul-2gb.csv", "wb") as handle:
        handle.truncate(2 << 30)
    (folder / "one-line.csv").write_bytes(b"a" * (50 << 20))
    (folder / "one-line.txt").write_bytes(b"b" * (50 << 20))
    (folder / "one-line.jsonl").write_bytes(b'{"k": "' + b"c" * (20 << 20) + b'"}')
    (folder / "garbage.csv").write_bytes(bytes(range(256)) * 4096)
    (folder / "wide.csv").write_text(",".join(f"c{n}" for n in range(100_000)) + "\n" + ",".join("1" * 100_000) + "\n")
    write_bomb(folder / "bomb.xlsx", 300 << 20)
    names = sorted(str(p) for p in folder.iterdir())
    done = subprocess.run([sys.executable, "-c", CHILD, *names], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    value: dict[str, Any] = json.loads(done.stdout)
    return value


def test_every_summary_is_cheap_and_short(summaries: dict[str, Any]) -> None:
    peak = summaries.pop("maxrss_mb")
    slow = {name: round(cpu, 2) for name, (cpu, _) in summaries.items() if cpu > 3.0}
    assert slow == {}
    assert all(len(text) <= MAX_SUMMARY_CHARS for _, text in summaries.values())
    assert peak < 400, f"summarising the hostile files peaked at {peak:.0f} MB"


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("nul-2gb.csv", "binary data (NUL bytes), not CSV text: not parsed"),
        ("garbage.csv", "binary data (NUL bytes)"),
        ("one-line.csv", "no line break in its first 1.0 MB"),
        ("one-line.jsonl", "no line break in its first MB"),
        ("one-line.txt", "1 line(s); first lines:"),
        ("wide.csv", "100,000 columns: the first 1,000 read"),
        ("bomb.xlsx", "unpacking to 300.0 MB: too big to open for a summary"),
    ],
)
def test_each_hostile_file_gets_a_clear_note(summaries: dict[str, Any], name: str, note: str) -> None:
    assert note in summaries[name][1]
