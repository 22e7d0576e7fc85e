"""Dirty columns named for the model: ``dirty_lines``.

A table's summary lists dtypes and pandas' missing counts, which say nothing when a numeric column
was read as text because a few cells hold ``'undefined'`` or ``'\\t456\\t41'``, or when missing values
are written as tokens pandas does not treat as missing (``undefined``, ``-``, ``?``). This module
finds, in a frame already read, the text columns that are mostly numbers (with the values that are
not, and their counts) and the missing-like tokens in any text column. Pure; bounded output (values
clipped, a few per column, at most ``MAX_DIRTY_COLUMNS`` columns).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MISSING_LIKE", "dirty_lines"]

# Written for "no value" in real files; pandas' default na_values already covers "", "NA", "N/A", "null",
# "NaN", "None" and others, so these are what a summary would otherwise call values.
MISSING_LIKE = frozenset({"", "undefined", "na", "n/a", "-", "--", "?", "null", "none", "nan", "missing", "."})
MAX_DIRTY_COLUMNS = 10
MAX_VALUES = 5  # offending values named per column
MAX_VALUE_CHARS = 30
MOSTLY = 0.8  # a text column is "mostly numbers" when at least this share of its values parse as numbers


def dirty_lines(frame: pd.DataFrame) -> list[str]:
    """Lines for a summary: text columns that are mostly numbers and what else they hold, and missing-like
    tokens stored as text. Empty when there is nothing to say. Raises nothing for any frame."""
    numeric, missing = [], []
    for name in frame.columns:
        column = frame[name]
        if column.dtype.kind not in "OSU" and str(column.dtype) not in ("str", "string"):
            continue
        values = Counter(str(v) for v in column.dropna())
        if not values:
            continue
        tokens = {v: n for v, n in values.items() if v.strip().lower() in MISSING_LIKE}
        others = {v: n for v, n in values.items() if v not in tokens and not _number(v)}
        total = sum(values.values())
        parsed = total - sum(tokens.values()) - sum(others.values())
        if parsed and parsed >= MOSTLY * total and (tokens or others):
            shown = _values({**others, **tokens}, tokens)
            numeric.append(f"`{name}` ({parsed:,} of {total:,} values are numbers; the others: {shown})")
        elif tokens:
            missing.append(f"`{name}` {_values(tokens, tokens)}")
    lines = []
    if numeric:
        lines.append("Text columns holding mostly numbers: " + "; ".join(_bounded(numeric)))
    if missing:
        lines.append("Missing-like values stored as text: " + "; ".join(_bounded(missing)))
    return lines


def _number(value: str) -> bool:
    text = value.strip().replace(",", "") if value.count(",") and "." not in value else value.strip()
    try:
        float(text)
    except ValueError:
        return False
    return bool(text)


def _values(found: dict[str, int], tokens: dict[str, Any]) -> str:
    ranked = sorted(found.items(), key=lambda item: (-item[1], item[0]))
    parts = []
    for value, count in ranked[:MAX_VALUES]:
        shown = repr(value if len(value) <= MAX_VALUE_CHARS else value[: MAX_VALUE_CHARS - 1] + "…")
        parts.append(f"{shown} ×{count:,}" + (" (missing-like)" if value in tokens else ""))
    more = f", … {len(ranked) - MAX_VALUES:,} more" if len(ranked) > MAX_VALUES else ""
    return ", ".join(parts) + more


def _bounded(items: list[str]) -> list[str]:
    return items[:MAX_DIRTY_COLUMNS] + (
        [f"… {len(items) - MAX_DIRTY_COLUMNS} more"] if len(items) > MAX_DIRTY_COLUMNS else []
    )
