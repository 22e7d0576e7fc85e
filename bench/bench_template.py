"""Issue 52's benchmark: kernels forked from a warmed template vs today's cold start. ``NAME`` and ``PARTS``.

"Forked" is ``AsyncKernelSession(template=True)``: the kernel forked from its kind's template (the stack
imported there) into a sandbox of its own; "cold" is ``template=False``: the same sandbox started as before
issue 52 (bwrap, then a fresh interpreter that imports ipykernel, and the stack when a cell asks for it).
Every part checks that each forked kernel really was forked (``start_path``) and each cold one cold, and
raises otherwise, so a template that could not serve never passes for one that did.

* ``start``: a new kernel's start to its first ``1+1``, then ``import numpy, pandas, matplotlib.pyplot``, then
  a plot whose figure comes back as an image: forked vs cold, alternating which goes first, median of 7
  (3 with ``--quick``). Rows: start to ``1+1`` with the stack ready (forked: ``1+1``; cold: ``1+1`` + the
  imports) and start to the first figure; target for both ≤ 0.05× (the issue's "tens of milliseconds").
  For information: start to ``1+1`` alone (no imports on either side), split at the moment the kernel's first
  process was made (its ``/proc/<pid>/stat`` start time, to the clock tick: forked, the template's fork of it;
  cold, bwrap's spawn); start to the figure vs a stock ipykernel (jupyter_client alone, no sandbox; the same
  cells as one); and the process's first forked kernel (its template started for it) vs a cold start to ``1+1``.
* ``memory``: 10 forked and then 10 cold kernels (2 each in ``--smoke``), each side all alive at once, each
  kernel having imported numpy, pandas and matplotlib.pyplot, idle; USS (``Private_*``) and PSS of each
  kernel's process tree from ``/proc/<pid>/smaps_rollup`` (a cold kernel's tree holds its two bwrap
  processes too). Rows: USS and PSS per idle kernel, forked vs cold, target ≤ 0.25×; and, for information,
  the forked kernels' PSS with their template's own added (the memory they cost in all) vs the cold
  kernels', and the template's own USS.
* ``analysis``: ``bench_agent``'s scripted 10-round analysis of a ~50 MB CSV (3 rounds on 2,000 rows in
  ``--smoke``), each run starting its own kernel (no pool): the whole run (the kernel's start, data in,
  setup cell, ten rounds, notebook) vs the sum of its ten executions, forked (target ≤ 1.1×, the median of
  3 runs, each run's ratio in the metric) and cold (information); forked vs cold whole runs, and forked vs a
  fresh ``python file.py`` per round (``deepanalyze.py``; both sides' printed results checked equal).
  The template is warm (one kernel forked and closed first), as it is for a user's second run.
* ``eval``: ``kernel-agent eval`` (``run_eval``) on ``bench_eval``'s scripted suite, 12 questions (2 in
  ``--smoke``, the model answering at once) at ``-j4``, kernels forked vs cold, in questions per minute;
  and the median time until each question's first round (kernel from the pool, data, setup cell).

The bench process's own ``PYTHONPATH`` (a worktree put first) is removed from the environment while a part
runs: a kernel whose environment carries a ``PYTHONPATH`` is never forked (the template imported without
it), and the kernels run the package by absolute path (``-I``) whatever it says.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_agent import _through_agent, side_by_side
from bench_eval import _cases
from raw import cold_start
from report import Row, Scale, median, scaled

from kernel_agent.agent.run.agent import warm_host
from kernel_agent.eval import load_suite, run_eval
from kernel_agent.kernel.sandbox.template import TemplateKey, template_for
from kernel_agent.kernel.session import AsyncKernelSession

TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from evalsuite import ScriptedAnalyst, entries, write_generic  # the tests' scripted eval suite
from openai_server import OpenAIServer  # the tests' scripted model server

NAME = "template"

STACK = "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt"
PLOT = "fig, ax = plt.subplots(figsize=(4, 3))\npd.Series([3, 1, 2]).plot(ax=ax)\nplt.show()"
START_TARGET = 0.05  # the issue's: tens of milliseconds against a cold start plus the imports
MEMORY_TARGET = 0.25
ANALYSIS_TARGET = 1.1  # the whole run within 10 % of its executions alone
PATH = {True: "template", False: "cold"}


@contextlib.contextmanager
def _forkable() -> Iterator[None]:
    """This process's ``PYTHONPATH`` out of the environment the kernels inherit, for as long as the part runs."""
    saved = os.environ.pop("PYTHONPATH", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["PYTHONPATH"] = saved


def _check_path(session: AsyncKernelSession, forked: bool) -> None:
    """Raises unless ``session``'s kernel started the way asked (forked or cold)."""
    path = str(getattr(session.provider, "start_path", "cold"))
    if path != PATH[forked]:
        raise RuntimeError(f"a kernel asked to start {PATH[forked]} started {path}: {session.confinement}")


def _check_confinement(line: str, forked: bool) -> None:
    """Raises unless a run's confinement line says its kernel started the way asked."""
    said = "start: forked from a warmed template" if forked else "start: cold"
    if said not in line or (not forked and "template" in line.rsplit("start:", 1)[-1]):
        raise RuntimeError(f"a run asked to start its kernel {PATH[forked]} says: {line!r}")


async def _ok(session: AsyncKernelSession, code: str, expect: str | None = None) -> None:
    result = await session.execute(code, timeout=120)
    if result.status != "ok" or (expect is not None and result.result_text != expect):
        raise RuntimeError(f"{code!r} failed: {result.to_llm_text()[:500]}")
    if code == PLOT and not any("image/png" in output.get("data", {}) for output in result.outputs):
        raise RuntimeError(f"the plot gave no figure: {result.to_llm_text()[:500]}")


# ------------------------------------------------------------------ start
@dataclass(frozen=True)
class Start:
    """One kernel's start, in seconds: to ``1+1`` answered, then the imports, then the plot's figure; and of the
    first, how long until the kernel's first process existed (forked: the template's fork of it; cold: bwrap)."""

    one: float
    imports: float
    plot: float
    until_process: float

    @property
    def figure(self) -> float:
        return self.one + self.imports + self.plot


def _born(pid: int) -> float:
    """When process ``pid`` was made, on ``CLOCK_BOOTTIME`` (clock-tick resolution: 10 ms here)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, the 22nd field (the 20th after the name)


async def _timed_start(workspace: Path, forked: bool) -> Start:
    booted = time.clock_gettime(time.CLOCK_BOOTTIME)
    started = time.perf_counter()
    async with AsyncKernelSession(workspace, template=forked) as session:
        await _ok(session, "1+1", "2")
        first = time.perf_counter()
        await _ok(session, STACK)
        imported = time.perf_counter()
        await _ok(session, PLOT)
        plotted = time.perf_counter()
        _check_path(session, forked)
        until_process = _born(_kernel_pid(session)) - booted
    return Start(first - started, imported - first, plotted - imported, until_process)


async def _starts(scratch: Path, count: int) -> tuple[float, dict[bool, list[Start]], list[float]]:
    first_forked = (await _timed_start(scratch / "first", True)).one  # the template starts here, for the process
    await _timed_start(scratch / "warm-cold", False)  # the cold side's first start, discarded likewise
    times: dict[bool, list[Start]] = {True: [], False: []}
    stock: list[float] = []
    for index in range(count):
        for forked in (True, False) if index % 2 == 0 else (False, True):
            times[forked].append(await _timed_start(scratch / f"{PATH[forked]}-{index}", forked))
        if index < 3:  # the stock kernel, for information only: three are enough
            stock.append(await cold_start(f"{STACK}\n{PLOT}", scratch, scratch / "ipython"))
    return first_forked, times, stock


def start(quick: Scale) -> list[Row]:
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-template-"))
    try:
        with _forkable():
            first_forked, times, stock = asyncio.run(_starts(scratch, scaled(quick, 7, 3, 1)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    forked, cold = times[True], times[False]
    return [
        Row(
            "a kernel's start to its first 1+1 with the stack ready: forked from the template (numpy, pandas, "
            "matplotlib imported there) vs cold + those imports",
            median([each.one for each in forked]),
            median([each.one + each.imports for each in cold]),
            max_ratio=START_TARGET,
        ),
        Row(
            "a kernel's start to a first pandas + matplotlib figure (1+1, imports, plot): forked vs cold",
            median([each.figure for each in forked]),
            median([each.figure for each in cold]),
            max_ratio=START_TARGET,
        ),
        Row(
            "  ↳ start to 1+1 alone (no imports either side): forked vs cold",
            median([each.one for each in forked]),
            median([each.one for each in cold]),
        ),
        Row(
            "    ↳ of it, until the kernel's first process exists (forked: the template's fork; cold: bwrap's spawn)",
            median([each.until_process for each in forked]),
            median([each.until_process for each in cold]),
        ),
        Row(
            "    ↳ from there to 1+1 answered (forked: its sandbox, stepping in, ipykernel's start; cold: bwrap, "
            "the interpreter, ipykernel's imports and start)",
            median([each.one - each.until_process for each in forked]),
            median([each.one - each.until_process for each in cold]),
        ),
        Row(
            "  ↳ start to the figure: forked vs a stock ipykernel (jupyter_client alone, no sandbox)",
            median([each.figure for each in forked]),
            median(stock),
        ),
        Row(
            "  ↳ the process's first forked kernel (its template started for it) to 1+1 vs cold to 1+1",
            first_forked,
            median([each.one for each in cold]),
        ),
    ]


# ------------------------------------------------------------------ memory
def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it (a process that ends meanwhile is left out)."""
    found = [pid]
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += _tree(int(child))
    return found


def _uss_pss(pids: list[int]) -> tuple[float, float]:
    """The USS (private pages) and PSS of ``pids`` together, in MiB, from ``smaps_rollup``."""
    uss = pss = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name.startswith("Private_"):
                uss += int(rest.split()[0])
            elif name == "Pss":
                pss += int(rest.split()[0])
    return uss / 1024, pss / 1024


def _kernel_pid(session: AsyncKernelSession) -> int:
    """The kernel's host pid: the forked child, or a cold kernel's first process (bwrap)."""
    manager = session.manager
    pid = getattr(getattr(manager, "provisioner", None), "pid", None)
    if not isinstance(pid, int):
        raise RuntimeError("the kernel has no host pid to measure")
    return pid


def _template_pid(session: AsyncKernelSession) -> int:
    """The host pid of the template ``session``'s kernel was forked from."""
    provisioner = getattr(session.manager, "provisioner", None)
    key = TemplateKey.make(provisioner.template_env, [Path(p) for p in provisioner.extra_read])  # type: ignore[union-attr]
    pid = template_for(key).pid
    if pid is None:
        raise RuntimeError("the kernel's template is not running")
    return pid


async def _idle_memory(
    scratch: Path, count: int, forked: bool
) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """Each of ``count`` idle kernels' (USS, PSS) in MiB, all alive at once with the stack imported; and the
    template's own (forked only; else zeros)."""
    async with contextlib.AsyncExitStack() as stack:

        async def one(index: int) -> AsyncKernelSession:
            session = await stack.enter_async_context(
                AsyncKernelSession(scratch / f"{PATH[forked]}-{index}", template=forked)
            )
            await _ok(session, STACK)
            await _ok(session, "1+1", "2")
            _check_path(session, forked)
            return session

        sessions = await asyncio.gather(*(one(index) for index in range(count)))
        sizes = [_uss_pss(_tree(_kernel_pid(session))) for session in sessions]
        template = _uss_pss([_template_pid(sessions[0])]) if forked else (0.0, 0.0)
        return sizes, template


def _average(values: list[float]) -> float:
    return statistics.fmean(values)


def memory(quick: Scale) -> list[Row]:
    count = scaled(quick, 10, 10, 2)
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-template-mem-"))
    try:
        with _forkable():
            forked, template = asyncio.run(_idle_memory(scratch, count, True))
            cold, _ = asyncio.run(_idle_memory(scratch, count, False))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    forked_pss = [pss for _, pss in forked]
    cold_pss = [pss for _, pss in cold]
    return [
        Row(
            f"USS per idle kernel (numpy, pandas, matplotlib imported), {count} alive at once: forked vs cold",
            _average([uss for uss, _ in forked]),
            _average([uss for uss, _ in cold]),
            max_ratio=MEMORY_TARGET,
            unit="MiB",
        ),
        Row(
            f"PSS per idle kernel, the same {count} kernels: forked vs cold",
            _average(forked_pss),
            _average(cold_pss),
            max_ratio=MEMORY_TARGET,
            unit="MiB",
        ),
        Row(
            f"  ↳ PSS of all {count} forked kernels and their template (its own added) vs the {count} cold kernels'",
            sum(forked_pss) + template[1],
            sum(cold_pss),
            unit="MiB",
        ),
        Row(
            "  ↳ the template's own USS (once per kind, not per kernel) vs a cold kernel's",
            template[0],
            _average([uss for uss, _ in cold]),
            unit="MiB",
        ),
    ]


# ------------------------------------------------------------------ analysis
Run = tuple[float, list[float], list[str]]


async def _analysis_runs(
    csv: Path, workspace: Path, count: int, rounds: int | None, runs: dict[bool, list[Run]]
) -> Run:
    """``count`` runs a side (forked and cold, alternating which goes first), each starting its own kernel,
    into ``runs``; returns the first forked run."""
    async with AsyncKernelSession(workspace / "warm", template=True) as session:  # the template up, as for a 2nd run
        _check_path(session, True)
    await asyncio.to_thread(warm_host)
    for index in range(count):
        for forked in (True, False) if index % 2 == 0 else (False, True):
            said: list[str] = []
            run = await _through_agent(
                csv,
                workspace / f"{PATH[forked]}-{index}",
                rounds=rounds,
                session_options={"template": forked},
                confinements=said,
            )
            for line in said:
                _check_confinement(line, forked)
            runs[forked].append(run)
    return runs[True][0]


def _middle(runs: list[Run]) -> tuple[Run, list[float]]:
    """The run of median whole-run / executions ratio, and every run's ratio."""
    ratios = [total / sum(rounds) for total, rounds, _ in runs]
    return runs[sorted(range(len(runs)), key=ratios.__getitem__)[len(runs) // 2]], ratios


def analysis(quick: Scale) -> list[Row]:
    runs: dict[bool, list[Run]] = {True: [], False: []}
    with _forkable():
        size_mb, _, (theirs_total, _, _) = side_by_side(
            quick,
            "ka-bench-template-run-",
            lambda csv, workspace, rounds: _analysis_runs(csv, workspace, scaled(quick, 3, 1, 1), rounds, runs),
        )
    (forked_total, forked_rounds, _), forked_ratios = _middle(runs[True])
    (cold_total, cold_rounds, _), cold_ratios = _middle(runs[False])
    n = len(forked_rounds)
    each = ", ".join(f"{ratio:.3f}×" for ratio in forked_ratios)
    return [
        Row(
            f"{n}-round analysis of a {size_mb:.0f} MB CSV, its kernel forked at the run's start: whole run vs its "
            f"{n} executions (median of {len(forked_ratios)} runs; each: {each})",
            forked_total,
            sum(forked_rounds),
            max_ratio=ANALYSIS_TARGET,
        ),
        Row(
            "  ↳ the same, its kernel started cold: whole run vs its executions (each: "
            + ", ".join(f"{ratio:.3f}×" for ratio in cold_ratios)
            + ")",
            cold_total,
            sum(cold_rounds),
        ),
        Row("  ↳ whole run: forked vs cold", forked_total, cold_total),
        Row("  ↳ whole run, forked, vs a fresh process per round", forked_total, theirs_total),
    ]


# ------------------------------------------------------------------ eval
async def _suite(scratch: Path, questions: int, delay: float, forked: bool) -> tuple[float, list[dict[str, Any]]]:
    cases = _cases(questions)
    suite = load_suite(write_generic(scratch / f"suite-{PATH[forked]}", cases))
    with OpenAIServer() as server:
        server.add(*entries(ScriptedAnalyst(cases, scratch / "none", delay=delay), 3 * questions))
        options = {"model": "m", "base_url": server.base_url, "session_options": {"template": forked}}
        started = time.monotonic()
        done = await run_eval(suite, suite.questions, scratch / f"j4-{PATH[forked]}", options, concurrency=4)
        wall = time.monotonic() - started
    wrong = [row["id"] for row in done.results if row["outcome"] != "correct"]
    if wrong:
        raise RuntimeError(f"questions {wrong} were not answered right ({PATH[forked]} kernels)")
    _check_notebooks(scratch / f"j4-{PATH[forked]}", forked)
    return wall, list(done.results)


def _check_notebooks(folder: Path, forked: bool) -> None:
    """Raises unless every question's notebook says its kernel started the way asked."""
    notebooks = sorted(folder.rglob("*.ipynb"))
    if not notebooks:
        raise RuntimeError(f"the eval left no notebooks in {folder}")
    for notebook in notebooks:
        text = notebook.read_text(encoding="utf-8")
        lines = [line for line in text.splitlines() if '"confinement"' in line and "start: " in line]
        if not lines:
            raise RuntimeError(f"{notebook.name} does not say how its kernel started")
        for line in lines:
            _check_confinement(line, forked)


def eval_suite(quick: Scale) -> list[Row]:
    questions = scaled(quick, 12, 12, 2)
    delay = scaled(quick, 0.5, 0.5, 0.0)
    scratch = Path(tempfile.mkdtemp(prefix="ka-bench-template-eval-"))
    walls: dict[bool, float] = {}
    starts: dict[bool, float] = {}
    try:
        with _forkable():
            for forked in (True, False):
                wall, results = asyncio.run(_suite(scratch, questions, delay, forked))
                walls[forked] = wall
                starts[forked] = median([row["start_seconds"] for row in results])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def per_minute(wall: float) -> str:
        return f"{60 * questions / wall:.1f} q/min"

    return [
        Row(
            f"eval: {questions} scripted questions (model {delay:g} s a reply) at -j4, kernels forked "
            f"({per_minute(walls[True])}) vs cold ({per_minute(walls[False])})",
            walls[True],
            walls[False],
        ),
        Row(
            "  ↳ until a question's first round (kernel from the pool, data, setup), median: forked vs cold",
            starts[True],
            starts[False],
        ),
    ]


PARTS = {"start": start, "memory": memory, "analysis": analysis, "eval": eval_suite}


if __name__ == "__main__":
    from report import render

    size = Scale.SMOKE if "--smoke" in sys.argv else Scale.QUICK if "--quick" in sys.argv else Scale.FULL
    print(render([row for part in PARTS.values() for row in part(size)]))
