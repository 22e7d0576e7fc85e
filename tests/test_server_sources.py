"""The service's live sources: the operator's ``--source NAME=URI``, a thread naming them, its kernel querying
them through a broker of its own, across follow-ups, closed with the thread. A real PostgreSQL (a role whose
password only ``PGPASSFILE`` holds), a real uvicorn service hit by httpx, the scripted model over HTTP, real
sandboxed kernels."""

from __future__ import annotations

import io
import json
import logging
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai_server import OpenAIServer, Reply, python_call
from pgshop import QUERIED, QUERY, Shop, open_connections
from service_server import ServiceServer

pytestmark = [pytest.mark.kernel, pytest.mark.postgresql]

ALICE = {"Authorization": "Bearer alice-key"}


def _run(client: httpx.Client, **body: Any) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """Start a run, follow its event stream to ``finished``: its record, its events, the stream's text."""
    response = client.post("/v1/runs", json=body)
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()
    with client.stream("GET", f"/v1/runs/{run['id']}/events") as stream:
        text = "".join(stream.iter_text())
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["event"] == "finished", events[-1]
    return run, events, text


def test_a_thread_queries_the_operators_source_across_follow_ups_and_leaves_no_connection(
    shop: Shop, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    data = tmp_path / "service"
    secret = shop.password.encode()
    seen: list[bytes] = []
    with (
        OpenAIServer() as model,
        # A warm pool too: a thread with sources must not take a pooled kernel (started without the socket).
        ServiceServer(data, model.base_url, keys={"alice-key"}, sources=(f"shop={shop.url}",), pool=1) as server,
        httpx.Client(base_url=server.url, headers=ALICE, timeout=120) as client,
    ):
        info = httpx.get(server.url + "/v1/info")
        assert info.json()["sources"] == [{"name": "shop", "kind": "postgresql"}]  # its name and kind, never where
        seen.append(info.content)

        refused = client.post("/v1/runs", json={"task": "t", "sources": ["warehouse"]})
        assert refused.status_code == 422 and "'warehouse'" in refused.text and "shop" in refused.text
        compat = client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "t"}], "sources": ["warehouse"]},
        )
        assert compat.status_code == 422 and "'warehouse'" in compat.text  # the compatible endpoint takes it too
        assert client.get("/v1/threads").json()["threads"] == []  # nothing was made

        model.add(Reply("Query.", tool_calls=(python_call(QUERY),)), Reply("40 orders worth 1230."))
        run, events, text = _run(client, task="Orders by customer", sources=["shop"])
        seen.append(text.encode())
        assert events[-1]["run"]["stop_reason"] == "answer"
        assert QUERIED in text  # sql() in the thread's sandboxed kernel
        first = model.requests[0]["messages"][-1]["content"]
        for word in ("shop", "customers", "orders", "customer_id", 'sql("SELECT'):
            assert word in first, word
        thread_id = run["thread_id"]

        # A follow-up in the same thread queries again, through the same thread's broker.
        model.add(
            Reply("Again.", tool_calls=(python_call('print("again", len(sql("SELECT * FROM orders")))'),)),
            Reply("Still 40."),
        )
        _, _, again = _run(client, task="Still there?", thread_id=thread_id)
        seen.append(again.encode())
        assert "again 40" in again
        changed = client.post("/v1/runs", json={"task": "t", "thread_id": thread_id, "sources": []})
        assert changed.status_code == 422 and "cannot change" in changed.text

        thread = client.get(f"/v1/threads/{thread_id}")
        assert thread.json()["sources"] == ["shop"]
        notebook = client.get(f"/v1/threads/{thread_id}/notebook")
        assert json.loads(notebook.content)["metadata"]["kernel_agent"]["sources"] == [
            {"name": "shop", "kind": "postgresql"}
        ]
        bundle = client.get(f"/v1/threads/{thread_id}/notebook/zip").content
        with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
            seen += [archive.read(name) for name in archive.namelist()]
        for url in ("/", f"/v1/threads/{thread_id}/notebook/html", f"/v1/runs/{run['id']}"):
            seen.append(client.get(url).content)
        seen += [thread.content, notebook.content]

        # Deleting the thread closes its sources: no connection of the role is left.
        assert open_connections(shop) > 0  # the thread's broker holds its connections while its kernel lives
        assert client.delete(f"/v1/threads/{thread_id}").status_code == 200
        assert open_connections(shop) == 0

        # Another thread's sources live until the server shuts down.
        model.add(
            Reply("Count.", tool_calls=(python_call('print("customers", len(sql("SELECT * FROM customers")))'),)),
            Reply("5."),
        )
        _, _, other = _run(client, task="Customers?", sources=["shop"])
        assert "customers 5" in other
        seen.append(other.encode())
    assert open_connections(shop) == 0
    assert not list(Path(tempfile.gettempdir()).glob("kernel-agent-sql-*"))

    # The password is nowhere: no response, event, page, bundle, request to the model, log line or stored file.
    for blob in seen:
        assert secret not in blob
    assert secret not in json.dumps(model.requests).encode()
    assert shop.password not in caplog.text
    for path in data.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert secret not in path.read_bytes(), path


def test_one_threads_slow_query_holds_no_other_thread_and_a_cancel_leaves_no_query_running(
    shop: Shop, tmp_path: Path
) -> None:
    slow = 'print("slow start", flush=True)\nsql("SELECT pg_sleep(60)")'
    with (
        OpenAIServer() as model,
        ServiceServer(
            tmp_path / "service", model.base_url, keys={"alice-key"}, sources=(f"shop={shop.url}",)
        ) as server,
        httpx.Client(base_url=server.url, headers=ALICE, timeout=120) as client,
    ):
        model.add(Reply("Wait.", tool_calls=(python_call(slow),)))
        started = client.post("/v1/runs", json={"task": "Sleep in the database", "sources": ["shop"]})
        assert started.status_code == 201, started.text
        waiting = started.json()
        with client.stream("GET", f"/v1/runs/{waiting['id']}/events") as stream:
            for line in stream.iter_lines():
                if "slow start" in line:  # its query is on its way to the database
                    break
        model.add(
            Reply("Count.", tool_calls=(python_call('print("customers", len(sql("SELECT * FROM customers")))'),)),
            Reply("5."),
        )
        _, _, other = _run(client, task="Customers?", sources=["shop"])
        assert "customers 5" in other
        assert client.get(f"/v1/runs/{waiting['id']}").json()["status"] == "running"  # still in its query
        assert client.post(f"/v1/runs/{waiting['id']}/cancel").json()["status"] == "cancelled"
        for thread in client.get("/v1/threads").json()["threads"]:
            assert client.delete(f"/v1/threads/{thread['id']}").status_code == 200
        assert open_connections(shop) == 0  # the sleeping query's backend too: stopped, not left running


def test_an_evicted_threads_sources_close_with_its_kernel_and_its_follow_up_reconnects_by_name(
    shop: Shop, tmp_path: Path
) -> None:
    count = 'print("orders", len(sql("SELECT * FROM orders")))'
    with (
        OpenAIServer() as model,
        ServiceServer(
            tmp_path / "s", model.base_url, keys={"alice-key"}, sources=(f"shop={shop.url}",), max_live_kernels=1
        ) as server,
        httpx.Client(base_url=server.url, headers=ALICE, timeout=120) as client,
    ):
        for _ in range(3):
            model.add(Reply("Count.", tool_calls=(python_call(count),)), Reply("40."))
        first, _, text = _run(client, task="Orders?", sources=["shop"])
        assert "orders 40" in text
        _, _, text = _run(client, task="Orders again?", sources=["shop"])  # the only kernel place: the first goes
        assert "orders 40" in text
        assert client.get(f"/v1/threads/{first['thread_id']}").json()["kernel"] == "stopped"
        # Its follow-up rebuilds the kernel from the notebook and opens the thread's source again, by its name.
        _, events, text = _run(client, task="And now?", thread_id=first["thread_id"])
        assert events[-1]["run"]["stop_reason"] == "answer"
        ran = [event for event in events if event["event"] == "execution_finished"]
        assert ran and "orders 40" in json.dumps(ran[-1])  # the follow-up's own round queried
        for thread in client.get("/v1/threads").json()["threads"]:
            assert client.delete(f"/v1/threads/{thread['id']}").status_code == 200
        assert open_connections(shop) == 0
