"""``kernel-agent eval``: run a benchmark suite through the agent (``eval SUITE``) and compare two runs
(``eval compare A B``).

Thin: reads options, calls ``kernel_agent.eval``, prints one line per finished question and the
summary, and translates errors at the edge. Its options are the agent's (``options.py``) and its own
rows (``EVAL``); ``app.py`` adds the group ``eval_group`` builds. What a suite, the model,
the kernel or a results file (maybe someone else's) wrote is printed through ``safe.terminal.one_line``,
so no escape sequence, line break or bidi control reaches the terminal. Exit codes: 0 every question
asked for has a result, 1 not, or the machinery (model, kernel, data) failed every one so none could be
scored (the summary says how many failed and how), 2 usage error (a refused suite or folder too),
130 Ctrl-C, 143 SIGTERM (finished questions keep their results; the same command resumes).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..agent.settings import SETTINGS, Table, option
from ..safe.terminal import one_line

if TYPE_CHECKING:
    from ..eval import Comparison, EvalRun
from .drive import EXIT_USAGE
from .edge import Failure, edge
from .options import agent_arguments, agent_options, kernel_options, table_options

__all__ = ["EVAL", "eval_group"]

# fmt: off
EVAL = Table(
    option(
        "eval run", "concurrency", int, None, "Questions at once", short="-j", metavar="N", minimum=1,
        optional=True, shown_default="one per core, at most one per 2 GiB of free memory",
    ),
    option("eval run", "limit", int, None, "Only the first N questions (after --ids)", metavar="N", minimum=1,
           optional=True),
    option("eval run", "ids", str, None, "Only these question ids (comma-separated)", metavar="3,7,...",
           optional=True),
    option(
        "eval run", "out", str, None, "The run's folder; the same folder again resumes it", short="-o",
        metavar="DIR", optional=True, shown_default="./eval-runs/<suite>-<model>",
    ),
    option(
        "eval run", "retry_failed", bool, False,
        "Also run again the questions the machinery failed (timeout, model or kernel error)",
    ),
    option(
        "eval run", "data", str, (),
        'A live source the suite\'s questions name ("sources"), with your connection (repeatable)', short="-d",
        metavar="NAME=URI", multiple=True,
    ),
)
# fmt: on


def _plain(text: object) -> str:
    """A suite's, the model's or the kernel's word (a name, an id, an outcome, an error) as one line."""
    return one_line(text)


class _DefaultRun(click.Group):
    """``eval SUITE ...`` means ``eval run SUITE ...``; ``eval compare A B`` stays itself."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def eval_group() -> click.Group:
    """The ``eval`` command group: ``eval run`` (also ``eval SUITE``) and ``eval compare``."""

    @click.group("eval", cls=_DefaultRun, context_settings={"help_option_names": ["-h", "--help"]})
    def group() -> None:
        """Measure answer quality: run a benchmark suite through the agent, scored by the suite's rules.

        \b
            kernel-agent eval SUITE --model M --concurrency N --out DIR       run (or resume) a suite
            kernel-agent eval compare A B                                    flipped questions, metric changes
        """

    @group.command("run")
    @click.argument("suite", metavar="SUITE")
    @agent_options
    @kernel_options
    @table_options(*EVAL.values())
    def run(
        suite: str,
        concurrency: int | None,
        limit: int | None,
        ids: str | None,
        out: str | None,
        retry_failed: bool,
        data: tuple[str, ...],
        **options: Any,
    ) -> None:
        """Run SUITE (an InfiAgent-DABench folder, or a .jsonl suite) and write results.jsonl, report.html
        and every question's notebook into --out. Re-running with the same --out continues where it stopped.
        A suite names its live sources; --data NAME=URI connects each (postgresql://USER@HOST/DB)."""
        from ..eval import live_sources, load_suite, run_eval, write_report

        arguments = agent_arguments(options)
        with edge():
            loaded = load_suite(suite)
            sources = live_sources(data)
            chosen = loaded.select(tuple(i.strip() for i in ids.split(",") if i.strip()) if ids else (), limit)
            model = arguments.get("model") or os.environ.get(SETTINGS["model"].env or "") or "model"
            folder = Path(out) if out else Path("eval-runs") / re.sub(r"[^A-Za-z0-9_.-]", "_", f"{loaded.name}-{model}")
            click.echo(f"{len(chosen)} question(s) of {_plain(loaded.name)} → {_plain(folder)}", err=True)
            work = run_eval(
                loaded,
                chosen,
                folder,
                arguments,
                concurrency=concurrency,
                retry_failed=retry_failed,
                progress=_progress,
                sources=sources,
            )
            try:
                result = asyncio.run(_cancel_on_sigterm(work))
            except (KeyboardInterrupt, asyncio.CancelledError) as stop:
                click.echo(f"interrupted: run again with --out {_plain(folder)} to continue", err=True)
                sys.exit(130 if isinstance(stop, KeyboardInterrupt) else 143)
            wanted = {q.id for q in chosen}
            rows = [row for row in result.results if row["id"] in wanted]
            report = write_report(folder, rows, f"{loaded.name} · {model}")
        click.echo(_summary_text(rows))
        click.echo(f"results: {_plain(folder / 'results.jsonl')}\nreport: {_plain(report)}")
        failed = _all_failed(rows)
        if failed:
            click.echo(f"Error: {failed}", err=True)
        sys.exit(0 if len(rows) == len(chosen) and not failed else 1)

    @group.command("compare")
    @click.argument("a", metavar="A")
    @click.argument("b", metavar="B")
    def compare_runs(a: str, b: str) -> None:
        """Compare two eval runs' folders (or results.jsonl files): which questions flipped, metric changes."""
        from ..eval import compare, read_results

        with edge():
            first, second = read_results(_folder(a)), read_results(_folder(b))
        click.echo(_comparison_text(compare(first, second)))

    return group


async def _cancel_on_sigterm(work: Coroutine[Any, Any, EvalRun]) -> EvalRun:
    """``work``, cancelled by SIGTERM as asyncio cancels it on Ctrl-C: the questions under way save their
    notebooks as cancelled and the pool shuts its kernels down; finished questions keep their lines."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
        return await work
    try:
        return await work
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def _folder(path: str) -> Path:
    """The run folder ``path`` names (itself, or its ``results.jsonl``'s). Exits 2 when it holds no results."""
    given = Path(path)
    folder = given.parent if given.name == "results.jsonl" or given.is_file() else given
    if not os.path.lexists(folder / "results.jsonl"):  # one that is there but refused: read_results says why
        raise Failure(f"no eval results in {path} (a folder given to --out, or its results.jsonl)", EXIT_USAGE)
    return folder


def _comparison_text(comparison: Comparison) -> str:
    if not comparison.shared:  # no question both scored: a difference of two empty sets would read 0.00% → 0.00%
        lines = [
            "nothing to compare: A and B scored no question in common "
            f"(only in A: {len(comparison.only_a)}, only in B: {len(comparison.only_b)})"
        ]
        for name, own in (("A", comparison.a_own), ("B", comparison.b_own)):
            if own is not None:
                lines.append(f"{name} on its own: {_metrics_text(own)}")
        return "\n".join(lines)
    lines = [
        f"fixed in B ({len(comparison.fixed)}): {', '.join(map(_plain, comparison.fixed)) or '-'}",
        f"broken in B ({len(comparison.broke)}): {', '.join(map(_plain, comparison.broke)) or '-'}",
    ]
    lines += [f"changed: {_plain(q)} {_plain(x)} → {_plain(y)}" for q, x, y in comparison.changed]
    if comparison.only_a or comparison.only_b:
        lines.append(f"only in A: {len(comparison.only_a)}, only in B: {len(comparison.only_b)}")
    for name, (before, after) in comparison.pairs().items():
        lines.append(f"{name}: {before:.2%} → {after:.2%} ({after - before:+.2%})")
    return "\n".join(lines)


def _metrics_text(m: Any) -> str:
    if not m.questions:
        return "no question scored"
    return (
        f"accuracy by question {m.by_question:.2%} ({m.questions_correct}/{m.questions}), "
        f"by sub-answer {m.by_sub_answer:.2%} ({m.sub_answers_correct}/{m.sub_answers}), "
        f"proportional {m.proportional:.2%}"
    )


def _all_failed(rows: list[dict[str, Any]]) -> str:
    """What to say when the machinery failed every question ("" when it did not): how many, of which kinds,
    and the first error, e.g. an unreachable model's."""
    from ..eval import summarize

    summary = summarize(rows)
    if not summary.all_failed:
        return ""
    kinds = ", ".join(f"{_plain(kind)} ×{count}" for kind, count in summary.outcomes.items() if count)
    first = next((row["error"] for row in rows if row.get("error")), "")
    noun = "question" if summary.total == 1 else "questions"
    return f"all {summary.total} {noun} failed to run: {kinds}" + (f" — {_plain(first)[:300]}" if first else "")


def _progress(kind: str, row: dict[str, Any]) -> None:
    if kind != "finished":
        return
    ok = sum(row["correct"].values())
    detail = f"{ok}/{len(row['correct'])} right" if row["scored"] else _plain(row.get("error") or "")[:120]
    click.echo(
        f"{_plain(row['id'])[:40]:>8}  {_plain(row['outcome']):<13} {detail}  "
        f"({_plain(row['rounds'])} rounds, {float(row['seconds']):.1f} s)",
        err=True,
    )


def _summary_text(rows: list[dict[str, Any]]) -> str:
    from ..eval import summarize

    summary = summarize(rows)
    m = summary.overall
    lines = [f"{summary.total} question(s): {m.questions} scored, {summary.unscored} not scored (the machinery failed)"]
    if m.questions:
        lines += [
            f"accuracy by question        {m.by_question:7.2%}  ({m.questions_correct}/{m.questions})",
            f"accuracy by sub-answer      {m.by_sub_answer:7.2%}  ({m.sub_answers_correct}/{m.sub_answers})",
            f"proportional by sub-answer  {m.proportional:7.2%}",
        ]
    else:  # 0.00% of nothing would read as a measured score
        lines.append("accuracy: none (no question was scored)")
    for title, groups in (("level", summary.by_level), ("concept", summary.by_concept)):
        if groups:
            lines.append(f"by {title}:")
            lines += [
                f"  {_plain(name)[:40]:<40} {g.by_question:7.2%}  ({g.questions_correct}/{g.questions})"
                for name, g in groups.items()
            ]
    outcomes = ", ".join(f"{_plain(kind)} {count}" for kind, count in summary.outcomes.items() if count)
    lines.append(f"outcomes: {outcomes or '-'}")
    return "\n".join(lines)
