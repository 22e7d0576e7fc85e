"""Which text columns of a table hold dates, and in which order: ``date_columns``.

Owns recognising numeric dates in string columns (``23/01/2024``,
``01-23-24``, ``2024-01-23 10:00``) and telling day-first from month-first
by the values themselves: a first number above 12 means day-first, a second
one above 12 month-first, neither means the order cannot be told. This
matters because ``pd.read_csv(parse_dates=...)`` without ``dayfirst``
silently keeps such a column as strings (or swaps day and month). Used by
``summaries.py`` for the prompt's data summary. Pure: a frame in, lines out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DateColumn", "date_columns", "describe_dates"]

Order = Literal["year-first", "day-first", "month-first", "ambiguous"]

_DATE = re.compile(r"^\s*(\d{1,4})([/.\-])(\d{1,2})\2(\d{2}|\d{4})(?:[ T]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?\s*$")
SAMPLE = 500
MIN_SHARE = 0.9  # of the non-empty sampled values that must look like dates


@dataclass(frozen=True)
class DateColumn:
    """A text column that holds dates: its name, the order of day and month, a ``strftime`` format, an example."""

    name: str
    order: Order
    format: str
    example: str


def date_columns(frame: pd.DataFrame) -> list[DateColumn]:
    """The string columns of ``frame`` whose values look like numeric dates. Raises nothing."""
    found = []
    for name in frame.columns:
        column = frame[name]
        if column.dtype.kind not in "OSU" and str(column.dtype) not in ("str", "string"):
            continue
        values = [str(v) for v in column.dropna().head(SAMPLE) if str(v).strip()]
        parsed = _date_parts(values)
        if values and len(parsed) >= MIN_SHARE * len(values):
            found.append(_classify(str(name), parsed))
    return found


def describe_dates(columns: Iterable[DateColumn]) -> str:
    """One prompt line naming the date columns and how to parse them ("" when there are none)."""
    parts = []
    for col in columns:
        how = {
            "year-first": f"year first (e.g. {col.example}): `parse_dates` reads it as is",
            "day-first": f"day first (e.g. {col.example}): parse with `dayfirst=True` or `format='{col.format}'`",
            "month-first": f"month first (e.g. {col.example}): parse with `format='{col.format}'`",
            "ambiguous": f"day and month order cannot be told (every value ≤ 12, e.g. {col.example})",
        }[col.order]
        parts.append(f"`{col.name}` {how}")
    return ("Dates stored as text: " + "; ".join(parts) + ".") if parts else ""


def _date_parts(values: list[str]) -> list[tuple[str, str, str, str, str]]:
    out = []
    for value in values:
        match = _DATE.match(value)
        if match:
            out.append((match[1], match[2], match[3], match[4], value.strip()))
    return out


def _classify(name: str, parsed: list[tuple[str, str, str, str, str]]) -> DateColumn:
    first, sep, _, last, example = parsed[0]
    timed = " %H:%M" if ":" in example else ""
    if len(first) == 4:
        return DateColumn(name, "year-first", f"%Y{sep}%m{sep}%d{timed}", example)
    year = "%Y" if len(last) == 4 else "%y"
    day_first = [p for p in parsed if int(p[0]) > 12]
    month_first = [p for p in parsed if int(p[2]) > 12]
    if day_first and not month_first:
        return DateColumn(name, "day-first", f"%d{sep}%m{sep}{year}{timed}", day_first[0][4])
    if month_first and not day_first:
        return DateColumn(name, "month-first", f"%m{sep}%d{sep}{year}{timed}", month_first[0][4])
    return DateColumn(name, "ambiguous", "", example)
