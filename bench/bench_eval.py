"""Issue 40's benchmark: ``kernel-agent eval`` on a 12-question scripted suite at concurrency 1, 2 and 4.

The scripted model (``tests/openai_server.py``) answers every request after a fixed delay, each question
in two replies (read the table, then answer), so what changes between the three runs is the harness's
own overhead and the warm pool's parallelism, not the model. Rows: the wall time of the whole suite at
2 and at 4 questions at once against 1 (questions per minute in the metric), and the harness's time per
question beyond the model's and the code's (kernel from the pool, data copies, prompt, notebook saves,
scoring, result line), and how much of it is the wait for a kernel and its setup cell, for information.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report import Row, scaled

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from evalsuite import Case, ScriptedAnalyst, Step, entries, write_generic
from openai_server import OpenAIServer

from kernel_agent.eval import load_suite, run_eval

NAME = "eval"
QUESTIONS = 12
MODEL_DELAY_S = 0.5  # each reply's wait: a fast model's; a real one takes seconds, which only helps parallelism


def _cases(count: int) -> tuple[Case, ...]:
    return tuple(
        Case(f"b{i}", f"Count the rows of table {i}.", "t1.csv", "easy", ("Counting",), (("rows", "5"),),
             (Step(code="print(len(pd.read_csv('t1.csv')))"), Step(answer="@rows[5]")))
        for i in range(count)
    )  # fmt: skip


def _suite_runs(questions: int, delay: float) -> dict[int, tuple[float, list[dict[str, Any]]]]:
    cases = _cases(questions)
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-eval-"))
    try:
        suite = load_suite(write_generic(scratch / "suite", cases))
        timed: dict[int, tuple[float, list[dict[str, Any]]]] = {}
        with OpenAIServer() as server:
            server.add(*entries(ScriptedAnalyst(cases, scratch / "none", delay=delay), 4 * questions * 3))
            options = {"model": "m", "base_url": server.base_url}
            for concurrency in (1, 2, 4):
                started = time.monotonic()
                done = asyncio.run(
                    run_eval(suite, suite.questions, scratch / f"j{concurrency}", options, concurrency=concurrency)
                )
                timed[concurrency] = (time.monotonic() - started, done.results)
                wrong = [r["id"] for r in done.results if r["outcome"] != "correct"]
                if wrong:
                    raise RuntimeError(f"questions {wrong} were not answered right at -j{concurrency}")
        return timed
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def suite(quick: int) -> list[Row]:
    # the smoke run: one question at each concurrency (each question takes a fresh kernel), the model at once
    questions = scaled(quick, QUESTIONS, QUESTIONS, 1)
    delay = scaled(quick, MODEL_DELAY_S, MODEL_DELAY_S, 0.0)
    timed = _suite_runs(questions, delay)
    one = timed[1][0]
    rows = []
    targets = {2: 0.70, 4: 0.55}
    for concurrency in (2, 4):
        wall = timed[concurrency][0]
        rows.append(
            Row(
                f"eval: {questions} scripted questions (model {delay:g} s a reply) at -j{concurrency}"
                f" ({60 * questions / wall:.1f} q/min) vs 1 ({60 * questions / one:.1f} q/min)",
                wall,
                one,
                max_ratio=targets[concurrency],
            )
        )
    results = timed[1][1]
    harness = statistics.median(r["seconds"] - r["model_seconds"] - r["code_seconds"] for r in results)
    model = statistics.median(r["model_seconds"] for r in results)
    start = statistics.median(r["start_seconds"] for r in results)
    rows.append(
        Row(
            "eval: the harness's time per question at -j1 (median; beyond the model's and the code's) vs the model's",
            harness,
            model,
        )
    )
    rows.append(
        Row("  ↳ of it, until the first round (a kernel from the pool, data, setup cell), median", start, harness)
    )
    rest = statistics.median(
        r["seconds"] - r["model_seconds"] - r["code_seconds"] - r["start_seconds"] for r in results
    )
    rows.append(Row("  ↳ the rest (prompt, notebook saves, scoring, the result line), median", rest, harness))
    return rows


PARTS: dict[str, Any] = {"suite": suite}
