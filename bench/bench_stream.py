"""Issue 16's benchmark of partial output: what ``execute(on_output=...)`` costs. ``NAME`` and ``PARTS``.

* ``chatty``: a cell printing 200,000 short lines, through one
  ``KernelSession``, with an ``on_output`` callback against without one,
  alternating on the same kernel. The callback only keeps the chunks, so
  the row measures the throttle, not what a front end does with the text.
  The metric names how many chunks one execution produced (the throttle:
  the first at once, then at most one per 0.5 s, plus the rest at the end).

Both sides must print every line: a fast wrong answer raises.
"""

from __future__ import annotations

import time

from report import Row, Scale, median, scaled

from kernel_agent.kernel.partial import OutputChunk
from kernel_agent.kernel.session_sync import KernelSession

NAME = "stream"

CHATTY = "for i in range({lines}):\n    print('line', i)"


def chatty(quick: Scale) -> list[Row]:
    """Median seconds of the chatty cell (200,000 lines; 20,000 in a smoke run) with and without ``on_output``,
    alternating."""
    rounds, lines = scaled(quick, (9, 200_000), (3, 200_000), (1, 20_000))
    cell, last_line = CHATTY.format(lines=lines), f"line {lines - 1}\n"
    with_callback: list[float] = []
    without: list[float] = []
    chunk_counts: list[int] = []
    with KernelSession() as session:
        if quick != Scale.SMOKE:
            session.execute(cell)  # warm-up, discarded
        for index in range(rounds):
            for streamed in (True, False) if index % 2 == 0 else (False, True):
                chunks: list[OutputChunk] = []
                started = time.perf_counter()
                result = session.execute(cell, on_output=chunks.append if streamed else None)
                elapsed = time.perf_counter() - started
                if not (result.ok and result.stdout.endswith(last_line)):
                    raise AssertionError(f"the chatty cell went wrong: {result!r}")
                if streamed:
                    if not chunks or not "".join(c.text for c in chunks[-1:]).endswith(last_line):
                        raise AssertionError("the last chunk does not end with the last line")
                    with_callback.append(elapsed)
                    chunk_counts.append(len(chunks))
                else:
                    without.append(elapsed)
    chunks_seen = f"{min(chunk_counts)}–{max(chunk_counts)}"
    return [
        Row(
            f"{lines:,}-line cell, median of {rounds}: execute with on_output ({chunks_seen} chunks) vs without",
            median(with_callback),
            median(without),
            max_ratio=1.05,
        ),
    ]


PARTS = {"chatty": chatty}
