"""The KernelAgent persona with ``c.KernelAgentPersona.kernel = "notebook"``: the agent's code runs in the open
notebook's own kernel (the one JupyterLab started for it), so it sees the user's variables; JupyterLab's stop
button on that kernel stops the run. A real JupyterLab, the chat and notebook driven as in
``test_jupyter_persona.py``; the model is the scripted server over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from jupyterlab import JupyterLab, start_jupyterlab, stop_jupyterlab
from openai_server import OpenAIServer, Reply, python_call
from test_jupyter_persona import WAIT_S, joined_chat, replies, send
from ydoc_client import notebook_cells, shared_document, until

from kernel_agent.kernel.session import AsyncKernelSession

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def lab(model: OpenAIServer) -> Iterator[JupyterLab]:
    server, base = start_jupyterlab(
        {
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "sk-notebook-kernel-0000",
            "KERNEL_AGENT_MODEL": "scripted-m",
        },
        ("--KernelAgentPersona.kernel=notebook",),
        collaborative=True,
    )
    try:
        (server.root / "sales.csv").write_text("month,revenue\n1,10\n2,20\n3,30\n")
        yield server
    finally:
        stop_jupyterlab(server, base)


async def in_kernel(lab: JupyterLab, kernel_id: str, code: str) -> str:
    """Run ``code`` in the notebook's kernel as its user does; what it printed."""
    session = await AsyncKernelSession.connect(lab.connection_file(kernel_id))
    try:
        result = await session.execute(code, 60)
    finally:
        await session.close()  # attached: the kernel goes on
    assert result.ok, result
    return "".join(o.get("text", "") for o in result.outputs if o.get("output_type") == "stream")


def test_the_agent_runs_in_the_notebooks_own_kernel_sees_its_variables_and_the_stop_button_stops_it(
    lab: JupyterLab, model: OpenAIServer
) -> None:
    model.add(
        Reply(
            "Reading your variable.",
            tool_calls=(
                python_call(
                    "revenue = pd.read_csv(data.sales).revenue.sum()\nprint('mine is', my_threshold, 'and revenue', "
                    "revenue)"
                ),
            ),
        )
    )
    model.add(Reply("## Answer\n\nYour threshold is **17**."))
    model.add(
        Reply("Waiting.", tool_calls=(python_call("import time\nprint('waiting', flush=True)\ntime.sleep(120)"),))
    )
    (lab.root / "own.chat").write_text("{}")
    lab.notebook("own.ipynb", ["my_threshold = 17"])
    kernel_id = lab.open_kernel("own.ipynb")

    async def scenario() -> None:
        await in_kernel(lab, kernel_id, "my_threshold = 17")  # the user ran their cell
        async with joined_chat(lab, "own.chat") as chat:
            send(chat, "@KernelAgent what is my_threshold, with sales.csv?")
            answer = await until(lambda: [b for b in replies(chat) if "### Answer" in b], WAIT_S, "the answer")
            assert "mine is 17 and revenue 60" in answer[0]
            assert "unconfined in your notebook's own kernel" in answer[0]
            # the agent's variables are the user's now: the notebook's kernel has them
            assert "60" in await in_kernel(lab, kernel_id, "print(revenue)")

            send(chat, "@KernelAgent wait")
            await until(
                lambda: [b for b in replies(chat) if "waiting" in b and "running" in b], WAIT_S, "the long round to run"
            )
            await asyncio.to_thread(lab.interrupt, kernel_id)  # JupyterLab's stop button, on the agent's kernel
            stopped = await until(lambda: [b for b in replies(chat) if "**Stopped.**" in b], 60, "the stop")
            assert "✗ stopped" in stopped[0]
            async with shared_document(lab.port, lab.token, "own.ipynb", "notebook") as notebook:
                await until(
                    lambda: [
                        c
                        for c in notebook_cells(notebook)
                        if "time.sleep(120)" in c["source"]
                        and c["source"].startswith("# kernel-agent: not run on Run All")
                    ],
                    30,
                    "the stopped round, kept and commented out",
                )
                assert notebook_cells(notebook)[0]["source"] == "my_threshold = 17"  # the user's cell stays first

    asyncio.run(scenario())
    assert lab.api(f"kernels/{kernel_id}")["execution_state"] != "dead"  # attached, never shut down
    assert "sk-notebook-kernel" not in json.dumps(lab.api("sessions"))


def test_without_a_running_kernel_for_the_notebook_the_chat_says_to_open_it(
    lab: JupyterLab, model: OpenAIServer
) -> None:
    model.add(Reply("Trying.", tool_calls=(python_call("print(1)"),)))
    (lab.root / "closed.chat").write_text("{}")

    async def scenario() -> None:
        async with joined_chat(lab, "closed.chat") as chat:
            send(chat, "@KernelAgent print one")
            failed = await until(
                lambda: [b for b in replies(chat) if "**The run failed:**" in b], WAIT_S, "the refusal"
            )
            assert "`closed.ipynb` has no running kernel here: open it in JupyterLab" in failed[0]

    asyncio.run(scenario())
