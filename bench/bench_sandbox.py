"""Issue 9's benchmark: what the bubblewrap sandbox costs. ``NAME`` and ``PARTS`` for ``run.py``.

* ``start``: a new session to its first ``1+1`` result, sandboxed (``strict``)
  vs unconfined (``off``), alternating; target: at most 150 ms more.
* ``roundtrip``: ``1+1`` on a sandboxed and an unconfined session open side
  by side, in alternating blocks; target: at most 1.10x.
* ``compute``: a 10-round analysis of a ~50 MB CSV (read, groupbys, describe,
  corr, a merge, a figure, a pivot) in our sandboxed session vs a stock
  ``python3`` ipykernel driven by raw jupyter_client, interleaved, five
  repetitions (one in ``--quick``); target: at most 1.05x. Both sides'
  printed results must agree.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import raw
from bench_agent import _CLEAN, _LOAD, _make_csv
from jupyter_client.manager import AsyncKernelManager
from report import Row, median, p95, scaled

from kernel_agent.kernel.sandbox.bwrap import find_bwrap
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.session_sync import KernelSession

NAME = "sandbox"

_SETUP = "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\n%matplotlib inline"
_ROUNDS = [
    _LOAD,
    _CLEAN,
    "print(df.groupby('region')['revenue'].sum().round(2).to_string())",
    "print(df.groupby(['region', 'category'])['units'].mean().round(4).to_string())",
    "print(df[['units', 'price', 'revenue']].describe().round(3).to_string())",
    "print(df[['units', 'price', 'discount', 'revenue']].corr().round(4).to_string())",
    (
        "means = df.groupby('product', as_index=False)['revenue'].mean().rename(columns={'revenue': 'mean_rev'})\n"
        "merged = df.merge(means, on='product')\nprint(len(merged), round(float((merged.revenue > "
        "merged.mean_rev).mean()), 4))"
    ),
    "fig, ax = plt.subplots(figsize=(6, "
    "3))\ndf.groupby('region')['revenue'].sum().plot.bar(ax=ax)\nplt.show()\nprint('plotted')",
    "print(df.pivot_table(index='region', columns='category', values='revenue', aggfunc='sum').round(1).to_string())",
    "print(df.nlargest(3, 'revenue')[['region', 'category', 'revenue']].round(2).to_string())",
]


def _limits(mode: str) -> Limits:
    return Limits(sandbox=mode)  # type: ignore[arg-type]


# ------------------------------------------------------------------ start
def start(quick: bool) -> list[Row]:
    """Seconds from nothing to ``1+1`` done, sandboxed and not, alternating which goes first."""
    times: dict[str, list[float]] = {"strict": [], "off": []}
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-sandbox-"))
    try:
        for index in range(scaled(quick, 8, 2, 1)):
            for mode in ("strict", "off") if index % 2 == 0 else ("off", "strict"):
                started = time.perf_counter()
                with KernelSession(scratch / f"{mode}-{index}", limits=_limits(mode)) as session:
                    if session.execute("1+1").result_text != "2":
                        raise RuntimeError(f"{mode} session answered wrongly")
                    times[mode].append(time.perf_counter() - started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ours, theirs = median(times["strict"]), median(times["off"])
    return [
        Row(f"session start to first 1+1: sandboxed (bwrap {find_bwrap()}) vs unconfined", ours, theirs),
        Row("  ↳ what the sandbox adds to a start (median difference)", ours - theirs, max_seconds=0.150),
    ]


# ------------------------------------------------------------------ round-trip
def roundtrip(quick: bool) -> list[Row]:
    """``1+1`` round-trips, sandboxed vs unconfined, in alternating blocks of 10 on two open sessions."""
    samples: dict[str, list[float]] = {"strict": [], "off": []}
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-sandbox-"))
    try:
        with (
            KernelSession(scratch / "strict", limits=_limits("strict")) as strict,
            KernelSession(scratch / "off", limits=_limits("off")) as off,
        ):
            sessions = {"strict": strict, "off": off}
            for block in range(scaled(quick, 100, 10, 1)):
                for mode in ("strict", "off") if block % 2 == 0 else ("off", "strict"):
                    for _ in range(10):
                        started = time.perf_counter()
                        result = sessions[mode].execute("1+1")
                        samples[mode].append(time.perf_counter() - started)
                        if result.result_text != "2":
                            raise RuntimeError(f"{mode} session answered wrongly")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [
        Row(
            "1+1 round trip, median: sandboxed vs unconfined",
            median(samples["strict"]),
            median(samples["off"]),
            max_ratio=1.10,
        ),
        Row("  ↳ p95", p95(samples["strict"]), p95(samples["off"])),
    ]


# ------------------------------------------------------------------ compute
def _ours(workspace: Path) -> tuple[float, list[str]]:
    with KernelSession(workspace) as session:
        session.execute(_SETUP)
        started, outputs = time.perf_counter(), []
        for code in _ROUNDS:
            result = session.execute(code, timeout=600)
            if result.status != "ok":
                raise RuntimeError(f"sandboxed round failed: {result.to_llm_text()}")
            outputs.append(result.stdout)
        return time.perf_counter() - started, outputs


async def _stock(workspace: Path) -> tuple[float, list[str]]:
    manager = AsyncKernelManager(kernel_name="python3")
    manager.connection_file = str(workspace / "stock-kernel.json")
    await manager.start_kernel(
        cwd=str(workspace),
        env={"IPYTHONDIR": str(workspace / ".ipython"), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        await raw.roundtrip(client, _SETUP)
        started, outputs = time.perf_counter(), []
        for code in _ROUNDS:
            messages = await raw.iopub_messages(client, code, timeout=600)
            outputs.append(
                "".join(
                    m["content"]["text"]
                    for m in messages
                    if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
                )
            )
        return time.perf_counter() - started, outputs
    finally:
        client.stop_channels()
        await manager.shutdown_kernel()


def compute(quick: bool) -> list[Row]:
    """Ten analysis rounds on a ~50 MB CSV: our sandboxed session vs a stock kernel, interleaved."""
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-sandbox-"))
    times: dict[str, list[float]] = {"ours": [], "stock": []}
    try:
        csv = scratch / "big.csv"
        _make_csv(csv, scaled(quick, 930_000, 60_000, 2_000))
        size_mb = csv.stat().st_size / 1e6
        for index in range(scaled(quick, 5, 1, 1)):
            for side in ("ours", "stock") if index % 2 == 0 else ("stock", "ours"):
                workspace = scratch / f"{side}-{index}"
                workspace.mkdir()
                shutil.copy(csv, workspace / "big.csv")
                elapsed, outputs = _ours(workspace) if side == "ours" else asyncio.run(_stock(workspace))
                times[side].append(elapsed)
                if side == "ours":
                    ours_outputs = outputs
                else:
                    stock_outputs = outputs
            if ours_outputs != stock_outputs:
                raise RuntimeError("the sandboxed and the stock kernel printed different results")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [
        Row(
            f"10-round analysis of a {size_mb:.0f} MB CSV: sandboxed session vs stock python3 kernel (raw "
            "jupyter_client)",
            median(times["ours"]),
            median(times["stock"]),
            max_ratio=1.05,
        )
    ]


PARTS = {"start": start, "roundtrip": roundtrip, "compute": compute}
