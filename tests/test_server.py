"""The service's native API over real HTTP: a real uvicorn server, httpx as the client, the scripted
OpenAI-compatible model behind it, real sandboxed kernels per thread."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest
from openai_server import OpenAIServer, Reply, context_length_error, python_call
from service_server import ServiceServer

ALICE = {"Authorization": "Bearer alice-key"}
BOB = {"Authorization": "Bearer bob-key"}


@pytest.fixture(scope="module")
def server(model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceServer]:
    with ServiceServer(
        tmp_path_factory.mktemp("service"), model.base_url, keys={"alice-key", "bob-key"}, max_upload_mb=4096 / 2**20
    ) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: ServiceServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as http:
        yield http


def events(client: httpx.Client, run_id: str, last: int | None = None) -> list[tuple[int | None, dict[str, Any]]]:
    """Every SSE event of the run (the stream ends after ``finished``), with their ids."""
    headers = {} if last is None else {"Last-Event-ID": str(last)}
    out: list[tuple[int | None, dict[str, Any]]] = []
    with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event_id = None
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                out.append((event_id, json.loads(line[6:])))
    return out


def upload(client: httpx.Client, name: str, content: bytes) -> dict[str, Any]:
    response = client.post("/v1/files", files={"file": (name, content, "text/csv")})
    assert response.status_code == 200, response.text
    value: dict[str, Any] = response.json()
    return value


def test_info_is_open_and_everything_else_needs_a_key(server: ServiceServer) -> None:
    info = httpx.get(server.url + "/v1/info").json()
    assert info["auth"] is True and info["default_model"] == "scripted-test-model" and "tools" in info["protocols"]
    assert (
        info["max_upload_bytes"] == 4096
        and info["stop_words"]["max_rounds"] == "stopped at the maximum number of rounds"
    )
    assert httpx.get(server.url + "/v1/threads").status_code == 401
    assert httpx.get(server.url + "/v1/threads", headers={"Authorization": "Bearer wrong"}).status_code == 401
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and "<html" in page.text.lower()


@pytest.mark.kernel
def test_a_run_streams_events_and_its_notebook_report_and_files_download(
    client: httpx.Client, model: OpenAIServer
) -> None:
    uploaded = upload(client, "../../numbers.csv", b"x,y\n1,2\n3,4\n")
    assert uploaded["filename"] == "numbers.csv" and uploaded["bytes"] == 12
    code = (
        "frame = pd.read_csv(data.numbers)\ntotal = int(frame.x.sum())\nframe.to_csv('out.csv')\nprint('total', total)"
    )
    model.add(Reply("Sum it.", tool_calls=(python_call(code),)), Reply("The total is 4."))
    run = client.post("/v1/runs", json={"task": "Sum x", "file_ids": [uploaded["id"]]}).json()
    assert run["status"] == "running" and run["thread_id"]
    seen = events(client, run["id"])
    kinds = [e["event"] for _, e in seen]
    assert kinds[0] == "run_started" and kinds[-1] == "finished" and "answer" in kinds
    assert [i for i, _ in seen] == list(range(1, len(seen) + 1))
    executed = next(e for _, e in seen if e["event"] == "execution_finished")
    assert any("total 4" in o.get("text", "") for o in executed["result"]["outputs"]), executed
    record = client.get(f"/v1/runs/{run['id']}").json()
    assert record["status"] == "completed" and record["answer"] == "The total is 4." and "owner" not in record
    assert seen[-1][1]["run"]["status"] == "completed" and record["model"] == "scripted-test-model"
    assert 0 < record["elapsed_s"] == client.get(f"/v1/runs/{run['id']}").json()["elapsed_s"]  # recorded, not ticking
    assert record["files"] == [
        {"name": "out.csv", "size": record["files"][0]["size"], "url": record["files"][0]["url"]}
    ]
    assert client.get(record["files"][0]["url"]).text.startswith(",x,y")
    notebook = nbformat.reads(client.get(record["notebook_url"]).text, as_version=4)
    assert "model-secret-key" not in json.dumps(notebook)
    assert any("total 4" in json.dumps(cell.get("outputs", [])) for cell in notebook.cells)
    assert client.get(record["clean_url"]).status_code == 200
    assert "The total is 4." in client.get(record["html_url"]).text
    # a finished run replays from any point
    assert events(client, run["id"], last=len(seen) - 2) == seen[-2:]


@pytest.mark.kernel
def test_a_follow_up_runs_in_the_threads_live_kernel(client: httpx.Client, model: OpenAIServer) -> None:
    model.add(Reply("Set.", tool_calls=(python_call("import os\nkept = 20 + 1\npid = os.getpid()"),)), Reply("Set it."))
    first = client.post("/v1/runs", json={"task": "Set kept"}).json()
    events(client, first["id"])
    model.add(Reply("Use.", tool_calls=(python_call("print(kept * 2, os.getpid() == pid)"),)), Reply("42."))
    second = client.post("/v1/runs", json={"task": "Double kept", "thread_id": first["thread_id"]}).json()
    assert second["thread_id"] == first["thread_id"]
    streamed = [e for _, e in events(client, second["id"])]
    seen = [e for e in streamed if e["event"] == "execution_finished"]
    assert seen[-1]["result"]["stdout"] == "42 True\n"  # same variables, same process: not a rebuilt kernel
    started = streamed[0]  # the turn's own question, beside the thread's task so far
    assert started["question"] == "Double kept" and started["task"].startswith("Set kept")
    thread = client.get(f"/v1/threads/{first['thread_id']}").json()
    assert [r["id"] for r in thread["runs"]] == [first["id"], second["id"]]
    listed = client.get("/v1/threads").json()["threads"]
    assert listed[0]["id"] == first["thread_id"] and listed[0]["status"] == "completed"
    assert listed[0]["protocol"] == "tools"  # the protocol its agent speaks, also when the request named none


@pytest.mark.kernel
def test_cancel_interrupts_the_running_code_and_the_kernel_keeps_its_state(
    client: httpx.Client, model: OpenAIServer
) -> None:
    code = "before = 7\nopen('started', 'w').close()\nimport time\ntime.sleep(120)"
    model.add(Reply("Wait.", tool_calls=(python_call(code),)))
    run = client.post("/v1/runs", json={"task": "Wait long"}).json()
    deadline = time.monotonic() + 60
    while client.get(f"/v1/threads/{run['thread_id']}/files/started").status_code == 404:  # the code is running
        assert time.monotonic() < deadline
        time.sleep(0.05)
    cancelled = client.post(f"/v1/runs/{run['id']}/cancel").json()
    assert cancelled["status"] == "cancelled"
    assert events(client, run["id"])[-1][1]["event"] == "finished"
    model.add(Reply("Check.", tool_calls=(python_call("print(before)"),)), Reply("7."))
    follow = client.post("/v1/runs", json={"task": "What is before?", "thread_id": run["thread_id"]}).json()
    done = [e for _, e in events(client, follow["id"]) if e["event"] == "execution_finished"]
    assert done[-1]["result"]["stdout"] == "7\n"


@pytest.mark.kernel
def test_keys_see_only_their_own_files_threads_and_runs(client: httpx.Client, model: OpenAIServer) -> None:
    uploaded = upload(client, "mine.csv", b"a\n1\n")
    model.add(Reply("Done."))
    run = client.post("/v1/runs", json={"task": "Nothing"}).json()
    events(client, run["id"])
    for path in (
        f"/v1/runs/{run['id']}",
        f"/v1/threads/{run['thread_id']}",
        f"/v1/files/{uploaded['id']}",
        f"/v1/threads/{run['thread_id']}/notebook",
        f"/v1/runs/{run['id']}/events",
    ):
        assert client.get(path, headers=BOB).status_code == 404, path
    assert client.get("/v1/threads", headers=BOB).json()["threads"] == []
    refused = client.post("/v1/runs", json={"task": "x", "file_ids": [uploaded["id"]]}, headers=BOB)
    assert refused.status_code == 404


@pytest.mark.kernel  # reads the threads the runs above made
def test_bad_requests_get_clear_errors_and_change_nothing(client: httpx.Client) -> None:
    before = client.get("/v1/threads").json()["threads"]
    assert client.post("/v1/runs", json={"task": "x", "file_ids": ["file-nope"]}).status_code == 404
    assert client.post("/v1/runs", json={"task": "x", "thread_id": "thread-nope"}).status_code == 404
    assert client.post("/v1/runs", json={"task": ""}).status_code == 422
    assert client.post("/v1/runs", json={"task": "x", "protocol": "telepathy"}).status_code == 422
    assert (
        client.post("/v1/runs", content=b"{not json", headers={"Content-Type": "application/json"}).status_code == 422
    )
    too_big = client.post("/v1/files", files={"file": ("big.csv", b"x" * 5000, "text/csv")})
    assert too_big.status_code == 413
    empty = client.post("/v1/files", files={"file": ("empty.csv", b"", "text/csv")})
    assert empty.status_code == 422 and empty.json()["error"]["message"] == "the file 'empty.csv' is empty"
    assert "empty.csv" not in [f["filename"] for f in client.get("/v1/files").json()["data"]]
    assert client.get("/v1/threads").json()["threads"] == before
    assert client.get("/v1/runs/run-nope").status_code == 404
    assert client.get(f"/v1/threads/{before[0]['id']}/files/../../../etc/passwd").status_code == 404


def test_an_oversized_body_is_refused_before_it_is_read(server: ServiceServer, client: httpx.Client) -> None:
    # Declares 10 GB and sends none of it: only a check on the declared length can answer at all.
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as raw:
        raw.sendall(
            f"POST /v1/files HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nAuthorization: Bearer alice-key\r\n"
            "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 10000000000\r\n\r\n".encode()
        )
        answer = raw.makefile("rb").read().decode()  # the server closes after its answer
    assert answer.startswith("HTTP/1.1 413") and "byte limit" in answer
    # No length, chunked: cut off once it passes the limit (4096 + 1 MiB of slack), not read to the end.
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n\r\n'
        while sent < 64 << 20:
            sent += 1 << 16
            yield b"x" * (1 << 16)

    try:
        refused = client.post(
            "/v1/files", content=chunks(), headers={"Content-Type": "multipart/form-data; boundary=b"}
        )
    except httpx.TransportError:
        pass  # the 413 was sent, but closing on an unread body resets the connection before some clients read it
    else:
        assert refused.status_code == 413 and "byte limit" in refused.json()["error"]["message"]
    assert sent < 32 << 20  # the server stopped reading: the client could not send its 64 MiB
    assert not any((server.config.data_dir / "tmp").glob("*"))  # nothing spooled is left
    assert client.get("/health").status_code == 200


@pytest.mark.kernel
def test_deleting_a_thread_removes_its_kernel_workspace_and_runs(client: httpx.Client, model: OpenAIServer) -> None:
    model.add(Reply("Write.", tool_calls=(python_call("open('x.txt', 'w').write('x')"),)), Reply("Wrote."))
    run = client.post("/v1/runs", json={"task": "Write x"}).json()
    events(client, run["id"])
    thread_id = run["thread_id"]
    assert client.delete(f"/v1/threads/{thread_id}", headers=BOB).status_code == 404
    assert client.delete(f"/v1/threads/{thread_id}").json()["deleted"] is True
    for path in (f"/v1/threads/{thread_id}", f"/v1/runs/{run['id']}", f"/v1/threads/{thread_id}/files/x.txt"):
        assert client.get(path).status_code == 404, path
    assert thread_id not in [t["id"] for t in client.get("/v1/threads").json()["threads"]]


@pytest.mark.kernel
def test_a_model_failure_ends_the_run_as_failed_with_its_notebook_kept(
    client: httpx.Client, model: OpenAIServer
) -> None:
    model.add(Reply("Set.", tool_calls=(python_call("x = 1"),)), context_length_error())
    run = client.post("/v1/runs", json={"task": "Overflow"}).json()
    finished = events(client, run["id"])[-1][1]["run"]
    assert finished["stop_reason"] == "llm_error" and finished["status"] == "failed"
    record = client.get(f"/v1/runs/{run['id']}").json()
    assert record["status"] == "failed" and record["stop_reason"] == "llm_error" and record["rounds"] == 1
    assert "x = 1" in client.get(record["notebook_url"]).text


@pytest.mark.kernel  # reads the threads the runs above made
def test_no_secret_reaches_the_data_dir(client: httpx.Client, server: ServiceServer) -> None:
    """Neither the model's key nor a service key is in any record, event log or notebook on disk."""
    assert client.get("/v1/threads").json()["threads"]  # earlier tests ran
    for path in Path(server.config.data_dir).rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            assert b"model-secret-key" not in content and b"alice-key" not in content, path
