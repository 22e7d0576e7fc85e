"""Issue 3's benchmark: a 10-round analysis through the agent vs a process per round.

The same ten rounds (load, clean, group, plot, model, ...) of a ~50 MB CSV
run twice:

* through ``AsyncAgent`` with a scripted model (no model time: the replies
  are instant) and the live kernel, where round 1 reads the CSV once and
  later rounds use the variables it left;
* DeepAnalyze-style, each round a fresh ``python file.py`` (``deepanalyze.py``)
  that must re-import pandas and re-read and re-clean the data, because
  nothing survives between rounds.

Both sides' printed results are checked against each other, so a fast wrong
run cannot pass.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from deepanalyze import execute as run_in_subprocess
from report import Row, scaled

from kernel_agent.agent.run.agent import AsyncAgent
from kernel_agent.events import ExecutionFinished, RunFinished, RunStarted
from kernel_agent.kernel.interface import KernelFactory
from kernel_agent.model.chat import ModelReply, Piece
from kernel_agent.model.messages import ChatMessage
from kernel_agent.model.scripted import ScriptedChatModel

NAME = "agent"

_LOAD = "df = pd.read_csv('big.csv', parse_dates=['date'])\nprint(df.shape)"
_CLEAN = (
    "df = df.dropna(subset=['units']).drop_duplicates()\n"
    "df = df[df['price'] > 0]\n"
    "df['revenue'] = df['units'] * df['price'] * (1 - df['discount'].fillna(0))\n"
    "print(len(df))"
)
_BODIES = [
    "print(df.groupby('region')['revenue'].sum().round(2).to_string())",
    "print(df.groupby('category')['units'].mean().round(4).to_string())",
    "monthly = df.set_index('date')['revenue'].resample('MS').sum()\nprint(monthly.tail(3).round(2).to_string())",
    "fig, ax = plt.subplots(figsize=(6, 3))\n"
    "df.groupby('region')['revenue'].sum().plot.bar(ax=ax)\nplt.show()\nprint('plotted')",
    "slope, intercept = np.polyfit(df['discount'].fillna(0), df['units'], 1)\nprint(round(slope, 4))",
    "print(df.pivot_table(index='region', columns='category', values='revenue', aggfunc='sum').round(1).to_string())",
    "print(df['revenue'].describe().round(3).to_string())",
    "print(df.nlargest(3, 'revenue')[['region', 'category', 'revenue']].round(2).to_string())",
]
_PRELUDE = (
    "import numpy as np\nimport pandas as pd\nimport matplotlib\nmatplotlib.use('Agg')\nimport "
    "matplotlib.pyplot as plt\n"
)


def _rounds(count: int | None = None) -> list[str]:
    """What the agent's model sends: round 1 loads, round 2 cleans, the rest use state (the first ``count``)."""
    return [_LOAD, _CLEAN, *_BODIES][:count]


def _standalone(index: int) -> str:
    """The same round as a DeepAnalyze-style model must write it: everything again."""
    if index == 0:
        return _PRELUDE + _LOAD
    return (
        _PRELUDE
        + _LOAD.split("\n")[0]
        + "\n"
        + _CLEAN.replace("print(len(df))", "")
        + (_CLEAN if index == 1 else _BODIES[index - 2]).replace("plt.show()", "plt.savefig('fig.png')")
    )


def _make_csv(path: Path, rows: int) -> None:
    rng = np.random.default_rng(7)
    frame = pd.DataFrame(
        {
            "date": pd.Timestamp("2022-01-01") + pd.to_timedelta(rng.integers(0, 1095, rows), unit="D"),
            "region": rng.choice(["North", "South", "East", "West"], rows),
            "category": rng.choice(["Electronics", "Furniture", "Office"], rows),
            "product": rng.choice([f"P{i:03d}" for i in range(200)], rows),
            "units": rng.integers(1, 50, rows).astype(float),
            "price": rng.uniform(1, 500, rows).round(2),
            "discount": rng.choice([0, 0.05, 0.1, 0.2, np.nan], rows),
            "note": rng.choice(["", "rush", "gift", "returning customer"], rows),
        }
    )
    frame.loc[rng.integers(0, rows, rows // 200), "units"] = np.nan
    frame.to_csv(path, index=False)


class _TimedModel(ScriptedChatModel):
    """The scripted model, noting when each request arrives and each reply leaves."""

    def __init__(self, replies: list[str]) -> None:
        super().__init__(replies)
        self.asked: list[float] = []
        self.answered: list[float] = []

    async def stream(
        self, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None
    ) -> AsyncIterator[Piece]:
        self.asked.append(time.perf_counter())
        async for piece in super().stream(messages, options):
            if isinstance(piece, ModelReply):
                self.answered.append(time.perf_counter())
            yield piece


async def _through_agent(
    csv: Path,
    workspace: Path,
    session_factory: KernelFactory | None = None,
    gaps: list[float] | None = None,
    rounds: int | None = None,
    session_options: dict[str, Any] | None = None,
    confinements: list[str] | None = None,
) -> tuple[float, list[float], list[str]]:
    """The scripted run (its kernel from ``session_factory``, default a fresh one started with
    ``session_options``): wall time, each execution's own duration, what each printed. ``gaps`` gets, per
    executed round, the agent's own time from the model's reply to its next request, the execution's own
    duration taken out; ``confinements`` the run's confinement line (how its kernel started)."""
    replies = [f"<Code>\n{code}\n</Code>" for code in _rounds(rounds)] + ["<Answer>done</Answer>"]
    model = _TimedModel(replies)
    agent = AsyncAgent(
        protocol="tags",
        chat_model=model,
        exec_timeout=600,
        max_rounds=20,
        session_factory=session_factory,
        session_options=session_options,
    )
    started = time.perf_counter()
    per_round, outputs = [], []
    async with agent:
        async for event in agent.stream("benchmark", data=[csv], workspace=workspace):
            if isinstance(event, RunStarted) and confinements is not None:
                confinements.append(event.confinement)
            elif isinstance(event, ExecutionFinished):
                if event.result.status != "ok":
                    raise RuntimeError(f"round {event.round} failed: {event.result.to_llm_text()}")
                per_round.append(event.result.duration_s)
                outputs.append(event.result.stdout)
            elif isinstance(event, RunFinished) and event.run.stop_reason != "answer":
                raise RuntimeError(f"the scripted run ended with {event.run.stop_reason}")
    if gaps is not None:
        gaps.extend(model.asked[i + 1] - model.answered[i] - per_round[i] for i in range(len(per_round)))
    return time.perf_counter() - started, per_round, outputs


def _through_subprocesses(workspace: Path, rounds: int | None = None) -> tuple[float, list[float], list[str]]:
    per_round, outputs = [], []
    for index in range(len(_rounds(rounds))):
        started = time.perf_counter()
        outputs.append(run_in_subprocess(_standalone(index), workspace))
        per_round.append(time.perf_counter() - started)
    return sum(per_round), per_round, outputs


def _same(ours: list[str], theirs: list[str]) -> None:
    for index, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        last_a, last_b = a.strip().splitlines()[-1:], b.strip().splitlines()[-1:]
        if re.sub(r"\s+", " ", str(last_a)) != re.sub(r"\s+", " ", str(last_b)):
            raise RuntimeError(f"round {index + 1} printed different results: {last_a} vs {last_b}")


def side_by_side(
    quick: int,
    prefix: str,
    ours: Callable[[Path, Path, int | None], Coroutine[Any, Any, tuple[float, list[float], list[str]]]],
) -> tuple[float, tuple[float, list[float], list[str]], tuple[float, list[float], list[str]]]:
    """The CSV's size in MB, then ``ours(csv, workspace, rounds)`` and the process-per-round baseline on the
    same data (answers checked equal), each as (wall time, per-round times, outputs); all 10 rounds, 3 in a
    smoke run (``rounds``). Cleans up."""
    rounds = scaled(quick, None, None, 3)
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        csv = scratch / "big.csv"
        _make_csv(csv, scaled(quick, 930_000, 60_000, 2_000))  # ~50 MB in full
        size_mb = csv.stat().st_size / 1e6
        (scratch / "sub").mkdir()
        shutil.copy(csv, scratch / "sub" / "big.csv")
        mine = asyncio.run(ours(csv, scratch / "agent", rounds))
        theirs = _through_subprocesses(scratch / "sub", rounds)
        _same(mine[2], theirs[2])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return size_mb, mine, theirs


def analysis(quick: bool) -> list[Row]:
    gaps: list[float] = []
    size_mb, (ours_total, ours_rounds, _), (theirs_total, theirs_rounds, _) = side_by_side(
        quick,
        "ka-bench-agent-",
        lambda csv, workspace, rounds: _through_agent(csv, workspace, gaps=gaps, rounds=rounds),
    )
    n = len(ours_rounds)
    return [
        Row(
            f"{n}-round analysis of a {size_mb:.0f} MB CSV, whole run incl. kernel start: agent vs process per round",
            ours_total,
            theirs_total,
            max_ratio=0.1,
        ),
        Row(
            f"  ↳ the {n} executions only (kernel start and setup excluded)",
            sum(ours_rounds),
            theirs_total,
            max_ratio=0.1,
        ),
        Row(
            "  ↳ rounds 3–10 (state already in memory), median per round",
            float(np.median(ours_rounds[2:])),
            float(np.median(theirs_rounds[2:])),
        ),
        Row("  ↳ round 1 (read the CSV)", ours_rounds[0], theirs_rounds[0]),
        Row(
            "  ↳ the agent's own time from a reply to the next request (execution excluded), median",
            float(np.median(gaps)),
        ),
        Row("  ↳ the same, slowest round", max(gaps)),
    ]


PARTS = {"analysis": analysis}
