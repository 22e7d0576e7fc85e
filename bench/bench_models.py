"""Issue 11: figures past the image cap, and a session never closed at interpreter exit.

``figures``: 300 small figures in one cell with the default cap of 50 (the rest are closed in the
kernel, never rendered) vs a cap above 300 (every figure rendered to PNG, as before the cap moved
into the kernel). ``exit``: a script that starts a session, runs a cell and exits without closing
it: seconds from its last line to the process's end (jupyter_client's default grace was ~2.7 s).
``parse``: replies built to trip a quadratic scan (a megabyte of unclosed ``<Code>``, backticks,
``<``), parsed by the deepanalyze and tags protocols: one 1 MB reply vs ten 100 kB ones. A linear
parser takes about the same for both; a quadratic one ten times longer.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from report import Row, median, scaled

from kernel_agent.agent.protocols import DeepAnalyzeProtocol, TagsProtocol
from kernel_agent.kernel.outputs import OutputCaps
from kernel_agent.kernel.session_sync import KernelSession
from kernel_agent.model.chat import ModelReply

NAME = "models"

FIGURES = "for i in range({count}):\n    fig, ax = plt.subplots(figsize=(3, 2))\n    ax.plot([0, i])\n"
FORGOTTEN = textwrap.dedent("""\
    import sys, time
    from kernel_agent.kernel.session_sync import KernelSession
    session = KernelSession(sys.argv[1]).start()
    session.execute("import pandas, matplotlib.pyplot as plt")
    print(time.time(), flush=True)
""")


def figures(quick: bool) -> list[Row]:
    """One cell drawing 300 figures (12 in a smoke run, capped at 5): capped in the kernel vs every figure
    rendered."""
    runs, count, limit = scaled(quick, (3, 300, 50), (1, 300, 50), (1, 12, 5))
    samples: dict[str, list[float]] = {"capped": [], "rendered": []}
    for _ in range(runs):
        for side, cap in (("capped", limit), ("rendered", 10_000)):
            with (
                tempfile.TemporaryDirectory() as workspace,
                KernelSession(workspace, caps=OutputCaps(max_images=cap)) as session,
            ):
                session.execute("%matplotlib inline\nimport matplotlib.pyplot as plt")
                started = time.perf_counter()
                result = session.execute(FIGURES.format(count=count), timeout=300)
                samples[side].append(time.perf_counter() - started)
                if result.status != "ok" or len(result.images) != min(cap, count):
                    raise AssertionError(f"{side}: {result!r}")
    return [
        Row(
            f"{count} figures in one cell, median of {runs}: cap {limit} in the kernel vs all rendered",
            median(samples["capped"]),
            median(samples["rendered"]),
            max_ratio=0.8,
        )
    ]


def exit_time(quick: bool) -> list[Row]:
    """Seconds from a script's last line to its exit, with a session it never closed."""
    runs = scaled(quick, 5, 2, 1)
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-exit-"))
    try:
        script = scratch / "forgotten.py"
        script.write_text(FORGOTTEN)
        samples = []
        for n in range(runs):
            done = subprocess.run(
                [sys.executable, str(script), str(scratch / f"ws{n}")],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            samples.append(time.time() - float(done.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [Row(f"interpreter exit with a session never closed, median of {runs}", median(samples), max_seconds=1.0)]


_HOSTILE = ("<Code>", "</Code>", "```\n", "`", "<", "<Analyze>a<Understand>", "words ")


def _parse_all(size: int, copies: int) -> float:
    replies = [ModelReply(unit * (size // len(unit))) for unit in _HOSTILE]
    started = time.perf_counter()
    for _ in range(copies):
        for reply in replies:
            for protocol in (DeepAnalyzeProtocol(), TagsProtocol()):
                protocol.parse(reply)
    return time.perf_counter() - started


def parse(quick: bool) -> list[Row]:
    """Hostile replies: 1 MB each once vs 100 kB each ten times (the same bytes in total)."""
    runs = scaled(quick, 3, 1, 1)
    size = scaled(quick, 1_000_000, 1_000_000, 100_000)  # a tenth in a smoke run
    big = median([_parse_all(size, 1) for _ in range(runs)])
    small = median([_parse_all(size // 10, 10) for _ in range(runs)])
    return [
        Row(
            f"parse {len(_HOSTILE)} hostile replies × 2 protocols: {size:,} B once vs a tenth ten times, "
            f"median of {runs}",
            big,
            small,
            max_ratio=1.5,
        )
    ]


PARTS = {"figures": figures, "exit": exit_time, "parse": parse}
