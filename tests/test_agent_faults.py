"""Faults around the agent: a dying model server, malformed replies, the agent process killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from leaks import kernels_of, our_kernel_pids, process_gone
from openai_server import OpenAIServer, Reply

from kernel_agent import Agent
from kernel_agent.events import TextDelta
from kernel_agent.kernel.session import sweep_stale_runtime_dirs
from kernel_agent.notebook.export import clean_path

pytestmark = pytest.mark.kernel

FAST = {"max_retries": 2, "backoff": 0.01}


def agent_for(server: OpenAIServer, **kwargs: Any) -> Agent:
    return Agent(model="m", base_url=server.base_url, protocol="tags", model_options=FAST, **kwargs)


def wait_for(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Poll for a condition another process brings about (bounded; fails loudly)."""
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_server_dying_mid_stream_once_is_retried(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("<Code>print('never complete')</Code>", die_after=2, chunk_size=4))
    openai_server.add(Reply("<Answer>second try</Answer>"))
    with agent_for(openai_server) as agent:
        events = list(agent.stream("flaky", workspace=tmp_path / "ws"))
    run = events[-1].run  # type: ignore[union-attr]
    assert run.answer == "second try"
    assert run.rounds[0].code is None  # the broken stream never ran anything
    kinds = [e.kind for e in events]
    assert kinds.count("text_reset") == 1  # the front ends are told the streamed text is void...
    after_reset = events[kinds.index("text_reset") + 1 :]
    streamed = "".join(e.text for e in after_reset if isinstance(e, TextDelta))
    assert streamed == "<Answer>second try</Answer>"  # ...and then see exactly the reply that counts
    reset = events[kinds.index("text_reset")]
    assert "closed the stream early" in reset.reason and "retrying" in reset.reason  # type: ignore[union-attr]


def test_server_dying_for_good_ends_with_llm_error(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("<Code>x = 1</Code>"))
    for _ in range(3):
        openai_server.add(Reply("<Code>print('half')</Code>", die_after=1))
    with agent_for(openai_server) as agent:
        run = agent.run("dies", workspace=tmp_path / "ws")
    assert run.stop_reason == "llm_error"
    assert run.error
    assert [r.status for r in run.rounds] == ["ok"]
    nb = nbformat.read(run.notebook_path, as_version=4)
    nbformat.validate(nb)
    assert "x = 1" in [c.source for c in nb.cells]


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("", "recovered"),  # nothing to run or answer: the model is told so and answers next
        ("<Code>print(1)", "recovered"),  # the unclosed code runs, then the answer comes
        ("<Analyze>no end <Understand> nested <Answer", "recovered"),
        ("<Answer>" + "y" * 1_000_000, "y" * 20),  # an unclosed answer is the answer, at once
    ],
    ids=["empty", "unclosed-code", "unbalanced", "one-megabyte"],
)
def test_malformed_replies_are_recorded_not_fatal(
    reply: str, answer: str, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    openai_server.add(Reply(reply, chunk_size=65536))
    openai_server.add(Reply("<Answer>recovered</Answer>"))
    with agent_for(openai_server, max_rounds=2) as agent:
        run = agent.run("malformed", workspace=tmp_path / "ws")
    assert run.stop_reason == "answer" and (run.answer or "").startswith(answer)  # the script decides: one outcome
    assert len(run.rounds) == (1 if answer != "recovered" else 2)
    assert run.rounds[0].reply.startswith(reply[:20])
    nbformat.validate(nbformat.read(run.notebook_path, as_version=4))


_SCRIPT = """
import sys
from kernel_agent import Agent
from kernel_agent.events import TextDelta
agent = Agent(model="m", base_url=sys.argv[1], protocol="tags", model_options={"max_retries": 0})
agent.run("killed mid-run", workspace=sys.argv[2], notebook=sys.argv[3])
"""


def test_agent_killed_mid_run_leaves_every_completed_round(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("<Code>first = 1</Code>"))
    openai_server.add(Reply("<Code>second = 2</Code>"))
    openai_server.add(Reply("<Code>import time\ntime.sleep(120)</Code>"))
    notebook = tmp_path / "run.ipynb"
    agent = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, openai_server.base_url, str(tmp_path / "ws"), str(notebook)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: len(openai_server.requests) == 3 and bool(kernels_of(agent.pid)), "round 3 to start")
        wait_for(
            lambda: "second = 2" in _text(clean_path(notebook)), "round 2's clean view (written alongside round 3)"
        )
        kernels = kernels_of(agent.pid)
        runtime_dirs = _runtime_dirs_of(agent.pid)
        assert len(runtime_dirs) == 1
        agent.send_signal(signal.SIGKILL)
        agent.wait(timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        agent.stderr.close()  # type: ignore[union-attr]
    nb = nbformat.read(notebook, as_version=4)
    nbformat.validate(nb)
    assert [c.source for c in nb.cells if c.cell_type == "code"][1:] == ["first = 1", "second = 2"]
    clean = nbformat.read(clean_path(notebook), as_version=4)  # the kill left it complete, as every write does
    nbformat.validate(clean)
    assert [c.source for c in clean.cells if c.cell_type == "code"][1:] == ["first = 1", "second = 2"]
    wait_for(lambda: all(process_gone(k) for k in kernels), "the orphaned kernel to exit")
    sweep_stale_runtime_dirs()  # a SIGKILLed owner cannot clean up; the next session start sweeps
    assert not runtime_dirs[0].exists()
    assert not our_kernel_pids()


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _runtime_dirs_of(pid: int) -> list[Path]:
    return [
        d
        for d in Path(tempfile.gettempdir()).glob("kernel-agent-*")
        if (d / "owner.pid").is_file() and (d / "owner.pid").read_text() == str(pid)
    ]


def test_sweep_removes_only_dirs_of_dead_owners(tmp_path: Path) -> None:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive, foreign = tmp_path / "kernel-agent-dead", tmp_path / "kernel-agent-alive", tmp_path / "kernel-agent-x"
    for folder, owner in ((dead, finished.stdout.strip()), (alive, str(os.getpid())), (foreign, None)):
        folder.mkdir()
        if owner is not None:
            (folder / "owner.pid").write_text(owner)
    assert sweep_stale_runtime_dirs(str(tmp_path)) == [dead]
    assert not dead.exists() and alive.exists() and foreign.exists()
