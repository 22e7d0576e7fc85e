"""The ``%%agent`` magic in a real IPython shell and inside a real kernel (a notebook run by nbclient)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pandas as pd
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from leaks import our_kernel_pids
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.notebook.replay import replay
from kernel_agent.safe.html import CONTAINER_STYLE


def rendered(outputs: list[Any], mime: str) -> str:
    """Every ``mime`` payload among captured or notebook outputs, joined."""
    texts = []
    for out in outputs:
        data = out.data if hasattr(out, "data") else out.get("data", {})
        if mime in data:
            value = data[mime]
            texts.append("".join(value) if isinstance(value, list) else str(value))
    return "\n".join(texts)


@pytest.mark.kernel
def test_share_defines_the_variables_from_round_1_and_the_notebook_replays(
    shell: InteractiveShell, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    shell.user_ns.update(
        df=pd.DataFrame({"x": [1, 2, 3], "y": [4.0, 5.0, 6.0]}), threshold=0.5, arr=np.arange(4), labels={"a": [1, 2]}
    )
    openai_server.add(Reply("Check.", tool_calls=(python_call("print(df.shape, threshold, int(arr.sum()), labels)"),)))

    def answer(body: dict[str, Any]) -> Reply:
        assert "(3, 2) 0.5 6 {'a': [1, 2]}" in json.dumps(body["messages"])
        return Reply("The shared values arrived.")

    openai_server.add(answer)
    line = f"--model m --base-url {openai_server.base_url} --workspace ws --share df,threshold --share arr,labels"

    with capture_output() as captured:
        shell.run_cell_magic("agent", line, "Use the shared variables.")

    assert "(3, 2) 0.5 6" in rendered(captured.outputs, "text/plain")
    assert "The shared values arrived." in rendered(captured.outputs, "text/plain")
    prompt = json.dumps(openai_server.requests[0]["messages"], ensure_ascii=False)
    assert "`df` (DataFrame, 3 rows × 2 columns, from `df.parquet`)" in prompt
    run = shell.user_ns["_agent_run"]
    assert run.answer == "The shared values arrived." and len(run.rounds) == 2
    setup = nbformat.read(run.notebook_path, as_version=4).cells[1]
    assert 'df = pd.read_parquet("df.parquet")' in setup.source
    assert setup.source.count("import pandas as pd") == 1
    assert (tmp_path / "ws" / "df.parquet").stat().st_mode & 0o777 == 0o444  # inputs are read-only
    report = replay(run.notebook_path)
    assert report.ok and [cell.status for cell in report.cells] == ["match", "match"]


@pytest.mark.kernel
def test_scripted_demo_renders_reasoning_code_figures_answer_and_link(shell: InteractiveShell) -> None:
    with capture_output() as captured:
        shell.run_cell_magic("agent", "--scripted-demo -w demo", "Analyse sales.csv.")

    markdown = rendered(captured.outputs, "text/plain")
    assert "Scripted replies" in markdown and "**Analyze**" in markdown
    assert "### Answer" in markdown and "Sales 2023–2024" in markdown
    assert "<strong>Analyze</strong>" in rendered(captured.outputs, "text/html")  # markdown, as cleaned HTML
    assert not any(set(out.data) - {"text/html", "text/plain", "image/png"} for out in captured.outputs)
    assert '<span style="color' in rendered(captured.outputs, "text/html")  # code, syntax-highlighted inline
    pages = [out.data["text/html"] for out in captured.outputs if "text/html" in out.data]
    assert pages and all(page.startswith(f'<div style="{CONTAINER_STYLE}">') for page in pages)  # each in its box
    assert not re.search(r"\s(class|id)=", "".join(pages))  # nothing names the page's styles
    assert rendered(captured.outputs, "image/png")
    assert 'href="demo.ipynb"' in rendered(captured.outputs, "text/html")  # beside the workspace
    run = shell.user_ns["_agent_run"]
    assert run.info.scripted and run.stop_reason == "answer"


@pytest.mark.kernel
def test_an_interrupted_cell_keeps_the_output_it_had_shown(
    shell: InteractiveShell, openai_server: OpenAIServer
) -> None:
    code = (
        "import matplotlib.pyplot as plt, time\nplt.plot([1, 2])\nplt.show()\nprint('half way there', flush=True)\n"
        "time.sleep(120)"
    )
    openai_server.add(Reply("Working.", tool_calls=(python_call(code),)))
    done = threading.Event()

    def interrupt_once_shown(captured: Any) -> None:
        # Jupyter's ■ is a SIGINT to the process running the cell (here, this one)
        while not done.is_set():
            shown = rendered(captured.outputs, "text/plain")
            if "output so far:\nhalf way there" in shown:  # printed by the running code (the code shown has it too)
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)  # polling the captured outputs for what the cell shows

    with capture_output() as captured:
        watcher = threading.Thread(target=interrupt_once_shown, args=(captured,))
        watcher.start()
        try:
            shell.run_cell_magic("agent", f"--model m --base-url {openai_server.base_url} -w ws", "Wait.")
        finally:
            done.set()
            watcher.join()

    after = captured.outputs[
        [i for i, out in enumerate(captured.outputs) if "✗ interrupted" in rendered([out], "text/plain")][0] :
    ]
    assert "half way there" in rendered(after, "text/plain")  # still shown below the status, not replaced
    assert rendered(after, "image/png")  # the figure it had shown too
    assert "KeyboardInterrupt" not in rendered(after, "text/plain")  # the user's own ■ is no error to show
    assert "**Interrupted:** the notebook is saved" in rendered(after, "text/plain")
    run = shell.user_ns["_agent_run"]
    assert run.stop_reason == "cancelled" and "half way there" in str(run.rounds[-1].result.outputs)


@pytest.mark.kernel
def test_sandbox_off_says_so_in_the_cell_and_the_run(shell: InteractiveShell) -> None:
    with capture_output() as captured:
        shell.run_cell_magic("agent", "--scripted-demo -w loose --sandbox off --memory 6000", "Analyse sales.csv.")
    assert "the kernel runs unconfined (sandbox off)" in rendered(captured.outputs, "text/plain")
    assert shell.user_ns["_agent_run"].info.confinement.startswith(
        "sandbox: OFF (unconfined); network: on; memory: 6,000 MB"
    )


@pytest.mark.parametrize(
    ("line", "body", "message"),
    [
        ("", "Task.", "no model configured"),
        ("--model m --share missing", "Task.", "no such variable"),
        ("--model m --share data", "Task.", "the agent's setup defines"),
        ("--model m --data nope.csv", "Task.", "nope.csv"),
        ("--model m", "   ", "needs a task"),
        ("--scripted-demo --protocol tools", "Task.", "tags protocol"),
        ("--model m --protocol nope", "Task.", "invalid choice: 'nope' \\(choose from 'tools', 'tags', 'deepanalyze'"),
        ("--model m --sandbox off --no-network", "Task.", "needs the sandbox"),
    ],
)
def test_usage_errors_are_short_messages(shell: InteractiveShell, line: str, body: str, message: str) -> None:
    shell.user_ns["data"] = 1
    with pytest.raises(UsageError, match=message):
        shell.run_cell_magic("agent", f"{line} -w ws -o out/run.ipynb", body)
    assert sorted(p.name for p in Path.cwd().iterdir()) == ["ipython"]  # no folder left behind


def test_a_missing_data_file_after_sharing_leaves_no_folder(shell: InteractiveShell) -> None:
    shell.user_ns["df"] = pd.DataFrame({"x": [1]})
    with pytest.raises(UsageError, match="nope.csv"):
        shell.run_cell_magic("agent", "--model m --share df --data nope.csv", "Task.")
    assert sorted(p.name for p in Path.cwd().iterdir()) == ["ipython"]


@pytest.mark.kernel
def test_magic_inside_a_kernel_renders_the_answer_and_an_image(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(
        Reply(
            "Plotting.", tool_calls=(python_call("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"),)
        )
    )
    openai_server.add(Reply("The line rises from 1 to 3."))
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext kernel_agent"),
            new_code_cell(f"%%agent --model m --base-url {openai_server.base_url} --max-rounds 3 -w ws\nPlot a line."),
            new_code_cell("print(_agent_run.answer)"),
        ]
    )

    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = nb.cells[1].outputs
    assert rendered(outputs, "image/png")
    markdown = rendered(outputs, "text/plain")
    assert "Plotting." in markdown  # the streamed reply, updated in place into its reasoning
    assert "The line rises from 1 to 3." in markdown
    assert "ws.ipynb" in rendered(outputs, "text/html")
    assert nb.cells[2].outputs[0]["text"] == "The line rises from 1 to 3.\n"
    assert (tmp_path / "ws.ipynb").is_file() and not (tmp_path / "ws" / "ws.ipynb").exists()


def test_model_flags_reach_the_agent_options() -> None:
    from IPython.core.magic_arguments import parse_argstring

    from kernel_agent.magic.cell import AgentMagics, _agent_options

    line = "--protocol deepanalyze --request-timeout 900 --data-format rich --no-vllm-extras"
    options, _ = _agent_options(parse_argstring(AgentMagics.agent, line))
    assert (options["request_timeout"], options["data_format"], options["vllm_extras"]) == (900.0, "rich", False)
    defaults, _ = _agent_options(parse_argstring(AgentMagics.agent, ""))
    assert (defaults["request_timeout"], defaults["data_format"], defaults["vllm_extras"]) == (None, None, None)


def test_key_file_and_disk_quota_flags_reach_the_agent_options(tmp_path: Path) -> None:
    from IPython.core.magic_arguments import parse_argstring

    from kernel_agent.magic.cell import AgentMagics, _agent_options

    key_file = tmp_path / "key"
    key_file.write_text("sk-magic-key-123456\n")
    options, _ = _agent_options(parse_argstring(AgentMagics.agent, f"--api-key-file {key_file} --disk-quota 64"))
    assert (options["api_key"], options["disk_quota_mb"]) == ("sk-magic-key-123456", 64)
    with pytest.raises(UsageError, match="one way"):
        _agent_options(parse_argstring(AgentMagics.agent, f"--api-key x --api-key-file {key_file}"))


@pytest.mark.kernel
def test_the_second_cell_takes_the_warm_kernel_and_unload_leaves_no_kernel(
    shell: InteractiveShell, openai_server: OpenAIServer
) -> None:
    for answer in ("first", "second"):
        openai_server.add(Reply("Set.", tool_calls=(python_call(f"value = {answer!r}\nprint(value)"),)))
        openai_server.add(Reply(f"The {answer} answer."))
    line = f"--model m --base-url {openai_server.base_url}"
    shell.run_cell_magic("agent", f"{line} -w one", "First task.")
    warm = shell.magics_manager.registry["AgentMagics"].warm
    assert (warm.pool.served_cold, warm.pool.served_warm) == (1, 0)
    warm.wait_ready()  # the spare started in the background after the first cell took its kernel
    assert warm.pool.ready == 1 and len(our_kernel_pids()) >= 1

    with capture_output() as captured:
        shell.run_cell_magic("agent", f"{line} -w two", "Second task.")

    assert (warm.pool.served_cold, warm.pool.served_warm) == (1, 1)
    assert "taking the warm kernel started ahead" in rendered(captured.outputs, "text/plain")
    run = shell.user_ns["_agent_run"]
    assert run.answer == "The second answer." and "second" in run.rounds[0].result.stdout
    shell.run_line_magic("unload_ext", "kernel_agent")
    assert our_kernel_pids() == [] and warm.pool is None
