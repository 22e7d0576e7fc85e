"""What legitimately changes between two runs of the same code, hidden for ``replay --check``: ``normalise_text``.

Pure. ``RULES`` is the documented list, each rule with a name, what it hides, the placeholder it
leaves and an example (``tests/test_normalise.py`` runs every example). Everything else is kept as it
is, so a changed number in a result still differs: only tokens of these shapes are replaced.

1. ``datetime`` — an ISO date, optionally with a time of day, fraction (``.123`` or logging's ``,123``)
   and zone, within a day of an anchor (the recording's start or end, or now): ``<now>``. A date far
   from those is data, and kept.
2. ``named_date`` — a date as libraries print it (``Fri, 27 Nov 2026``, statsmodels' ``Date:``;
   ``Fri Nov 27 02:30:28 2026``, ``time.ctime()``), within a day of an anchor: ``<now>``.
3. ``address`` — a memory address (``0x7f3a2c1d5e10``, 4 or more hex digits): ``0x?``.
4. ``elapsed`` — an elapsed time written as a clock with a fraction (``0:00:01.532211``): ``<duration>``.
5. ``clock`` — a time of day after a label saying it is one (``Time:``, ``time``, ``at``,
   ``started``, ``finished``, ``[``): statsmodels' ``Time: 23:23:54``: the label and ``<time>``.
   A bare ``08:00:00`` in a table is data, and kept.
6. ``duration`` — a number with a unit of time (``1.25 s``, ``340 ms``, ``12.3 µs``, ``2 min``): ``<duration>``.
7. ``loops`` — timeit's loop count (``100,000 loops``): ``<n> loops``.
8. ``temp_path`` — the first component of a path under the temporary folder (``/tmp/tmpa1b2c3/x.csv``):
   ``<tmp>/x.csv``.
9. ``paths`` given by the caller (the workspace and the replay's own folder): ``<workspace>``.

Before the rules, ANSI codes are stripped and what a terminal overwrites (``\\r``) is resolved.
Matching is one pass of one regular expression (linear in the text's length).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from ..kernel.outputs import resolve_carriage_returns
from ..result import strip_ansi

__all__ = ["RULES", "Rule", "normalise_text"]

_RECENT = timedelta(days=1)
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"


@dataclass(frozen=True)
class Rule:
    """One kind of token that changes between runs: its ``pattern`` (a named group ``name``), what it
    becomes (``placeholder``; rules about dates keep a token far from the anchors), and an ``example``
    as (text, normalised) with the anchor day 2026-11-27."""

    name: str
    pattern: str
    placeholder: str
    what: str
    example: tuple[str, str]


RULES: tuple[Rule, ...] = (
    Rule(
        "datetime",
        r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
        "<now>",
        "an ISO date or date and time within a day of the recording or the replay",
        ("run at 2026-11-27 10:03:11,123 from 2019-06-30", "run at <now> from 2019-06-30"),
    ),
    Rule(
        "named_date",
        rf"\b{_DAY},? (?:\d{{1,2}} {_MONTH} \d{{4}}|{_MONTH} [ \d]\d \d{{2}}:\d{{2}}:\d{{2}} \d{{4}})\b",
        "<now>",
        "a date as libraries print it (statsmodels' Date:, time.ctime()) within a day of the recording or replay",
        ("Date: Fri, 27 Nov 2026 / Thu Nov 26 23:59:01 2026", "Date: <now> / <now>"),
    ),
    Rule(
        "address",
        r"\b0x[0-9a-fA-F]{4,}\b",
        "0x?",
        "a memory address",
        ("<Line2D at 0x7f3a2c1d5e10>", "<Line2D at 0x?>"),
    ),
    Rule(
        "elapsed",
        r"\b\d+:\d{2}:\d{2}\.\d+\b",
        "<duration>",
        "an elapsed time as a clock with a fraction",
        ("elapsed 0:00:01.532211", "elapsed <duration>"),
    ),
    Rule(
        "clock",
        r"(?:\b(?:[Tt]ime|TIME|at|[Ss]tarted|[Ff]inished)\b:?[ \t]*|\[)\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\b",
        "<time>",
        "a time of day after a label saying it is one (Time:, at, started, finished, [)",
        ("Time:                    23:23:54 | slot 08:00:00", "Time:                    <time> | slot 08:00:00"),
    ),
    Rule(
        "duration",
        r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ns|[µμu]s|ms|s|secs?|seconds?|mins?|minutes?|h|hours?)\b",
        "<duration>",
        "a number with a unit of time",
        ("took 1.25 s; 340 ms per step", "took <duration>; <duration> per step"),
    ),
    Rule(
        "loops",
        r"\b\d[\d,]* loops?\b",
        "<n> loops",
        "timeit's loop count",
        ("7 runs, 100,000 loops each", "7 runs, <n> loops each"),
    ),
    Rule(
        "temp_path",
        r"(?<![\w/])(?:/private)?(?:/tmp|/var/tmp|/var/folders/\w+/\w+/T)/[^\s/'\"<>]+",
        "<tmp>",
        "the first component of a path under the temporary folder",
        ("wrote /tmp/tmpa1b2c3/x.csv", "wrote <tmp>/x.csv"),
    ),
)
_TOKEN = re.compile("|".join(f"(?P<{rule.name}>{rule.pattern})" for rule in RULES))
_PLACEHOLDER = {rule.name: rule.placeholder for rule in RULES}
_CLOCK = re.compile(r"\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?$")
_NAMED_FORMATS = ("%a, %d %b %Y", "%a %d %b %Y", "%a %b %d %H:%M:%S %Y", "%a, %b %d %H:%M:%S %Y")


def normalise_text(text: str, *, anchors: Sequence[datetime] = (), paths: Sequence[str] = ()) -> str:
    """``text`` with what legitimately changes between runs replaced by placeholders (``RULES``).

    ``anchors`` are the moments a date must be within a day of to count as "now"; ``paths`` are
    folders (the workspace, the replay's folder) replaced by ``<workspace>``.
    """
    text = resolve_carriage_returns(strip_ansi(text))  # what a terminal overwrites, as nbclient's coalescing does
    for folder in sorted((p for p in paths if p), key=len, reverse=True):
        text = text.replace(folder, "<workspace>")
    days = [anchor.date() for anchor in anchors]
    return _TOKEN.sub(_replacer(days), text)


def _replacer(days: Sequence[date]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        kind = match.lastgroup or ""
        token = match.group()
        if kind == "datetime":
            return "<now>" if _near(_iso_day(token), days) else token
        if kind == "named_date":
            return "<now>" if _near(_named_day(token), days) else token
        if kind == "clock":
            return _CLOCK.sub("<time>", token)
        return _PLACEHOLDER[kind]

    return replace


def _iso_day(stamp: str) -> date | None:
    try:
        return date.fromisoformat(stamp[:10])
    except ValueError:
        return None


def _named_day(stamp: str) -> date | None:
    squeezed = " ".join(stamp.split())
    for layout in _NAMED_FORMATS:
        try:
            return datetime.strptime(squeezed, layout).date()
        except ValueError:
            continue
    return None


def _near(day: date | None, days: Sequence[date]) -> bool:
    return day is not None and any(abs(day - anchor) <= _RECENT for anchor in days)
