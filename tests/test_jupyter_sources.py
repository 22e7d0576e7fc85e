"""The chat persona's live sources: the Jupyter server's operator configures them
(``--KernelAgentPersona.sources``), a chat run queries them with ``sql()`` in the conversation's sandboxed kernel
through a broker of its own, and the notebook's own kernel is refused them. A real JupyterLab with Jupyter AI's
persona manager and jupyter-collaboration, a real PostgreSQL (a role whose password only ``PGPASSFILE`` holds),
the scripted model over HTTP."""

from __future__ import annotations

import asyncio
import json

import nbformat
import pytest
from jupyterlab import JupyterLab, start_jupyterlab, stop_jupyterlab
from leaks import source_connections
from openai_server import OpenAIServer, Reply, python_call
from pgshop import QUERIED, QUERY, Shop, open_connections
from test_jupyter_persona import WAIT_S, joined_chat, replies, send
from ydoc_client import until

from kernel_agent.agent.datafiles.data import sql_setup
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.result import ExecutionResult

pytestmark = [pytest.mark.kernel, pytest.mark.postgresql, pytest.mark.timeout(400)]


def test_a_chat_run_queries_the_operators_source_and_the_notebooks_kernel_is_refused_it(
    shop: Shop, openai_server: OpenAIServer
) -> None:
    model = {"OPENAI_BASE_URL": openai_server.base_url, "OPENAI_API_KEY": "sk-test", "KERNEL_AGENT_MODEL": "m"}
    source = f"--KernelAgentPersona.sources=shop={shop.url}"
    openai_server.add(Reply("Querying the shop.", tool_calls=(python_call(QUERY),)), Reply("40 orders worth 1230."))
    lab, base = start_jupyterlab(model, (source,), collaborative=True)
    try:
        (lab.root / "shop.chat").write_text("{}")

        async def scenario() -> str:
            async with joined_chat(lab, "shop.chat") as chat:
                send(chat, "@KernelAgent how many orders has each customer in the shop database?")
                answer = await until(lambda: [b for b in replies(chat) if "### Answer" in b], WAIT_S, "the answer")
                return json.dumps(chat.all()) + str(answer[0])

        chat = asyncio.run(scenario())
        assert QUERIED in chat  # sql() in the conversation's sandboxed kernel
        first = openai_server.requests[0]["messages"][-1]["content"]
        assert "customers" in first and "customer_id" in first  # the source described to the model
        record = nbformat.read(lab.root / ".shop-agent.ipynb", as_version=4)
        assert record.metadata["kernel_agent"]["sources"] == [{"name": "shop", "kind": "postgresql"}]
        log = (base / "jupyterlab.log").read_bytes()
        written = [(lab.root / "shop.ipynb").read_bytes(), (lab.root / ".shop-agent.ipynb").read_bytes(), log]
    finally:
        stop_jupyterlab(lab, base)
    assert open_connections(shop) == 0  # the conversation's sources closed as the server shut down
    secret = shop.password
    assert secret not in chat and not any(secret.encode() in blob for blob in written)
    assert secret not in json.dumps(openai_server.requests)

    attached, base = start_jupyterlab(model, (source, "--KernelAgentPersona.kernel=notebook"), collaborative=True)
    try:
        (attached.root / "mine.chat").write_text("{}")

        async def refused() -> str:
            async with joined_chat(attached, "mine.chat") as chat:
                send(chat, "@KernelAgent count the orders")
                said = await until(lambda: [b for b in replies(chat) if "Cannot start" in b], WAIT_S, "the refusal")
                return str(said[0])

        said = asyncio.run(refused())
        assert "notebook's kernel" in said and "sandbox" in said
    finally:
        stop_jupyterlab(attached, base)
    assert open_connections(shop) == 0


async def run_all(lab: JupyterLab, kernel_id: str, cells: list[str]) -> list[ExecutionResult]:
    """Run ``cells`` in order in the kernel JupyterLab started for a notebook (its Run All); each one's result."""
    session = await AsyncKernelSession.connect(lab.connection_file(kernel_id))
    try:
        return [await session.execute(cell, 60) for cell in cells]
    finally:
        await session.close()  # attached: the kernel goes on


def printed(result: ExecutionResult) -> str:
    return "".join(str(o.get("text", "")) for o in result.outputs if o.get("output_type") == "stream")


def test_run_all_in_a_notebooks_own_kernel_queries_the_operators_source_through_the_servers_broker(
    shop: Shop,
) -> None:
    cells = [sql_setup([], ["shop"]), QUERY]  # a recorded run's setup cell (it defines sql), then its query
    gone = "postgresql://nobody@/gone?host=/nonexistent"  # a source down at server start
    lab, base = start_jupyterlab(
        None, (f"--KernelAgentPersona.sources=shop={shop.url}", f"--KernelAgentPersona.sources=gone={gone}")
    )
    try:
        (lab.root / "shop.ipynb").write_text(json.dumps(nbformat.v4.new_notebook()))
        asked = 'sql("SELECT 1", source="gone")'
        setup, query, down = asyncio.run(run_all(lab, lab.open_kernel("shop.ipynb"), [*cells, asked]))
        assert setup.ok and query.ok, query
        assert QUERIED in printed(query)
        assert not down.ok and "'gone'" in str(down.error)
        log = (base / "jupyterlab.log").read_bytes()
    finally:
        stop_jupyterlab(lab, base)
    assert source_connections() == []  # the server's broker and source closed as it stopped
    assert shop.password.encode() not in log
    assert b"'gone'" in log and gone.encode() not in log  # logged by name, never its URI

    bare, base = start_jupyterlab()
    try:
        (bare.root / "shop.ipynb").write_text(json.dumps(nbformat.v4.new_notebook()))
        setup, query = asyncio.run(run_all(bare, bare.open_kernel("shop.ipynb"), cells))
        assert setup.ok and not query.ok
        assert "'shop'" in str(query.error) and "no query broker" in str(query.error)
    finally:
        stop_jupyterlab(bare, base)
