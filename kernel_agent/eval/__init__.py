"""Measured answer quality: a benchmark suite run through the agent, scored by the suite's own rules.

A layer above ``agent/`` (front ends may import it): ``suite.py`` reads suites (InfiAgent-DABench's
published layout and our generic JSONL), ``scoring.py`` parses and compares answers and computes the
official metrics, ``runner.py`` runs the questions through ``AsyncAgent`` on a warm kernel pool and
records each, ``results.py`` owns ``results.jsonl``, summaries and comparisons, ``report.py`` the page.
"""

from __future__ import annotations

from .report import REPORT, render_report, write_report
from .results import RESULTS, Comparison, Summary, compare, read_results, summarize
from .runner import EvalRun, default_concurrency, live_sources, run_eval
from .scoring import Metrics, Score, metrics, parse_answers, score
from .suite import Label, Question, Suite, load_suite

__all__ = [
    "REPORT",
    "RESULTS",
    "Comparison",
    "EvalRun",
    "Label",
    "Metrics",
    "Question",
    "Score",
    "Suite",
    "Summary",
    "compare",
    "default_concurrency",
    "live_sources",
    "load_suite",
    "metrics",
    "parse_answers",
    "read_results",
    "render_report",
    "run_eval",
    "score",
    "summarize",
    "write_report",
]
