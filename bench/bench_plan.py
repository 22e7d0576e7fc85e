"""Issue 15's benchmark: a 6-node plan in one live kernel vs a fresh process per node.

The same plan (load, clean, then four analyses of the cleaned frame, one a
figure) runs twice on a ~20 MB CSV (``--quick``: ~4 MB):

* through plan mode (``stream_plan``) with a scripted model and one sandboxed
  kernel, where later nodes use the DataFrame the first two built;
* as seed 002 does with a container per task, minus the container: each node
  a fresh ``python file.py`` that must re-import pandas and re-read and
  re-clean the data.

The last printed line of every node is checked against the other side's.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
from pathlib import Path

from bench_agent import _BODIES, _CLEAN, _LOAD, _PRELUDE, _make_csv
from deepanalyze import execute as run_in_subprocess
from report import Row, scaled

from kernel_agent.agent.plan.runner import PlanOptions
from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.agent.run.agent import AsyncAgent
from kernel_agent.model.scripted import ScriptedChatModel

NAME = "plan"
# inline figures, as the agent's kernel shows them
_KERNEL_PRELUDE = "import numpy as np\nimport pandas as pd\nimport matplotlib.pyplot as plt\n"

_NODES = [
    ("load", _KERNEL_PRELUDE + _LOAD, []),
    ("clean", _CLEAN, ["load"]),
    ("by_region", _BODIES[0], ["clean"]),
    ("by_category", _BODIES[1], ["clean"]),
    ("plot", _BODIES[3], ["clean"]),
    ("fit", _BODIES[4], ["clean"]),
]


def _plan_replies(nodes: list[tuple[str, str, list[str]]]) -> list[str]:
    plan = {
        "directions": ["descriptive"],
        "nodes": [
            {"id": i, "title": i.replace("_", " "), "kind": "visualisation" if i == "plot" else "code", "depends_on": d}
            for i, _, d in nodes
        ],
    }
    replies = [json.dumps(plan)]
    for node_id, code, _ in nodes:  # each code task: its code, then the reply without code that ends it
        replies += [f"```python\n{code}\n```", "A bar per region." if node_id == "plot" else f"{node_id} done."]
    return replies


async def _through_plan(
    csv: Path, workspace: Path, nodes: list[tuple[str, str, list[str]]]
) -> tuple[float, dict[str, str]]:
    shutil.copy(csv, workspace / csv.name)
    agent = AsyncAgent(chat_model=ScriptedChatModel(_plan_replies(nodes)), preload=False, exec_timeout=600)
    notebook = workspace.with_name(f"{workspace.name}.plan.ipynb")
    started = time.perf_counter()
    async with agent:
        async for _ in agent.stream_plan("bench", (), workspace, notebook, options=PlanOptions(max_fix_attempts=0)):
            pass
    elapsed = time.perf_counter() - started
    results = PlanState.load(state_path(notebook)).results
    if any(r.status != "done" for r in results.values()):
        raise RuntimeError(f"plan nodes failed: {[(k, r.reason) for k, r in results.items()]}")
    return elapsed, {k: r.output_text().strip().splitlines()[-1] for k, r in results.items()}


def _per_process(csv: Path, workspace: Path, nodes: list[tuple[str, str, list[str]]]) -> tuple[float, dict[str, str]]:
    shutil.copy(csv, workspace / csv.name)
    started = time.perf_counter()
    last = {}
    for index, (node_id, code, _) in enumerate(nodes):
        # nothing survives between processes: every one re-imports, re-reads and (after node 1) re-cleans
        steps = [_LOAD, _CLEAN][: index + 1] + ([code] if index >= 2 else [])
        last[node_id] = run_in_subprocess("\n".join([_PRELUDE, *steps]), workspace).strip().splitlines()[-1]
    return time.perf_counter() - started, last


def plan_vs_process(quick: bool) -> list[Row]:
    """The whole plan: one kernel (incl. its start and the model's plan) vs six processes (three of each in a
    smoke run)."""
    rows = scaled(quick, 250_000, 50_000, 2_000)
    nodes = _NODES[: scaled(quick, None, None, 3)]
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        csv = Path(tmp) / "big.csv"
        _make_csv(csv, rows)
        size_mb = csv.stat().st_size / 1e6
        ours_dir, theirs_dir = Path(tmp) / "ours", Path(tmp) / "theirs"
        ours_dir.mkdir()
        theirs_dir.mkdir()
        ours, ours_last = asyncio.run(_through_plan(csv, ours_dir, nodes))
        theirs, theirs_last = _per_process(csv, theirs_dir, nodes)
    if ours_last != theirs_last:
        raise RuntimeError(f"the two sides disagree: {ours_last} vs {theirs_last}")
    return [
        Row(
            f"{len(nodes)}-node plan on a {size_mb:.0f} MB CSV, whole run incl. kernel start: one kernel vs "
            "process per node",
            ours,
            theirs,
            max_ratio=0.6,
        )
    ]


PARTS = {"plan_vs_process": plan_vs_process}
