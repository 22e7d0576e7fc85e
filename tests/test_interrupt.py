"""Ctrl-C (SIGINT, what Jupyter's "interrupt kernel" sends) through the sync ``Agent`` and the ``%%agent`` magic.

The signal arrives while the agent's code runs; the run must unwind completely (notebook saved as
cancelled, kernel stopped, runtime dir removed) before the interrupt reaches the caller.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

import nbformat
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from leaks import our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent import Agent

pytestmark = pytest.mark.kernel

SLEEP = Reply("Waiting.", tool_calls=(python_call("import time\ntime.sleep(60)"),))


def interrupt_soon() -> None:
    """Send SIGINT to this process shortly, from another thread (Linux delivers it to the main thread)."""
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()


def runtime_dirs() -> list[Path]:
    """This process's kernel runtime dirs (see ``kernel.session``)."""
    found = []
    for folder in Path(tempfile.gettempdir()).glob("kernel-agent-*"):
        owner = folder / "owner.pid"
        if owner.is_file() and owner.read_text() == str(os.getpid()):
            found.append(folder)
    return found


def test_keyboard_interrupt_unwinds_the_run_before_it_propagates(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(SLEEP)
    with Agent(model="m", base_url=openai_server.base_url) as agent, pytest.raises(KeyboardInterrupt):
        for event in agent.stream("Sleep.", workspace=tmp_path / "ws"):
            if event.kind == "execution_started":
                interrupt_soon()

    assert our_kernel_pids() == [] and runtime_dirs() == []
    saved = nbformat.read(tmp_path / "ws.ipynb", as_version=4)
    assert saved.metadata["kernel_agent"]["stop_reason"] == "cancelled"


def test_interrupted_magic_says_so_and_keeps_the_partial_run(
    shell: InteractiveShell, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    def sleep_then_interrupt(body: dict[str, Any]) -> Reply:
        interrupt_soon()  # fires while the magic waits on the code (or, under load, the reply): both cancel
        return SLEEP

    openai_server.add(sleep_then_interrupt)
    shell.user_ns["_agent_run"] = "the previous run"
    with capture_output() as captured:
        shell.run_cell_magic("agent", f"--model m --base-url {openai_server.base_url} -w ws", "Sleep.")

    shown = "\n".join(str(out.data.get("text/html", "")) for out in captured.outputs)  # markdown, cleaned
    assert "<strong>Interrupted:</strong> the notebook is saved" in shown
    run = shell.user_ns["_agent_run"]
    assert run.stop_reason == "cancelled" and Path(run.notebook_path).resolve() == tmp_path / "ws.ipynb"
    assert our_kernel_pids() == [] and runtime_dirs() == []
