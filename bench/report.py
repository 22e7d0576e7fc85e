"""Benchmark rows and the table they make: ``Row``, ``render``, ``median``, ``p95``; and ``Scale``, how
big a run is (``scaled`` picks a part's size for it).

Owns the one value every benchmark module returns (a ``Row``: a metric, our
time (or size), a baseline's, a target) and its two renderings, plain text for a
terminal and markdown for ``bench/README.md``. Pure: no kernels, no clocks.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

__all__ = ["Row", "Scale", "median", "p95", "render", "scaled"]

T = TypeVar("T")


class Scale(enum.IntEnum):
    """How big a run is. A part receives it as its one argument (``quick``): true for ``QUICK`` and
    ``SMOKE``, so ``x if quick else y`` still reads as before; ``scaled`` tells the three apart."""

    FULL = 0  # numbers to quote
    QUICK = 1  # few iterations: numbers to glance at
    SMOKE = 2  # each part once at tiny sizes, for CI: it must not raise; its numbers mean nothing


def scaled(scale: int, full: T, quick: T, smoke: T) -> T:
    """The size for ``scale`` (a ``Scale``; a plain bool reads as FULL or QUICK)."""
    return smoke if scale == Scale.SMOKE else quick if scale else full


HEADER = ("metric", "ours", "baseline", "ratio / target", "pass?")


@dataclass(frozen=True)
class Row:
    """One line of the table. Times are seconds.

    ``ratio`` is always ours / baseline, so below 1 means we are faster.
    ``max_ratio`` or ``max_seconds`` (at most one) is the target; without
    either the row is for information and ``passed`` is None. ``unit`` is
    ``"MiB"`` for a row of memory sizes (ours and baseline in MiB; a ratio
    target only).
    """

    metric: str
    ours: float
    baseline: float | None = None
    max_ratio: float | None = None
    max_seconds: float | None = None
    unit: Literal["s", "MiB"] = "s"

    def __post_init__(self) -> None:
        if self.max_ratio is not None and self.max_seconds is not None:
            raise ValueError("a row has one target: max_ratio or max_seconds")
        if self.unit != "s" and self.max_seconds is not None:
            raise ValueError("a row of sizes has no max_seconds target")
        if self.max_ratio is not None and self.baseline is None:
            raise ValueError("a ratio target needs a baseline")

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline <= 0:
            return None
        return self.ours / self.baseline

    @property
    def passed(self) -> bool | None:
        if self.max_ratio is not None:
            return self.ratio is not None and self.ratio <= self.max_ratio
        if self.max_seconds is not None:
            return self.ours <= self.max_seconds
        return None

    def cells(self) -> tuple[str, str, str, str, str]:
        ratio = "" if self.ratio is None else f"{self.ratio:.2f}×"
        if self.max_ratio is not None:
            target = f"≤ {self.max_ratio:.2f}×"
        elif self.max_seconds is not None:
            target = f"< {format_seconds(self.max_seconds)}"
        else:
            target = ""
        joined = " · ".join(part for part in (ratio, f"target {target}" if target else "") if part) or "–"
        verdict = {True: "yes", False: "NO", None: "–"}[self.passed]
        show = format_seconds if self.unit == "s" else format_mib
        baseline = "–" if self.baseline is None else show(self.baseline)
        return self.metric, show(self.ours), baseline, joined, verdict


def format_seconds(value: float) -> str:
    """A time with a unit a reader can take in at a glance (µs, ms or s)."""
    if value < 1e-5:
        return f"{value * 1e6:.2f} µs"  # a per-event cost: whole µs would round 0.6 and 1.4 alike
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 0.01:
        return f"{value * 1e3:.2f} ms"
    if value < 1:
        return f"{value * 1e3:.0f} ms"
    return f"{value:.2f} s"


def format_mib(value: float) -> str:
    """A memory size in MiB."""
    return f"{value:.1f} MiB"


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def p95(values: Sequence[float]) -> float:
    """The 95th percentile, nearest rank (no interpolation)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]


def render(rows: Sequence[Row], *, markdown: bool = False) -> str:
    """The rows as an aligned text table, or as a markdown table."""
    lines = [HEADER, *(row.cells() for row in rows)]
    if markdown:
        out = [_md(lines[0]), _md(("---", "---:", "---:", "---", ":---:"))]
        out += [_md(line) for line in lines[1:]]
        return "\n".join(out)
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    text = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines]
    text.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(text)


def _md(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
