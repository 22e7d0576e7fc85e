"""Scoring one answer against its labels, and the suite's metrics over many: pure functions.

Owns ``parse_answers`` (the ``@name[value]`` pairs of a final answer, as InfiAgent-DABench's own
evaluation reads them: ``@`` + word characters + ``[`` + the shortest text up to ``]``; a name given
twice keeps its last value), the comparison rules (``Label.rule``), ``score`` (one question's
``Score``: what was parsed, which sub-answers are right and why the others are not) and ``metrics``
(the official three: accuracy by question, by sub-answer, and proportional by sub-answer).

DABench's rule, from its ``eval_closed_form.py``: a sub-answer is right when its text equals the label's,
or both read as numbers within 1e-6; a name the labels give several values (DABench 734 gives five) is
scored against its last, as that script's ``{name: value}`` keeps it (the result line's ``expected``
shows every value). One deliberate difference: the official script leaves a question
with an empty response out of every total; here it counts as wrong, so silence never raises a score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Literal

from .suite import Label

__all__ = ["Metrics", "Score", "Verdict", "compare", "metrics", "parse_answers", "score"]

_ANSWER = re.compile(r"@(\w+)\[(.*?)\]", re.DOTALL)
_DEFAULT_TOLERANCE = 1e-6
Verdict = Literal["correct", "wrong", "no_answer", "format"]


def parse_answers(text: str) -> dict[str, str]:
    """The ``@name[value]`` answers in ``text``, by name (a repeated name keeps its last value)."""
    return {name: value for name, value in _ANSWER.findall(text)}


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _decimals(text: str) -> int:
    try:
        exponent = Decimal(text.strip()).as_tuple().exponent
    except InvalidOperation:
        return 0
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def compare(given: str | None, label: Label) -> str | None:
    """Why ``given`` does not match ``label`` under its rule, or None when it does."""
    if given is None:
        return "not in the answer"
    if label.rule in ("exact", "dabench") and given == label.value:
        return None
    if label.rule == "case-insensitive":
        return (
            None if given.strip().casefold() == label.value.strip().casefold() else f"{given!r} is not {label.value!r}"
        )
    if label.rule == "exact":
        return f"{given!r} is not {label.value!r}"
    got, want = _number(given), _number(label.value)
    if got is None or want is None:
        return f"{given!r} is not {label.value!r}" + ("" if want is None else " (not a number)")
    if label.precision == "label":
        places = _decimals(label.value)
        rounded = round(got, places)
        return (
            None
            if math.isclose(rounded, want, abs_tol=10.0 ** -(places + 6))
            else f"{given} rounds to {rounded:.{places}f}, not {label.value}"
        )
    tolerance = label.tolerance if label.tolerance is not None else _DEFAULT_TOLERANCE
    difference = abs(got - want)
    return (
        None
        if difference < tolerance or difference == 0
        else f"|{given} - {label.value}| = {difference:.3g} > {tolerance:g}"
    )


@dataclass(frozen=True)
class Score:
    """One question's score: ``correct`` and ``why`` (the failed ones) by label name, what was parsed."""

    verdict: Verdict
    parsed: dict[str, str] = field(default_factory=dict)
    correct: dict[str, bool] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)


def score(answer: str | None, labels: Sequence[Label]) -> Score:
    """Score a final ``answer`` (None: the run gave none) against the question's ``labels``."""
    if answer is None:
        return Score(
            "no_answer", {}, {label.name: False for label in labels}, {label.name: "no answer" for label in labels}
        )
    parsed = parse_answers(answer)
    why = {}
    for label in {label.name: label for label in labels}.values():  # a repeated name: its last value
        reason = compare(parsed.get(label.name), label)
        if reason is not None:
            why[label.name] = reason if parsed else "no @name[value] answer in the reply"
    correct = {label.name: label.name not in why for label in labels}
    verdict: Verdict = "correct" if not why else ("wrong" if parsed else "format")
    return Score(verdict, parsed, correct, why)


@dataclass(frozen=True)
class Metrics:
    """The official metrics over ``questions`` scored questions (ratios in 0..1; 0 when there are none)."""

    questions: int
    questions_correct: int
    sub_answers: int
    sub_answers_correct: int
    proportional: float

    @property
    def by_question(self) -> float:
        return self.questions_correct / self.questions if self.questions else 0.0

    @property
    def by_sub_answer(self) -> float:
        return self.sub_answers_correct / self.sub_answers if self.sub_answers else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {
            "questions": self.questions,
            "questions_correct": self.questions_correct,
            "accuracy_by_question": round(self.by_question, 4),
            "sub_answers": self.sub_answers,
            "sub_answers_correct": self.sub_answers_correct,
            "accuracy_by_sub_answer": round(self.by_sub_answer, 4),
            "accuracy_proportional_by_sub_answer": round(self.proportional, 4),
        }


def metrics(correctness: Iterable[dict[str, bool]]) -> Metrics:
    """The metrics over scored questions, each given as its ``correct`` mapping."""
    rows = list(correctness)
    proportional = sum(sum(row.values()) / len(row) for row in rows if row) / len(rows) if rows else 0.0
    return Metrics(
        questions=len(rows),
        questions_correct=sum(1 for row in rows if row and all(row.values())),
        sub_answers=sum(len(row) for row in rows),
        sub_answers_correct=sum(sum(row.values()) for row in rows),
        proportional=proportional,
    )
