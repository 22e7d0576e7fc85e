"""Issue 51's benchmark: live PostgreSQL sources through the SQL broker. ``NAME`` and ``PARTS`` for ``run.py``.

Both rows with a target run inside one stock, unconfined ``python3`` ipykernel (plain jupyter_client), timed by
the kernel itself: the setup cell's ``sql()`` there, talking to a broker in this process (on a loop thread of
its own) over its Unix socket, vs psycopg imported in that same kernel with a connection of its own.

* ``query``: a 1 M-row query (an int, a float and a text column): ``sql()`` (the request on the socket, a
  server-side cursor on the host, Arrow batches, ``to_pandas`` in the kernel) vs psycopg in the kernel (one
  kept connection, ``fetchall`` into ``pandas.DataFrame``); alternating, median of each; target ≤ 1.3×.
* ``overhead``: a one-row query, ``sql("SELECT 1")`` vs psycopg's own on a kept connection, both in the
  kernel; the row with a target is the difference (the broker's per-query overhead, ≤ 5 ms).
* ``describe``: describing a 50-table schema (columns, keys, row counts) for the prompt (information).

PostgreSQL is the test suite's throwaway server (``tests/postgres.py``); without its binaries each row
says "not measured: no PostgreSQL" instead of failing the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from report import Row, median, scaled

from kernel_agent.kernel.inside import sql_client
from kernel_agent.sources import DescribeLimits, QueryLimits, open_source, parse_source

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brokers import running_broker
from postgres import PostgresServer, postgres_binaries

NAME = "sources"


_server: PostgresServer | None = None


@contextmanager
def _database() -> Iterator[str | None]:
    """A fresh database on the module's throwaway server (started at first use, stopped by ``close``), or
    None when PostgreSQL is not installed."""
    global _server
    try:
        postgres_binaries()
    except RuntimeError:
        yield None
        return
    if _server is None:
        scratch = Path(tempfile.gettempdir())
        if os.geteuid() == 0 and scratch != Path("/tmp"):
            scratch.chmod(0o711)  # PostgreSQL's own user must pass through to its cluster (as tests/leaks.py)
        _server = PostgresServer().__enter__()
    yield _server.database(f"bench_{uuid.uuid4().hex[:10]}")


def close() -> None:
    """Stop the module's server (the runner calls it after the last part)."""
    global _server
    server, _server = _server, None
    if server is not None:
        server.close()


@contextmanager
def _kernel(url: str) -> Iterator[Callable[[str], float]]:
    """A stock ``python3`` ipykernel, unconfined (started with plain jupyter_client, as a user starts one), its
    ``KERNEL_AGENT_SQL`` the socket of a broker serving ``url`` as source ``db``, with the setup cell's ``sql``
    (``sql_setup``'s text) and two psycopg connections to ``url`` of its own. Yields ``timed(expression)``: the
    seconds the kernel itself measured for evaluating ``expression`` there (the messages to and from it are
    not counted). Shut down, its folder removed, on exit."""
    from jupyter_client.manager import KernelManager

    from kernel_agent.agent.datafiles.data import sql_setup

    with running_broker({"db": open_source(parse_source(f"db={url}"))}, QueryLimits(timeout_s=300)) as broker:
        scratch = Path(tempfile.mkdtemp(prefix="bench-sources-"))
        manager = KernelManager(kernel_name="python3")
        manager.connection_file = str(scratch / "kernel.json")
        env = {**os.environ, "IPYTHONDIR": str(scratch / "ipython"), sql_client.SOCKET_ENV: str(broker.socket)}
        manager.start_kernel(env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)

            def run(code: str) -> str:
                printed: list[str] = []

                def hook(message: dict[str, Any]) -> None:
                    content = message["content"]
                    if message["msg_type"] == "stream" and content["name"] == "stdout":
                        printed.append(content["text"])

                reply = client.execute_interactive(code, output_hook=hook, timeout=600)
                if reply["content"]["status"] != "ok":
                    raise RuntimeError(f"the kernel failed: {reply['content'].get('evalue')}")
                return "".join(printed)

            run(sql_setup([], ["db"]))
            run(KERNEL_SIDE.format(url=json.dumps(url)))
            yield lambda expression: float(run(f"print(_timed(lambda: {expression}))"))
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
            shutil.rmtree(scratch, ignore_errors=True)


KERNEL_SIDE = """\
import time

import pandas
import psycopg

big = psycopg.connect({url})  # the baseline's kept connections, as a user of psycopg keeps one
small = psycopg.connect({url}, autocommit=True)


def _timed(call):
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def plain(text):
    with big.cursor() as cursor:
        cursor.execute(text)
        frame = pandas.DataFrame(cursor.fetchall(), columns=[column.name for column in cursor.description or []])
    big.rollback()
    return frame


def same(text, rows):
    if not len(sql(text)) == len(plain(text)) == rows:
        raise RuntimeError("a result is short")


def ones(count, through_broker):
    for _ in range(count):
        if through_broker:
            sql("SELECT 1 AS one")
        else:
            pandas.DataFrame(small.execute("SELECT 1 AS one").fetchall(), columns=["one"])
"""


def _alternate(timed: Callable[[str], float], ours: str, theirs: str, rounds: int) -> tuple[float, float]:
    """The kernel's own times for ``ours`` and ``theirs`` (expressions), alternating, after a warm-up: medians."""
    mine: list[float] = []
    plain: list[float] = []
    timed(ours), timed(theirs)  # warm-up, discarded
    for index in range(rounds):
        for side, out in ((ours, mine), (theirs, plain))[:: 1 - 2 * (index % 2)]:
            out.append(timed(side))
    return median(mine), median(plain)


def _absent(*metrics: str) -> list[Row]:
    return [Row(f"{metric} — not measured: no PostgreSQL", 0.0) for metric in metrics]


def query(quick: bool) -> list[Row]:
    rows = scaled(quick, 1_000_000, 200_000, 1_000)
    metric = f"sources: {rows:,}-row query in a kernel, sql() via the broker vs psycopg there"
    text = json.dumps(f"SELECT n, n * 0.5 AS half, 'row ' || n AS label FROM generate_series(1, {rows}) AS n")
    with _database() as url:
        if url is None:
            return _absent(metric)
        with _kernel(url) as timed:
            timed(f"same({text}, {rows})")  # both whole (raises in the kernel, so here, when one is short)
            ours, theirs = _alternate(timed, f"sql({text})", f"plain({text})", scaled(quick, 5, 2, 1))
    return [Row(metric, ours, theirs, max_ratio=1.3)]


def overhead(quick: bool) -> list[Row]:
    metric = "sources: one-row query in a kernel, sql() via the broker vs psycopg there"
    extra = "sources: the broker's per-query overhead (ours − psycopg's)"
    with _database() as url:
        if url is None:
            return _absent(metric, extra)
        with _kernel(url) as timed:
            count = scaled(quick, 40, 10, 1)
            ours, theirs = _alternate(timed, f"ones({count}, True)", f"ones({count}, False)", scaled(quick, 10, 3, 1))
    ours, theirs = ours / count, theirs / count
    return [Row(metric, ours, theirs), Row(extra, max(0.0, ours - theirs), max_seconds=0.005)]


def describe(quick: bool) -> list[Row]:
    tables = scaled(quick, 50, 50, 5)
    metric = f"sources: describing a {tables}-table schema"
    with _database() as url:
        if url is None:
            return _absent(metric)
        with psycopg.connect(url, autocommit=True) as connection:
            for index in range(tables):
                parent = f", parent integer REFERENCES t{index - 1} (id)" if index else ""
                connection.execute(
                    f"CREATE TABLE t{index} (id integer PRIMARY KEY, label text, amount numeric(12, 2), "
                    f"at timestamptz{parent})".encode()
                )
                connection.execute(
                    f"INSERT INTO t{index} (id, label) SELECT n, 'x' FROM generate_series(1, 100) n".encode()
                )
        source = open_source(parse_source(url))
        try:
            times = []
            for _ in range(scaled(quick, 7, 3, 1)):
                started = time.perf_counter()
                text = source.describe(DescribeLimits())
                times.append(time.perf_counter() - started)
                if f"### public.t{tables - 1} " not in text:
                    raise RuntimeError("the description is short")
        finally:
            source.close()
    return [Row(metric, median(times))]


PARTS = {"query": query, "overhead": overhead, "describe": describe}
