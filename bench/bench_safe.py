"""Issue 35's benchmark: what making kernel output safe to show costs, per call. ``NAME`` and ``PARTS`` for ``run.py``.

* ``html``: a 1 MB HTML output (a pandas table, the usual large HTML a kernel sends) cleaned by
  ``safe.html.clean_html`` (nh3), and the same as a display bundle through ``safe_bundle``, against a
  plain copy of the same text (what re-displaying it raw cost: nothing but the copy).
* ``terminal``: a 10,000-line stdout (progress lines with a few colour codes, as a training loop prints)
  through ``safe.terminal.printable``, against a plain copy.

The rows inform (a copy is the floor, not a rival) and carry an absolute ceiling: a 1 MB output (about 30,000
table cells: parsing it is most of the cost, nh3 with its defaults takes the same) must be
cleaned well within a round's own time, 10,000 lines well within a redraw.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from report import Row, median, scaled

from kernel_agent.safe.html import clean_html, safe_bundle
from kernel_agent.safe.terminal import printable

NAME = "safe"


def _per_call(function: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return median(times)


def _alternate(ours: Callable[[], object], plain: Callable[[], object], rounds: int) -> tuple[float, float]:
    ours(), plain()  # warm-up, discarded
    mine: list[float] = []
    copies: list[float] = []
    for index in range(rounds):
        pair = ((ours, mine), (plain, copies)) if index % 2 == 0 else ((plain, copies), (ours, mine))
        for side, out in pair:
            out.append(_per_call(side, 3))
    return median(mine), median(copies)


def _table_html(size: int) -> str:
    import pandas as pd

    rows = 1000
    while True:
        frame = pd.DataFrame({"name": [f"item {i}" for i in range(rows)], "value": range(rows), "x": [0.5] * rows})
        page: str = frame.to_html()
        if len(page) >= size:
            return page[: page.rindex("</tr>", 0, size) + 5] + "</tbody></table>"
        rows *= 2


def html(quick: bool) -> list[Row]:
    page = _table_html(1_000_000)
    bundle = {"text/html": page, "text/plain": "table"}
    if "<td>item 1</td>" not in clean_html(page):
        raise AssertionError("the cleaned table lost its cells")
    rounds = scaled(quick, 9, 3, 1)
    cleaned, copied = _alternate(lambda: clean_html(page), lambda: page.encode().decode(), rounds)
    bundled, _ = _alternate(lambda: safe_bundle(bundle), lambda: dict(bundle), rounds)
    return [
        Row("clean a 1 MB HTML output (nh3) vs a plain copy", cleaned, copied, max_seconds=1.0),
        Row("a 1 MB HTML bundle through safe_bundle vs a plain copy", bundled, copied, max_seconds=1.0),
    ]


def terminal(quick: bool) -> list[Row]:
    lines = [f"\x1b[32mepoch {i}\x1b[0m loss {1 / (i + 1):.6f}\tlr 0.001 {'#' * (i % 40)}" for i in range(10_000)]
    stdout = "\n".join(lines) + "\n"
    if "\x1b" in printable(stdout):
        raise AssertionError("an escape got through")
    ours, copied = _alternate(lambda: printable(stdout), lambda: stdout.encode().decode(), 5 if quick else 15)
    return [Row("a 10,000-line stdout through printable vs a plain copy", ours, copied, max_seconds=0.1)]


PARTS = {"html": html, "terminal": terminal}
