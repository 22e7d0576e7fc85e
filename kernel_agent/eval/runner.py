"""Running a suite: ``run_eval`` asks the agent every question, ``concurrency`` at a time, and records each.

Owns an eval run's folder and the order of work in it; not the agent (``agent/``), the scoring
(``scoring.py``) or the result lines (``results.py``). Each question gets one sandboxed kernel from a
warm ``KernelPool`` (never reused) and one ``AsyncAgent`` built from the same options as ``kernel-agent
run``'s, and its own folder ``questions/<id>/``: ``workspace/`` (the kernel's folder, with the data
file), ``notebook.ipynb`` and ``answer.json`` (its result line) beside it, so any question can be
opened, reviewed and replayed on its own.

Resuming: the folder's ``eval.json`` says what the run is (suite, model); running again with the same
folder skips every question with a result line (a question is done once its line is fsynced) and starts
afresh the ones a killed run left half-done. ``retry_failed`` also runs again the questions the
machinery failed (model unreachable, timeout, kernel, harness), never the answered ones.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .._loop import in_thread
from ..errors import ConfigError, DataFileError, KernelError
from ..events import RunError, RunFinished, RunStarted
from ..records import Run
from .results import MACHINERY, append_result, read_results
from .scoring import score
from .suite import Label, Question, Suite

__all__ = ["MANIFEST", "EvalRun", "default_concurrency", "question_folder", "run_eval"]

log = logging.getLogger(__name__)

MANIFEST = "eval.json"
_KERNEL_BUDGET = 2 << 30  # memory one question's kernel may well want (a DataFrame and its copies)
_SEAMS = ("chat_model", "session_factory", "session_options", "model_options")

Progress = Callable[[str, dict[str, Any]], None]


def default_concurrency() -> int:
    """Questions at once by default: one per core, at most one per 2 GiB of available memory, 1 to 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    available = _available_memory()
    by_memory = available // _KERNEL_BUDGET if available else cores
    return max(1, min(cores, by_memory, 8))


def _available_memory() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def question_folder(qid: str) -> str:
    """A question's folder name: its id when that is a plain name, else a plain form with a short hash."""
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", qid).strip(".") or "q"
    return plain if plain == qid else f"{plain}-{hashlib.sha256(qid.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class EvalRun:
    """What one ``run_eval`` did: the folder, the results of this call, and those found from before."""

    out: Path
    ran: tuple[dict[str, Any], ...]
    kept: tuple[dict[str, Any], ...]

    @property
    def results(self) -> list[dict[str, Any]]:
        return [*self.kept, *self.ran]


async def run_eval(
    suite: Suite,
    questions: Sequence[Question],
    out: str | os.PathLike[str],
    agent_options: dict[str, Any],
    *,
    concurrency: int | None = None,
    retry_failed: bool = False,
    progress: Progress | None = None,
) -> EvalRun:
    """Run ``questions`` of ``suite`` into the folder ``out`` and return what was recorded.

    ``agent_options`` are ``AsyncAgent`` keyword arguments (model, protocol, kernel options...).
    ``progress(kind, row)`` hears ``started`` (``{"id": ...}``) and ``finished`` (the result line).
    Raises ``ConfigError`` for bad options or an ``out`` that holds another suite's or model's run;
    every failure of one question is recorded in its line instead.
    """
    from ..agent.agent import AsyncAgent
    from ..agent.config import AgentConfig
    from ..kernel.pool import KernelPool

    folder = Path(out)
    size = concurrency or default_concurrency()
    await AsyncAgent(**agent_options).close()  # a bad option or no model: raised now, before any kernel starts
    config = AgentConfig.resolve(**{k: v for k, v in agent_options.items() if k not in _SEAMS})
    await in_thread(_claim, folder, suite, config.model.name or "")
    kept = tuple(read_results(folder, repair=True))
    redo = {row["id"] for row in kept if retry_failed and row["outcome"] in MACHINERY}
    kept = tuple(row for row in kept if row["id"] not in redo)
    done = {row["id"] for row in kept}
    todo = [q for q in questions if q.id not in done]
    ran: list[dict[str, Any]] = []
    if not todo:
        return EvalRun(folder, (), kept)
    gate = asyncio.Semaphore(size)
    options = {**config.kernel.session_options(), **agent_options.get("session_options", {})}
    # One kernel more than the questions at once starts while they wait for the model, so the next
    # question finds it ready; the cap leaves room for used kernels still shutting down.
    pool = KernelPool(min(size + 1, len(todo)), max_kernels=2 * size + 1, **options)

    async def one(question: Question) -> None:
        async with gate:
            if progress is not None:
                progress("started", {"id": question.id})
            row = await _ask(question, suite.labels[question.id], folder, agent_options, pool)
            await in_thread(_record, folder, row)
            ran.append(row)
            if progress is not None:
                progress("finished", row)

    async with pool:
        await asyncio.gather(*(one(q) for q in todo))
    return EvalRun(folder, tuple(ran), kept)


def _claim(folder: Path, suite: Suite, model: str) -> None:
    """Make ``folder`` this run's, or check it already is (the same suite and model)."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / MANIFEST
    mine = {"suite": suite.name, "layout": suite.layout, "model": model}
    if manifest.exists():
        try:
            found = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{manifest} is not an eval run's manifest ({exc}): give another --out") from None
        theirs = {key: found.get(key) for key in mine}
        if theirs != mine:
            raise ConfigError(f"{folder} holds another run ({theirs}), not {mine}: give another --out")
        return
    manifest.write_text(json.dumps({**mine, "started_at": _now()}, indent=1) + "\n", encoding="utf-8")


def _record(folder: Path, row: dict[str, Any]) -> None:
    answer = folder / row["notebook"]
    answer.parent.mkdir(parents=True, exist_ok=True)
    (answer.parent / "answer.json").write_text(json.dumps(row, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    append_result(folder, row)


async def _ask(
    question: Question, labels: tuple[Label, ...], out: Path, agent_options: dict[str, Any], pool: Any
) -> dict[str, Any]:
    """Run one question to its end and return its result line; a failure is recorded, never raised."""
    from ..agent.agent import AsyncAgent

    here = out / "questions" / question_folder(question.id)
    notebook = here / "notebook.ipynb"
    row = _row(question, labels, notebook.relative_to(out))
    started = time.monotonic()
    await in_thread(_fresh, here)
    missing = [str(p) for p in question.data if not p.is_file()]
    if missing:
        return {**row, "outcome": "missing_data", "error": f"data file not found: {', '.join(missing)}"}
    run: Run | None = None
    error_type = ""
    try:
        async with AsyncAgent(**agent_options, session_factory=pool) as agent:
            async for event in agent.stream(question.task, question.data, here / "workspace", notebook):
                if isinstance(event, RunStarted):
                    row["start_seconds"] = _since(started)
                elif isinstance(event, RunError):
                    error_type = event.error_type
                elif isinstance(event, RunFinished):
                    run = event.run
    except DataFileError as exc:
        return {**row, "outcome": "missing_data", "error": str(exc), "seconds": _since(started)}
    except KernelError as exc:
        return {**_ran(row, exc.run, started), "outcome": "kernel_error", "error": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:  # the harness's own failure: recorded, the run goes on
        log.warning("question %s failed in the harness", question.id, exc_info=True)
        return {**_ran(row, run, started), "outcome": "harness_error", "error": f"{type(exc).__name__}: {exc}"}
    row = _ran(row, run, started)
    if run is not None and run.stop_reason == "llm_error":
        kind = "timeout" if error_type == "ModelTimeoutError" else "model_error"
        return {**row, "outcome": kind, "error": run.error}
    verdict = score(run.answer if run is not None else None, labels)
    return {
        **row,
        "outcome": verdict.verdict,
        "scored": True,
        "parsed": verdict.parsed,
        "correct": verdict.correct,
        "why": verdict.why,
    }


def _row(question: Question, labels: tuple[Label, ...], notebook: Path) -> dict[str, Any]:
    return {
        "id": question.id,
        "level": question.level,
        "concepts": list(question.concepts),
        "outcome": "harness_error",
        "scored": False,
        "expected": {label.name: label.value for label in labels},
        "correct": {label.name: False for label in labels},
        "parsed": {},
        "why": {},
        "raw_answer": None,
        "rounds": 0,
        "tokens": {},
        "seconds": 0.0,
        "model_seconds": 0.0,
        "code_seconds": 0.0,
        "start_seconds": 0.0,
        "stop_reason": None,
        "errors": [],
        "error": None,
        "notebook": notebook.as_posix(),
    }


def _ran(row: dict[str, Any], run: Run | None, started: float) -> dict[str, Any]:
    """``row`` with what ``run`` (None: no run was recorded) says about how it went."""
    row = {**row, "seconds": _since(started)}
    if run is None:
        return row
    return {
        **row,
        "raw_answer": run.answer,
        "rounds": len(run.rounds),
        "tokens": run.usage.to_dict(),
        "model_seconds": round(sum(r.model_s for r in run.rounds), 3),
        "code_seconds": round(sum(r.exec_s for r in run.rounds), 3),
        "stop_reason": run.stop_reason,
        "errors": _errors_seen(run),
    }


def _errors_seen(run: Run) -> list[str]:
    seen = []
    for round_ in run.rounds:
        result = round_.result
        if round_.problem:
            seen.append(f"round {round_.index}: {round_.problem}")
        if result is None or result.status == "ok":
            continue
        if result.status == "error" and result.error is not None:
            seen.append(f"round {round_.index}: {result.error.ename}: {result.error.evalue}"[:300])
        elif result.status == "timeout":
            seen.append(f"round {round_.index}: the code timed out")
        elif result.status == "died":
            seen.append(f"round {round_.index}: the kernel died")
    if run.error:
        seen.append(run.error[:300])
    return seen


def _fresh(here: Path) -> None:
    """An empty folder for a question: what a killed attempt left there is removed (links not followed)."""
    if here.exists():
        shutil.rmtree(here)
    here.mkdir(parents=True)


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
