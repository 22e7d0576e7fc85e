"""A small benchmark suite the eval tests (and bench/bench_eval.py) write themselves, in both layouts,
and a scripted model for ``tests/openai_server.py`` that answers it.

Each question's text carries ``(case ID)``; ``ScriptedAnalyst`` reads it from the request's first user
message and the round from the assistant messages so far, so it answers right however the questions
interleave (``--concurrency N``). Label values are unusual numbers and words that appear in no table,
prompt or data summary, so finding one in a request, a kernel's output or a workspace means a leak.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openai_server import Reply, python_call

__all__ = ["DABENCH", "GENERIC", "ScriptedAnalyst", "Step", "label_values", "write_dabench", "write_generic"]

_CASE = re.compile(r"\(case ([\w-]+)\)")


@dataclass(frozen=True)
class Step:
    """One reply: ``code`` to run, else ``answer`` text; ``pause`` seconds before it comes."""

    code: str | None = None
    answer: str | None = None
    pause: float = 0.0


@dataclass(frozen=True)
class Case:
    id: str
    question: str
    file: str | None
    level: str
    concepts: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    steps: tuple[Step, ...]
    format: str = ""
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)


def _look(file: str) -> Step:
    """Round 1 of most cases: read the table, and show whether the suite's labels are in reach."""
    return Step(code=f"import os\nprint('LABELS-VISIBLE', os.path.exists(LABELS))\nprint(pd.read_csv({file!r}).shape)")


# Six DABench questions: right, half right (two parts), no @format, wrong, a model that times out, right (two parts).
DABENCH = (
    Case(
        "0",
        "What is the mean of x?",
        "t1.csv",
        "easy",
        ("Summary Statistics",),
        (("mean_x", "41.0873"),),
        (_look("t1.csv"), Step(answer="The mean is @mean_x[41.0873].")),
        "@mean_x[mean] rounded to 4 decimals.",
    ),
    Case(
        "1",
        "How are a and b related?",
        "t2.csv",
        "medium",
        ("Correlation Analysis", "Summary Statistics"),
        (("corr", "0.9731"), ("kind", "quasilinear")),
        (_look("t2.csv"), Step(answer="@corr[0.9731000] @kind[nonlinear]")),
        "@corr[r] @kind[type]",
    ),
    Case(
        "2",
        "How many outliers are in x?",
        "t1.csv",
        "easy",
        ("Outlier Detection",),
        (("outliers", "6174"),),
        (_look("t1.csv"), Step(answer="There are 6174 outliers.")),
        "@outliers[count]",
    ),
    Case(
        "3",
        "What accuracy does a model reach?",
        "t2.csv",
        "hard",
        ("Machine Learning",),
        (("acc", "0.7788"),),
        (_look("t2.csv"), Step(answer="@acc[0.8123]")),
        "@acc[accuracy]",
    ),
    Case(
        "4",
        "What is the median of b?",
        "t2.csv",
        "medium",
        ("Summary Statistics",),
        (("median_b", "88.2217"),),
        (Step(answer="@median_b[88.2217]", pause=30.0),),
        "@median_b[median]",
    ),
    Case(
        "5",
        "Is x skewed?",
        "t1.csv",
        "easy",
        ("Distribution Analysis",),
        (("skew", "0.5931"), ("normal", "yes-zq")),
        (_look("t1.csv"), Step(answer="@normal[yes-zq]\n@skew[0.593100]")),
        "@skew[s] @normal[a word]",
    ),
)

# The generic layout: each rule, a missing data file, and a kernel that dies mid-run.
GENERIC = (
    Case(
        "g1",
        "Estimate pi.",
        "t1.csv",
        "easy",
        ("Numbers",),
        (("pi", "3.14"),),
        (_look("t1.csv"), Step(answer="@pi[3.14159]")),
        rules={"pi": {"rule": "numeric", "precision": "label"}},
    ),
    Case(
        "g2",
        "Name the animal and its code.",
        "t2.csv",
        "medium",
        ("Words",),
        (("animal", "Zebra-Quartz"), ("code", "ab-1")),
        (_look("t2.csv"), Step(answer="@animal[zebra-quartz] @code[AB-1]")),
        rules={"animal": {"rule": "case-insensitive"}, "code": {"rule": "exact"}},
    ),
    Case(
        "g3",
        "Roughly how many?",
        "t1.csv",
        "easy",
        ("Numbers",),
        (("n", "1043"),),
        (_look("t1.csv"), Step(answer="@n[1043.4]")),
        rules={"n": {"rule": "numeric", "tolerance": 0.5}},
    ),
    Case("g4", "Read the missing table.", "gone.csv", "easy", ("Words",), (("w", "nothing-zq"),), ()),
    Case(
        "g5",
        "Survive a crash.",
        "t1.csv",
        "hard",
        ("Numbers",),
        (("v", "2718"),),
        (Step(code="import os\nos._exit(1)"), Step(answer="@v[2718]")),
        rules={"v": {"rule": "numeric"}},
    ),
)

_TABLES = {"t1.csv": "x\n1\n2\n3\n4\n5\n", "t2.csv": "a,b\n1,2\n2,4\n3,7\n"}


def label_values(cases: tuple[Case, ...]) -> list[str]:
    return [value for case in cases for _, value in case.labels]


def _task(case: Case) -> str:
    return f"{case.question} (case {case.id})"


def write_dabench(folder: Path, cases: tuple[Case, ...] = DABENCH) -> Path:
    """The InfiAgent-DABench layout in ``folder`` (made): questions, labels and the tables folder."""
    tables = folder / "da-dev-tables"
    tables.mkdir(parents=True)
    for name, text in _TABLES.items():
        (tables / name).write_text(text)
    questions = [
        {
            "id": int(c.id),
            "question": _task(c),
            "concepts": list(c.concepts),
            "constraints": "Use pandas.",
            "format": c.format,
            "file_name": c.file,
            "level": c.level,
        }
        for c in cases
    ]
    labels = [{"id": int(c.id), "common_answers": [list(pair) for pair in c.labels]} for c in cases]
    (folder / "da-dev-questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "da-dev-labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in labels))
    return folder


def write_generic(folder: Path, cases: tuple[Case, ...] = GENERIC) -> Path:
    """Our generic JSONL layout: ``folder/suite.jsonl`` with the tables under ``folder/tables``."""
    (folder / "tables").mkdir(parents=True)
    for name, text in _TABLES.items():
        (folder / "tables" / name).write_text(text)
    lines = []
    for c in cases:
        answers = [{"name": name, "value": value, **c.rules.get(name, {})} for name, value in c.labels]
        task = f"{_task(c)} Answer as @name[value]."
        lines.append(
            json.dumps(
                {
                    "id": c.id,
                    "task": task,
                    "data": [f"tables/{c.file}"],
                    "level": c.level,
                    "concepts": list(c.concepts),
                    "answers": answers,
                }
            )
        )
    (folder / "suite.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "suite.jsonl"


class ScriptedAnalyst:
    """A script entry for ``OpenAIServer`` (``add(*[analyst] * n)``): the next step of the question the
    request is about. ``labels_path`` is named in round 1's code (does the kernel see it?)."""

    def __init__(self, cases: tuple[Case, ...], labels_path: Path | str, delay: float = 0.0) -> None:
        self.cases = {c.id: c for c in cases}
        self.labels_path = str(labels_path)
        self.delay = delay
        self.asked: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        first = next(m["content"] for m in body["messages"] if m["role"] == "user")
        found = _CASE.search(first if isinstance(first, str) else json.dumps(first))
        assert found, "a request without its question"
        case = self.cases[found.group(1)]
        self.asked.append(case.id)
        round_ = sum(1 for m in body["messages"] if m["role"] == "assistant")
        step = case.steps[round_] if round_ < len(case.steps) else Step(answer="@none[0]")
        pause = step.pause or self.delay
        if step.code is not None:
            code = f"LABELS = {self.labels_path!r}\n{step.code}"
            return Reply("Looking.", tool_calls=(python_call(code),), pause=pause)
        return Reply(step.answer, pause=pause)


def entries(analyst: Callable[[dict[str, Any]], Reply], count: int = 200) -> list[Callable[[dict[str, Any]], Reply]]:
    return [analyst] * count
