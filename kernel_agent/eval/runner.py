"""Running a suite: ``run_eval`` asks the agent every question, ``concurrency`` at a time, and records each.

Owns an eval run's folder and the order of work in it; not the agent (``agent/``), the scoring
(``scoring.py``) or the result lines (``results.py``). Each question gets one sandboxed kernel from a
warm ``KernelPool`` (never reused) and one ``AsyncAgent`` built from the same options as ``kernel-agent
run``'s, and its own folder ``questions/<id>/``: ``workspace/`` (the kernel's folder, with the data
file), ``notebook.ipynb`` and ``answer.json`` (its result line) beside it, so any question can be
opened, reviewed and replayed on its own.

Resuming: the folder's ``eval.json`` says what the run is (suite, model); running again with the same
folder skips every question with a result line (a question is done once its line is fsynced) and starts
afresh the ones a killed run left half-done, in a fresh folder (``questions/<id>~2/``: what the killed
attempt left is kept, never deleted). ``retry_failed`` also runs again the questions the machinery
failed (model unreachable, timeout, kernel, harness), never the answered ones.

The folder is the user's choice, but what is in it may be someone else's (a shared or unpacked run):
below it every read, write, append and new folder goes through the door (``kernel/door.py``), so a
planted link is refused or replaced, never followed, and a FIFO is refused at once. The folder (and the
suite's labels) must lie outside every tree the kernels can read (``check_out_of_kernels``). The
suite's data files are copied through the door into a private folder before any kernel starts. A
question's live sources are named by the suite and connected by the caller (``sources``: a name to the
value given to ``--data``), checked before any kernel starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from .._loop import in_thread
from ..errors import ConfigError, DataFileError, KernelError, WorkspaceFileError
from ..events import RunError, RunFinished, RunStarted
from ..kernel.door import Door, read_record, write_record, write_records
from ..kernel.sandbox.bwrap import bound_into_kernels
from ..kernel.sandbox.cgroup import pid_alive
from ..records import Run
from .results import MACHINERY, append_result, read_results, refused
from .scoring import score
from .suite import Label, Question, Suite

__all__ = [
    "MANIFEST",
    "QUESTIONS",
    "EvalRun",
    "check_out_of_kernels",
    "check_sources",
    "live_sources",
    "default_concurrency",
    "question_folder",
    "run_eval",
]

log = logging.getLogger(__name__)

MANIFEST = "eval.json"
QUESTIONS = "questions"
_MANIFEST_BYTES = 1 << 20
_STAGED = "kernel-agent-eval-"  # + pid: our private folder of a run's data copies (``_StagedData``)
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
    """A question's folder name: its id when that is a short plain name, else a plain form (at most 64
    characters) with a short hash."""
    plain = re.sub(r"[^A-Za-z0-9_.-]", "_", qid).strip(".")[:64] or "q"
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
    sources: Mapping[str, str] | None = None,
) -> EvalRun:
    """Run ``questions`` of ``suite`` into the folder ``out`` and return what was recorded.

    ``agent_options`` are ``AsyncAgent`` keyword arguments (model, protocol, kernel options...).
    ``progress(kind, row)`` hears ``started`` (``{"id": ...}``) and ``finished`` (the result line).
    ``sources`` gives each live source a question names its connection: the ``--data`` value
    (``shop=postgresql://ann@db/shop``) the agent is given beside the question's files.
    Raises ``ConfigError`` for bad options, a source no ``sources`` entry gives, or an ``out`` that holds
    another suite's or model's run; every failure of one question is recorded in its line instead.
    """
    from ..agent.config import AgentConfig
    from ..agent.run.agent import AsyncAgent
    from ..kernel.pool import KernelPool

    folder = Path(out)
    given = dict(sources or {})
    check_sources(questions, given)
    check_out_of_kernels(folder, suite)
    size = concurrency or default_concurrency()
    await AsyncAgent(**agent_options).close()  # a bad option or no model: raised now, before any kernel starts
    config = AgentConfig.resolve(**{k: v for k, v in agent_options.items() if k not in _SEAMS})
    await in_thread(_claim, folder, suite, config.model.name or "")
    kept = tuple(await in_thread(read_results, folder, repair=True))
    redo = {row["id"] for row in kept if retry_failed and row["outcome"] in MACHINERY}
    kept = tuple(row for row in kept if row["id"] not in redo)
    done = {row["id"] for row in kept}
    todo = [q for q in questions if q.id not in done]
    ran: list[dict[str, Any]] = []
    if not todo:
        return EvalRun(folder, (), kept)
    staged = await in_thread(_StagedData.of, suite, todo)  # a refused data file: raised before any kernel starts
    try:
        gate = asyncio.Semaphore(size)
        options = {**config.kernel.session_options(), **agent_options.get("session_options", {})}
        # One kernel more than the questions at once starts while they wait for the model, so the next
        # question finds it ready; the cap leaves room for used kernels still shutting down. A question with
        # live sources gets a kernel of its own started with its broker's socket, never a pooled one.
        pooled = sum(1 for q in todo if not q.sources)
        pool = KernelPool(min(size + 1, pooled), max_kernels=2 * size + 1, **options)

        async def one(question: Question) -> None:
            async with gate:
                if progress is not None:
                    progress("started", {"id": question.id})
                row = await _ask(question, suite.labels[question.id], folder, agent_options, pool, staged, given)
                await in_thread(_record, folder, row)
                ran.append(row)
                if progress is not None:
                    progress("finished", row)

        async with pool:
            await asyncio.gather(*(one(q) for q in todo))
    finally:
        await in_thread(staged.remove)
    return EvalRun(folder, tuple(ran), kept)


def live_sources(values: Sequence[str]) -> dict[str, str]:
    """The live sources ``eval --data`` gives (``[NAME=]postgresql://...``), by name: each as the ``--data``
    value the agent is given for it. Raises ``ConfigError`` for a value that is not a source (a suite's files
    are named in the suite), one ``parse_source`` refuses (a password in it), or a name given twice; a refused
    value is never echoed (it may hold a password)."""
    from ..sources.spec import is_source, parse_source

    given: dict[str, str] = {}
    for value in values:
        if not is_source(value):
            raise ConfigError(
                "eval's --data gives the live sources a suite names, as NAME=postgresql://USER@HOST/DB (or "
                "postgresql:///?service=NAME); a suite's data files are named in the suite itself"
            )
        spec = parse_source(value)
        if spec.name in given:
            raise ConfigError(f"two --data sources are named {spec.name!r}: name each one (--data NAME=URI)")
        given[spec.name] = f"{spec.name}={spec.target}"
    return given


def check_sources(questions: Sequence[Question], sources: Mapping[str, str]) -> None:
    """Raise ``ConfigError`` naming every live source ``questions`` name that ``sources`` does not give."""
    missing = sorted({name for question in questions for name in question.sources} - set(sources))
    if missing:
        asking = [q.id for q in questions if set(q.sources) & set(missing)]
        raise ConfigError(
            f"the suite's question {', '.join(asking[:5])} queries the live source {', '.join(missing)}: give "
            f"its connection with --data {missing[0]}=postgresql://USER@HOST/DB (or "
            f"--data {missing[0]}=postgresql:///?service=NAME); nothing was run"
        )


def check_out_of_kernels(out: Path, suite: Suite) -> None:
    """Refuse an ``out`` folder, or a suite, inside a tree every sandboxed kernel can read (the package's
    checkout when installed from one, the virtualenv, the system): its ``results.jsonl`` holds the
    expected answers, which later questions' kernels would read. Raises ``ConfigError`` saying which
    tree and where to go instead."""
    for what, path in (("--out", out), *(("the suite's labels", record) for record in suite.records)):
        tree = bound_into_kernels(path)
        if tree is None:
            continue
        elsewhere = Path.home() / "eval-runs" / out.name
        hint = f", e.g. --out {elsewhere}" if what == "--out" and bound_into_kernels(elsewhere) is None else ""
        raise ConfigError(
            f"{what} {path} is inside {tree}, which every question's kernel can read (it is bound into the "
            f"sandbox), so the expected answers would be in the model's reach: use a folder outside it{hint}"
        )


def _claim(folder: Path, suite: Suite, model: str) -> None:
    """Make ``folder`` this run's, or check it already is (the same suite and model). The folder is the
    user's choice; what is in it may be someone else's, so below it nothing is followed (``kernel/door.py``):
    a manifest or ``questions`` that is a link, a FIFO or a device is refused in words."""
    os.makedirs(folder, exist_ok=True)
    manifest = folder / MANIFEST
    mine = {"suite": suite.name, "layout": suite.layout, "model": model}
    try:
        found = json.loads(read_record(manifest, _MANIFEST_BYTES))
    except FileNotFoundError:
        found = None
    except (OSError, WorkspaceFileError) as exc:
        raise refused(manifest, exc) from exc
    except ValueError as exc:
        raise ConfigError(f"{manifest} is not an eval run's manifest ({exc}): give another --out") from None
    if found is None:
        data = json.dumps({**mine, "started_at": _now()}, indent=1) + "\n"
        try:
            write_record(manifest, data.encode("utf-8"), durable=True, make_dirs=False)
        except (OSError, WorkspaceFileError) as exc:
            raise refused(manifest, exc) from exc
    else:
        theirs = {key: found.get(key) for key in mine} if isinstance(found, dict) else found
        if theirs != mine:
            raise ConfigError(f"{folder} holds another run ({theirs!r:.300}), not {mine}: give another --out")
    try:
        Door(folder).make_folder(QUESTIONS)
    except (OSError, WorkspaceFileError) as exc:
        raise refused(folder / QUESTIONS, exc) from exc


def _record(folder: Path, row: dict[str, Any]) -> None:
    """``answer.json`` beside the question's notebook (never in its workspace), then its result line."""
    answer = PurePosixPath(row["notebook"]).parent / "answer.json"
    data = json.dumps(row, indent=1, ensure_ascii=False) + "\n"
    try:
        write_records(folder, {answer.as_posix(): data.encode("utf-8")}, durable=False)
    except (OSError, WorkspaceFileError) as exc:
        raise refused(folder / answer, exc) from exc
    append_result(folder, row)


class _StagedData:
    """The data files of the questions to run, copied through the door from the suite's folder into a
    private folder of ours (which no kernel sees): the agent copies each from there, so a link, FIFO or
    device in a suite (a git checkout keeps its links) is refused before anything runs, never followed."""

    def __init__(self, folder: Path, copies: dict[Path, Path]) -> None:
        self.folder = folder
        self.copies = copies  # a question's data path -> our copy; a missing file has none

    @classmethod
    def of(cls, suite: Suite, questions: Sequence[Question]) -> _StagedData:
        """Copy every data file ``questions`` claim. Raises ``ConfigError`` for one that is refused (a link
        on the way, not a regular file, the suite's own questions or labels under another name)."""
        _sweep_staged()
        folder = Path(tempfile.mkdtemp(prefix=f"{_STAGED}{os.getpid()}-"))
        staged = cls(folder, {})
        try:
            staged._copy_all(suite, questions)
        except BaseException:
            staged.remove()
            raise
        return staged

    def _copy_all(self, suite: Suite, questions: Sequence[Question]) -> None:
        source, target = Door(suite.data_folder), Door(self.folder)
        records = {(info.st_dev, info.st_ino) for info in map(_stat_or_none, suite.records) if info is not None}
        wanted = dict.fromkeys(path for question in questions for path in question.data)
        for index, path in enumerate(wanted):
            claim = suite.data_claim(path)
            try:
                info = source.file_stat(claim)
                if (info.st_dev, info.st_ino) in records:
                    raise WorkspaceFileError(f"{claim!r} is the suite's own questions or labels", path=claim)
                _size, chunks = source.stream(claim)
                copy = f"{index}/{PurePosixPath(claim).name}"
                target.write_from(copy, chunks, mode=0o444)
            except FileNotFoundError:
                continue
            except (OSError, WorkspaceFileError) as exc:
                raise ConfigError(
                    f"the suite's data file {path} is refused ({exc}): a suite's data files are read only as "
                    "regular files under its folder, never through a link; nothing was run"
                ) from None
            self.copies[path] = self.folder / copy

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _sweep_staged() -> None:
    """Remove the data copies a killed eval run (its process gone) left in the temp folder: only folders
    of ours (this user's, by our name; ``rmtree`` refuses a link and follows none inside)."""
    top = tempfile.gettempdir()
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        found = re.fullmatch(rf"{_STAGED}(\d+)-\w+", entry.name)
        if found is None or pid_alive(int(found.group(1))):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
            shutil.rmtree(entry.path, ignore_errors=True)


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return Door(path.parent).file_stat(path.name)
    except (OSError, WorkspaceFileError):
        return None


def _fresh(out: Path, qid: str) -> str:
    """A new, empty folder for a question under ``out/questions`` (its relative path): ``<id>``, or, when
    that name is taken (a killed attempt, a retry, or something planted there), ``<id>~2``, ``<id>~3``...
    Made with ``mkdirat`` below ``questions`` opened without following a link: nothing is ever deleted,
    nothing made through a link."""
    door, base = Door(out), question_folder(qid)
    for attempt in range(1, 10_000):
        relative = f"{QUESTIONS}/{base}" if attempt == 1 else f"{QUESTIONS}/{base}~{attempt}"
        try:
            door.make_folder(relative, exclusive=True)
        except FileExistsError:
            continue
        except (OSError, WorkspaceFileError) as exc:
            raise refused(out / relative, exc) from exc
        return relative
    raise ConfigError(f"{out / QUESTIONS} holds 10,000 attempts at question {qid!r}: give another --out")


async def _ask(
    question: Question,
    labels: tuple[Label, ...],
    out: Path,
    agent_options: dict[str, Any],
    pool: Any,
    staged: _StagedData,
    sources: Mapping[str, str],
) -> dict[str, Any]:
    """Run one question to its end and return its result line; a failure is recorded, never raised."""
    from ..agent.run.agent import AsyncAgent

    started = time.monotonic()
    here = out / await in_thread(_fresh, out, question.id)
    notebook = here / "notebook.ipynb"
    row = _row(question, labels, notebook.relative_to(out))
    missing = [str(p) for p in question.data if p not in staged.copies]
    if missing:
        return {**row, "outcome": "missing_data", "error": f"data file not found: {', '.join(missing)}"}
    data: list[str | Path] = [staged.copies[p] for p in question.data]
    data += [sources[name] for name in question.sources]
    run: Run | None = None
    error_type = ""
    try:
        async with AsyncAgent(**agent_options, session_factory=pool) as agent:
            async for event in agent.stream(question.task, data, here / "workspace", notebook):
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
        "expected": _expected(labels),
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


def _expected(labels: tuple[Label, ...]) -> dict[str, str]:
    """The expected answer by name, as a result line shows it: every value a repeated name has (DABench 734
    gives five), in order, with the last named as the one scored (``scoring``); else the one value."""
    values: dict[str, list[str]] = {}
    for label in labels:
        values.setdefault(label.name, []).append(label.value)
    return {
        name: given[0] if len(given) == 1 else f"{', '.join(given)} (scored against the last, as DABench scores)"
        for name, given in values.items()
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


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
