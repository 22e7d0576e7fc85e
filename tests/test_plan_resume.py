"""Plan mode through the CLI and the real openai SDK: SIGKILL mid-plan, then ``--resume`` keeps the
finished nodes, rebuilds their variables in a new kernel, runs the rest, and the notebook replays."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from leaks import kernels_of, our_kernel_pids, process_gone
from openai_server import OpenAIServer, Reply

from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.kernel.session import sweep_stale_runtime_dirs
from kernel_agent.notebook.replay import replay

pytestmark = pytest.mark.kernel

PLAN = {
    "directions": ["descriptive"],
    "nodes": [
        {"id": "load", "title": "Load"},
        {"id": "double", "title": "Double it", "depends_on": ["load"]},
        {"id": "sum_up", "title": "Sum up", "kind": "text", "depends_on": ["double"]},
    ],
}


def wait_for(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Poll for a condition another process brings about (bounded; fails loudly)."""
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def plan_cli(server: OpenAIServer, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "kernel_agent.cli",
        "plan",
        *args,
        "--model",
        "m",
        "--base-url",
        server.base_url,
        "--json",
    ]


def test_plan_killed_mid_run_resumes_from_its_state(openai_server: OpenAIServer, tmp_path: Path) -> None:
    workspace, notebook = tmp_path / "ws", tmp_path / "plan.ipynb"
    openai_server.add(Reply(json.dumps(PLAN)))
    openai_server.add(Reply("```python\na = 21\nprint('a is', a)\n```"), Reply("`a` is 21."))
    openai_server.add(Reply("```python\nimport time\ntime.sleep(120)\n```"))
    cli = subprocess.Popen(
        plan_cli(openai_server, "Double a number", "-w", str(workspace), "-o", str(notebook)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: len(openai_server.requests) == 4 and bool(kernels_of(cli.pid)), "the slow node to start")
        kernels = kernels_of(cli.pid)
        cli.send_signal(signal.SIGKILL)
        cli.wait(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        cli.stderr.close()  # type: ignore[union-attr]
    state = PlanState.load(state_path(notebook))
    assert {k: r.status for k, r in state.results.items()} == {"load": "done"}
    wait_for(lambda: all(process_gone(k) for k in kernels), "the orphaned kernel to exit")
    sweep_stale_runtime_dirs()

    openai_server.add(Reply("```python\nb = a * 2\nprint('b is', b)\n```"))  # `a` comes from the rebuilt kernel
    openai_server.add(Reply("`b` is 42."))
    openai_server.add(Reply("Doubling 21 gives 42."))
    done = subprocess.run(
        plan_cli(openai_server, "--resume", str(notebook)), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    ready = next(e for e in events if e["event"] == "plan_ready")
    assert [n["status"] for n in ready["nodes"]] == ["done", "pending", "pending"]
    assert [e["node_id"] for e in events if e["event"] == "node_finished"] == ["double", "sum_up"]
    assert events[-1]["counts"] == {"total": 3, "done": 3, "failed": 0, "skipped": 0, "pending": 0}
    assert len(openai_server.requests) == 7  # no new plan was asked for

    nb = nbformat.read(notebook, as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"][1:]
    assert code == ["a = 21\nprint('a is', a)", "b = a * 2\nprint('b is', b)"]
    assert "Doubling 21 gives 42." in Path(events[-1]["report"]).read_text()
    check = replay(notebook)
    assert check.ok, check.to_text()
    assert not our_kernel_pids()
