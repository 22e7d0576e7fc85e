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
from jupyterlab import start_jupyterlab, stop_jupyterlab
from openai_server import OpenAIServer, Reply, python_call
from pgshop import QUERIED, QUERY, Shop, open_connections
from test_jupyter_persona import WAIT_S, joined_chat, replies, send
from ydoc_client import until

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
