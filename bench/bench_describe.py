"""Issue 35's benchmark: describing data files under a hard bound. ``NAME`` and ``PARTS`` for ``run.py``.

* ``files``: describing a ~50 MB CSV and a ~50 MB parquet file through the confined describer
  (``agent/datafiles/describer.py``: a warm zygote forks a child under memory and CPU limits, the markdown comes back
  over a socket) vs today's way, the same parser in this process (``summaries.describe``), both warm,
  alternating; the median of each (information: the bound's own cost per file).
* ``start``: a run's start on a kernel from a warm pool with the ~50 MB CSV (the data checked, copied to
  the kernel and described while the setup cell runs), from ``stream`` to the model's first request, with
  the bound vs with the in-process parser swapped in, alternating, median of each; target ≤ 1.10×.
* ``schema`` (issue 51): describing a 50-table SQLite file (each table a few columns, keys, 2,000 rows: its
  tables and columns listed, each counted, sampled as room allows) vs a CSV holding the same 100,000 rows, both
  through the confined describer, alternating; the median of each (information: what a database's many small
  statements cost against one table's parse).
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
from bench_agent import _make_csv, _TimedModel
from report import Row, median, scaled

import kernel_agent.agent.datafiles.data as data_module
from kernel_agent.agent.datafiles.describer import describe as bounded
from kernel_agent.agent.datafiles.describer import start_describer
from kernel_agent.agent.datafiles.summaries import describe as in_process
from kernel_agent.agent.run.agent import AsyncAgent, warm_host
from kernel_agent.kernel.pool import KernelPool

NAME = "describe"
CSV_ROWS = 930_000  # ~50 MB, as bench_agent's analysis
TABLES = 50


def _files(folder: Path, quick: bool) -> tuple[Path, Path]:
    csv = folder / "big.csv"
    _make_csv(csv, scaled(quick, CSV_ROWS, 60_000, 2_000))
    rows = scaled(quick, 700_000, 40_000, 2_000)
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({f"x{i}": rng.standard_normal(rows) for i in range(9)})
    frame["label"] = rng.choice(["alpha", "beta", "gamma"], rows)
    parquet = folder / "big.parquet"
    frame.to_parquet(parquet, compression=None)  # ~50 MB on disk, as the row asks
    return csv, parquet


def _alternate(path: Path, count: int) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    for index in range(count):
        for side, describe, times in (("ours", bounded, ours), ("theirs", in_process, theirs))[:: 1 - 2 * (index % 2)]:
            started = time.perf_counter()
            text = describe(path)
            times.append(time.perf_counter() - started)
            if "rows" not in text:
                raise RuntimeError(f"{side} did not describe {path.name}: {text[:200]}")
    return ours, theirs


def files(quick: bool) -> list[Row]:
    """One file described by the confined describer vs in this process (information)."""
    folder = Path(tempfile.mkdtemp(prefix="ka-bench-describe-"))
    try:
        csv, parquet = _files(folder, quick)
        start_describer()
        in_process(csv), in_process(parquet)  # both sides warm: pandas' and pyarrow's first use paid
        rows = []
        for path, what in ((csv, "CSV"), (parquet, "parquet file")):
            ours, theirs = _alternate(path, scaled(quick, 11, 3, 1))
            size = path.stat().st_size / 1e6
            rows.append(
                Row(
                    f"describe a {size:.0f} MB {what}: confined worker (fork, limits, socket) vs in-process",
                    median(ours),
                    median(theirs),
                )
            )
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def start(quick: bool) -> list[Row]:
    """A warm run's start to the model's first request, the bound vs today's in-process description."""
    folder = Path(tempfile.mkdtemp(prefix="ka-bench-start-"))
    try:
        csv, _ = _files(folder, quick)
        ours, theirs = asyncio.run(_starts(csv, folder, scaled(quick, 7, 2, 1)))
        size = csv.stat().st_size / 1e6
        return [
            Row(
                f"a warm-pool run's start with a {size:.0f} MB CSV (to the first model request): "
                "described under the bound vs in-process",
                median(ours),
                median(theirs),
                max_ratio=1.1,
            )
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


async def _starts(csv: Path, folder: Path, count: int) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    async with KernelPool(size=1) as kernels:
        await asyncio.gather(kernels.wait_ready(), asyncio.to_thread(warm_host))
        await asyncio.to_thread(in_process, csv)
        for index in range(count):
            sides: list[tuple[Callable[[Path], str], list[float]]] = [(bounded, ours), (in_process, theirs)]
            for describe, times in sides[:: 1 - 2 * (index % 2)]:
                await kernels.wait_ready()
                with mock.patch.object(data_module, "describe", describe):  # the one name ``summaries`` calls
                    times.append(await _first_request(csv, folder / f"run-{len(ours) + len(theirs)}", kernels))
    return ours, theirs


async def _first_request(csv: Path, workspace: Path, kernels: KernelPool) -> float:
    model = _TimedModel(["<Answer>done</Answer>"])
    agent = AsyncAgent(protocol="tags", chat_model=model, max_rounds=2, session_factory=kernels.acquire)
    started = time.perf_counter()
    async with agent:
        async for _ in agent.stream("benchmark", data=[csv], workspace=workspace):
            pass
    return model.asked[0] - started


def _schema_files(folder: Path, rows: int) -> tuple[Path, Path]:
    """A SQLite file of ``TABLES`` tables of ``rows`` rows each (a key to the table before), and the CSV of all."""
    database, csv = folder / "schema.sqlite", folder / "schema.csv"
    rng = np.random.default_rng(5)
    frame = pd.DataFrame(
        {"id": np.arange(rows), "parent": rng.integers(0, rows, rows), "amount": rng.uniform(0, 100, rows).round(2),
         "label": rng.choice(["alpha", "beta", "gamma"], rows)}
    )  # fmt: skip
    connection = sqlite3.connect(database)
    try:
        for table in range(TABLES):
            parent = f"REFERENCES t{table - 1:02d}(id)" if table else ""
            connection.execute(
                f"CREATE TABLE t{table:02d}(id INTEGER PRIMARY KEY, parent INTEGER {parent}, amount REAL, label TEXT)"
            )
            connection.executemany(f"INSERT INTO t{table:02d} VALUES (?, ?, ?, ?)", frame.itertuples(index=False))
        connection.commit()
    finally:
        connection.close()
    pd.concat([frame] * TABLES).to_csv(csv, index=False)
    return database, csv


def schema(quick: bool) -> list[Row]:
    """A 50-table SQLite file vs a CSV of the same rows, both described under the bound (information)."""
    folder = Path(tempfile.mkdtemp(prefix="ka-bench-schema-"))
    try:
        database, csv = _schema_files(folder, scaled(quick, 2_000, 500, 20))
        start_describer()
        bounded(database), bounded(csv)  # both paths warm
        ours: list[float] = []
        theirs: list[float] = []
        for index in range(scaled(quick, 11, 3, 1)):
            for path, times in ((database, ours), (csv, theirs))[:: 1 - 2 * (index % 2)]:
                started = time.perf_counter()
                text = bounded(path)
                times.append(time.perf_counter() - started)
                if "rows" not in text:
                    raise RuntimeError(f"the describer did not describe {path.name}: {text[:200]}")
        return [
            Row(
                f"describe a {TABLES}-table SQLite file (confined describer) vs a CSV of the same rows",
                median(ours),
                median(theirs),
            )
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


PARTS = {"files": files, "start": start, "schema": schema}
