"""The KernelAgent persona in a real JupyterLab with Jupyter AI's persona manager and jupyter-collaboration,
driven server-side through the shared documents a browser tab would edit (``ydoc_client.py``).

One JupyterLab for the module, its model the scripted server over HTTP (``OPENAI_BASE_URL``); the chat
is jupyterlab-chat's ``YChat``, the notebook jupyter-ydoc's ``YNotebook``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import nbformat
import pytest
from jupyterlab import JupyterLab, saved_cells, start_jupyterlab, stop_jupyterlab
from openai_server import OpenAIServer, Reply, python_call
from test_planted_modules import PLANTED, USING, execute, planting_code, printed
from ydoc_client import notebook_cells, shared_document, until

from kernel_agent.jupyter.store import STORE_FILE

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(300)]

PERSONA = "jupyter-ai-personas::kernel_agent::KernelAgentPersona"
SECRET = "sk-test-persona-secret-0123456789"
WAIT_S = 150.0  # JupyterLab, the persona manager and a sandboxed kernel starting on a loaded 2-core machine


@pytest.fixture(scope="module")
def lab(model: OpenAIServer) -> Iterator[JupyterLab]:
    server, base = start_jupyterlab(
        {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": SECRET, "KERNEL_AGENT_MODEL": "scripted-m"},
        collaborative=True,
    )
    try:
        (server.root / "sales.csv").write_text("month,revenue\n1,10\n2,20\n3,30\n")
        yield server
    finally:
        stop_jupyterlab(server, base)


@asynccontextmanager
async def joined_chat(lab: JupyterLab, path: str) -> AsyncIterator[Any]:
    """The chat at ``path`` as a browser tab has it, once the persona has joined it."""
    async with shared_document(lab.port, lab.token, path, "chat") as chat:
        await until(lambda: chat.ready_for(PERSONA), WAIT_S, "the persona to join the chat")
        yield chat


def send(chat: Any, body: str) -> None:
    """What the chat input does: a message from the user, addressed to the persona picked."""
    chat.send("tester", body, {"to_persona": PERSONA})


def replies(chat: Any) -> list[str]:
    return [m["body"] for m in chat.all() if m["sender"] == PERSONA]


def cancel(lab: JupyterLab, chat_id: str) -> list[str]:
    """The chat's stop button: the persona manager's cancel endpoint."""
    response = httpx.post(
        f"http://127.0.0.1:{lab.port}/api/ai/personas/cancel",
        params={"chat_id": chat_id},
        headers={"Authorization": f"token {lab.token}"},
        timeout=60,
    )
    response.raise_for_status()
    value: list[str] = response.json()["cancelled"]
    return value


def test_a_message_runs_the_agent_rounds_become_cells_and_the_saved_notebook_equals_the_document(
    lab: JupyterLab, model: OpenAIServer
) -> None:
    plot = (
        "import matplotlib.pyplot as plt\nsales = pd.read_csv('sales.csv')\ntotal = int(sales.revenue.sum())\n"
        "print('total', total)\nplt.plot(sales.month, sales.revenue)\nplt.show()"
    )
    model.add(Reply("**Summing** the revenue.", tool_calls=(python_call(plot),)))
    model.add(Reply("## Answer\n\nRevenue totals **60**."))
    (lab.root / "analysis.chat").write_text("{}")

    async def scenario() -> None:
        async with joined_chat(lab, "analysis.chat") as chat:
            send(chat, "@KernelAgent what is the total revenue in sales.csv?")
            answer = await until(lambda: [b for b in replies(chat) if "### Answer" in b], WAIT_S, "the answer")
            body = answer[0]
            assert "Revenue totals **60**." in body and "**Round 1** · ✓ ok" in body and "total 60" in body
            assert "`analysis.ipynb`" in body
            assert SECRET not in json.dumps(chat.all()) and model.base_url.split("//")[1].split("/")[0] not in body
            async with shared_document(lab.port, lab.token, "analysis.ipynb", "notebook") as notebook:
                record = lab.root / ".analysis-agent.ipynb"

                def synced() -> list[dict[str, Any]]:
                    # the answer shows in the chat a moment before the finished run is written and synced
                    exported = nbformat.read(record, as_version=4).cells
                    cells = notebook_cells(notebook)
                    same = [(c["id"], c["source"]) for c in cells] == [(c["id"], c["source"]) for c in exported]
                    return cells if same and "## Answer" in cells[-1]["source"] else []

                cells = await until(synced, 30, "the document to hold the run's cells")  # and no blank cell of its own
                code = next(c for c in cells if c["id"] == "round-1-code")
                assert code["execution_count"] and any("image/png" in o.get("data", {}) for o in code["outputs"])
                assert cells[-1]["metadata"]["kernel_agent"]["role"] == "answer" and "60" in cells[-1]["source"]

                def saved_equals_document() -> bool:
                    on_disk = saved_cells(lab.root / "analysis.ipynb")
                    return on_disk is not None and [_comparable(c) for c in on_disk] == [
                        _comparable(c) for c in notebook_cells(notebook)
                    ]

                await until(saved_equals_document, 30, "the saved notebook to equal the document")
                saved = (lab.root / "analysis.ipynb").read_text()
                assert SECRET not in saved
                # the endpoint is never written into the user's notebook (nor the chat, above)
                assert model.base_url.split("//")[1].split("/")[0] not in saved

    asyncio.run(scenario())
    assert SECRET not in (lab.root.parent / "jupyterlab.log").read_text()


def test_stop_from_the_chat_keeps_the_round_and_a_follow_up_reads_an_earlier_variable(
    lab: JupyterLab, model: OpenAIServer
) -> None:
    model.add(Reply("Counting.", tool_calls=(python_call("n = 41\nprint('n is', n)"),)))
    model.add(Reply("## Answer\n\nn is 41."))
    model.add(
        Reply("Waiting.", tool_calls=(python_call("import time\nprint('waiting', flush=True)\ntime.sleep(120)"),))
    )
    model.add(Reply("Adding.", tool_calls=(python_call("print('n + 1 =', n + 1)"),)))
    model.add(Reply("## Answer\n\nn + 1 is 42."))
    (lab.root / "follow.chat").write_text("{}")

    async def scenario() -> None:
        async with joined_chat(lab, "follow.chat") as chat:
            send(chat, "@KernelAgent set n")
            await until(lambda: [b for b in replies(chat) if "n is 41." in b], WAIT_S, "the first answer")
            send(chat, "@KernelAgent wait")
            await until(
                lambda: [b for b in replies(chat) if "waiting" in b and "running" in b], WAIT_S, "the long round to run"
            )
            async with shared_document(lab.port, lab.token, "follow.ipynb", "notebook") as live:
                running = await until(
                    lambda: [
                        c
                        for c in notebook_cells(live)
                        if c["id"] == "round-3-code" and "waiting" in json.dumps(c["outputs"])
                    ],
                    30,
                    "the running cell",
                )
                assert running[0]["source"].startswith("import time")  # shown while it runs, not yet guarded
            assert await asyncio.to_thread(cancel, lab, chat.get_id()) == [PERSONA]
            stopped = await until(lambda: [b for b in replies(chat) if "**Stopped.**" in b], 30, "the stop")
            assert "✗ stopped" in stopped[0]
            send(chat, "@KernelAgent and n + 1?")
            await until(lambda: [b for b in replies(chat) if "n + 1 is 42." in b], WAIT_S, "the follow-up answer")
            assert "n + 1 = 42" in [b for b in replies(chat) if "n + 1 is 42." in b][0]
            async with shared_document(lab.port, lab.token, "follow.ipynb", "notebook") as notebook:
                cells = await until(
                    lambda: (
                        [c for c in notebook_cells(notebook) if "n + 1 is 42" in c["source"]]
                        and notebook_cells(notebook)
                    ),
                    30,
                    "the follow-up's cells",
                )
                guarded = [c for c in cells if c["cell_type"] == "code" and "time.sleep(120)" in c["source"]]
                assert len(guarded) == 1 and guarded[0]["source"].startswith("# kernel-agent: not run on Run All")
                assert guarded[0]["metadata"]["tags"] == ["skip-execution"]
                assert any("waiting" in "".join(o.get("text", "")) for o in guarded[0]["outputs"])

    asyncio.run(scenario())


def test_jupyterlabs_stop_button_on_the_notebook_stops_the_run_with_the_round_kept(
    lab: JupyterLab, model: OpenAIServer
) -> None:
    model.add(
        Reply("Waiting.", tool_calls=(python_call("import time\nprint('waiting', flush=True)\ntime.sleep(120)"),))
    )
    (lab.root / "halt.chat").write_text("{}")
    lab.notebook("halt.ipynb", ["x = 1"])
    kernel_id = lab.open_kernel("halt.ipynb")  # the notebook is open in JupyterLab, with its own kernel

    async def scenario() -> None:
        async with joined_chat(lab, "halt.chat") as chat:
            send(chat, "@KernelAgent wait")
            await until(
                lambda: [b for b in replies(chat) if "waiting" in b and "running" in b], WAIT_S, "the long round to run"
            )
            await asyncio.to_thread(lab.interrupt, kernel_id)  # Kernel > Interrupt on halt.ipynb
            stopped = await until(lambda: [b for b in replies(chat) if "**Stopped.**" in b], 60, "the stop")
            assert "✗ stopped" in stopped[0]
            async with shared_document(lab.port, lab.token, "halt.ipynb", "notebook") as notebook:
                guarded = await until(
                    lambda: [
                        c
                        for c in notebook_cells(notebook)
                        if c["id"] == "round-1-code" and c["source"].startswith("# kernel-agent: not run on Run All")
                    ],
                    30,
                    "the stopped round, kept and commented out",
                )
                assert any("waiting" in "".join(o.get("text", "")) for o in guarded[0]["outputs"])

    asyncio.run(scenario())
    assert lab.api(f"kernels/{kernel_id}")["execution_state"] != "dead"  # the notebook's kernel is left running


def test_an_attached_file_is_a_data_file_and_an_attachment_outside_the_root_is_not(
    lab: JupyterLab, model: OpenAIServer
) -> None:
    (lab.root / "inputs").mkdir()
    (lab.root / "inputs" / "costs.csv").write_text("item,cost\na,3\nb,4\n")
    outside = lab.root.parent / "outside.csv"
    outside.write_text("secret,1\n")
    model.add(
        Reply(
            "Reading the attachment.",
            tool_calls=(
                python_call(
                    "import os\ncosts = pd.read_csv(data.costs)\nprint('total cost', int(costs.cost.sum()))\n"
                    "print('files', sorted(f for f in os.listdir('.') if f.endswith('.csv')))"
                ),
            ),
        )
    )
    model.add(Reply("## Answer\n\nThe costs total **7**."))
    (lab.root / "attach.chat").write_text("{}")

    async def scenario() -> None:
        async with joined_chat(lab, "attach.chat") as chat:
            chat.send(
                "tester",
                "@KernelAgent what do the attached costs total?",
                {"to_persona": PERSONA},
                attachments=("inputs/costs.csv", str(outside), "../outside.csv"),
            )
            answer = await until(lambda: [b for b in replies(chat) if "### Answer" in b], WAIT_S, "the answer")
            assert "total cost 7" in answer[0] and "files ['costs.csv']" in answer[0]

    asyncio.run(scenario())
    header = nbformat.read(lab.root / ".attach-agent.ipynb", as_version=4).cells[0].source
    assert "costs.csv" in header and "outside" not in header


def test_scripted_demo_needs_no_model_and_says_so() -> None:
    """The README's way to try the chat: `jupyter lab --KernelAgentPersona.scripted_demo=True`, no model
    anywhere, the bundled sales data when the message names none."""
    no_model = {"KERNEL_AGENT_MODEL": "", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}  # nothing is asked there
    demo, base = start_jupyterlab(no_model, ("--KernelAgentPersona.scripted_demo=True",), collaborative=True)
    try:
        (demo.root / "try.chat").write_text("{}")

        async def scenario() -> None:
            async with joined_chat(demo, "try.chat") as chat:
                send(chat, "@KernelAgent what drives revenue?")
                answer = await until(lambda: [b for b in replies(chat) if "### Answer" in b], WAIT_S, "the answer")
                assert "(scripted replies)" in answer[0] and "**Round 1** · ✓ ok" in answer[0]

        asyncio.run(scenario())
        record = nbformat.read(demo.root / ".try-agent.ipynb", as_version=4)
        assert record.metadata["kernel_agent"]["scripted"] is True
        assert "`sales.csv`" in record.cells[0].source and "scripted" in record.cells[0].source
        assert (demo.root / "try-agent" / "sales.csv").is_file()  # the bundled data, copied in
    finally:
        stop_jupyterlab(demo, base)


def test_modules_the_run_planted_never_run_when_the_personas_notebook_is_run_in_a_stock_kernel(
    lab: JupyterLab, model: OpenAIServer
) -> None:
    """Issue 41: the notebook the persona wrote into (the user's), saved by JupyterLab, run as Run All runs it
    (nbclient, the stock python3 kernel JupyterLab starts, in the notebook's folder; not through the browser)."""
    marker = lab.root.parent / "planted-code-ran"
    model.add(Reply("Planting.", tool_calls=(python_call(planting_code(marker)),)))
    model.add(Reply("Using.", tool_calls=(python_call(USING),)))
    model.add(Reply("## Answer\n\nPlanted."))
    (lab.root / "planted.chat").write_text("{}")

    async def scenario() -> None:
        async with joined_chat(lab, "planted.chat") as chat:
            send(chat, "@KernelAgent plant the modules")
            await until(lambda: [b for b in replies(chat) if "Planted." in b], WAIT_S, "the answer")
            async with shared_document(lab.port, lab.token, "planted.ipynb", "notebook"):

                def saved() -> bool:
                    cells = saved_cells(notebook)
                    return bool(cells) and "Planted." in "".join(cells[-1]["source"])  # type: ignore[index]

                await until(saved, 30, "the notebook saved with the answer")

    notebook = lab.root / "planted.ipynb"
    asyncio.run(scenario())
    assert all((lab.root / "planted-agent" / name).is_file() for name in PLANTED)
    nb = execute(notebook)
    assert "6 scipy seaborn True" in printed(nb) and not marker.exists()


def _comparable(cell: dict[str, Any]) -> dict[str, Any]:
    """A cell as saved and as shared: the source joined (the file may split it in lines)."""
    out = dict(cell)
    out["source"] = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    out.pop("execution_state", None)
    for output in out.get("outputs", []):
        if isinstance(output.get("text"), list):
            output["text"] = "".join(output["text"])
        for mime, value in output.get("data", {}).items():
            if isinstance(value, list):
                output["data"][mime] = "".join(value)
    return out


def test_the_collaboration_store_and_its_journal_stay_out_of_the_root(lab: JupyterLab) -> None:
    """The shipped server configuration (``kernel_agent/jupyter/store.py``): a shared document's updates go to
    Jupyter's data dir, never beside the notebooks, where a listing once met the store's passing journal."""
    lab.notebook("store.ipynb", ["1 + 1"])

    async def scenario() -> None:
        async with shared_document(lab.port, lab.token, "store.ipynb", "notebook") as nb:
            nb.ycells[0]["source"] += "  # edited"  # an update the store records

    asyncio.run(scenario())
    assert sorted(path.name for path in lab.root.rglob(".*ystore*")) == []
    assert (lab.data_dir / STORE_FILE).is_file()
