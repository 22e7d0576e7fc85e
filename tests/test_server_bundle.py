"""A thread's notebook with its data files, as one zip: it replays on a clean folder elsewhere, takes only
plain names and regular files reached without a link, and is bounded; a generated file is served as a
passive type or as bytes, never as HTML or SVG. A real service (uvicorn, sandboxed kernels, the scripted
model); the replay is the real ``kernel-agent replay --check`` in a folder the service never saw. And what a
demo server's run says first when it was given a question or files of the user's own."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer

from kernel_agent.demo import demo_task
from kernel_agent.errors import ServiceError
from kernel_agent.server.bundle import write_bundle
from kernel_agent.server.service import demo_notice

AUTH = {"Authorization": "Bearer bundle-key"}


@pytest.fixture(scope="module")
def server(model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceServer]:
    with ServiceServer(tmp_path_factory.mktemp("bundle-service"), model.base_url, keys={"bundle-key"}) as running:
        yield running


@pytest.fixture(scope="module")
def client(server: ServiceServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as http:
        yield http


def finish(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """Start a run and read its events to the end; return its record."""
    run = client.post("/v1/runs", json=body).raise_for_status().json()
    with client.stream("GET", f"/v1/runs/{run['id']}/events") as events:
        for _ in events.iter_lines():
            pass
    record: dict[str, Any] = client.get(f"/v1/runs/{run['id']}").raise_for_status().json()
    assert record["status"] == "completed", record
    return record


def upload(client: httpx.Client, name: str, content: bytes) -> str:
    return str(client.post("/v1/files", files={"file": (name, content, "text/csv")}).raise_for_status().json()["id"])


@pytest.mark.kernel
def test_the_zip_replays_on_a_clean_folder(
    client: httpx.Client, server: ServiceServer, model: OpenAIServer, tmp_path: Path
) -> None:
    prices = upload(client, "prices.csv", b"item,price\na,3\nb,4\n")
    model.add(
        Reply(
            "Reading.",
            tool_calls=(
                python_call(
                    "import os\nframe = pd.read_csv('prices.csv')\nprint('sum', frame.price.sum())\n"
                    "open('page.html', 'w').write('<script>window.PWNED = 1</script>')\n"
                    "os.symlink('/etc/passwd', 'passwd.csv')"
                ),
            ),
        ),
        Reply("The sum is 7."),
        Reply("Adding.", tool_calls=(python_call("extra = pd.read_csv('more.csv')\nprint('rows', len(extra))"),)),
        Reply("It has 2 rows."),
    )
    first = finish(client, {"task": "Sum the prices.", "file_ids": [prices]})
    thread = first["thread_id"]
    more = upload(client, "more.csv", b"n\n1\n2\n")
    finish(client, {"task": "How many rows in more.csv?", "thread_id": thread, "file_ids": [more]})
    assert first["zip_url"] == f"/v1/threads/{thread}/notebook/zip"

    response = client.get(f"/v1/threads/{thread}/notebook/zip").raise_for_status()
    assert response.headers["content-type"] == "application/zip"
    assert response.headers["content-disposition"] == f'attachment; filename="{thread}.zip"'
    assert response.headers["x-content-type-options"] == "nosniff"
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    names = sorted(archive.namelist())
    assert names == sorted(
        f"{thread}/{name}"
        for name in ("README.txt", f"{thread}.ipynb", f"{thread}.clean.ipynb", "prices.csv", "more.csv")
    )  # the data the notebook reads; nothing the kernel wrote (page.html, the passwd.csv link)
    assert all(info.external_attr >> 16 == 0o100644 for info in archive.infolist())  # regular files only
    assert archive.read(f"{thread}/prices.csv") == b"item,price\na,3\nb,4\n"
    assert f"kernel-agent replay {thread}/{thread}.ipynb --check" in archive.read(f"{thread}/README.txt").decode()

    clean = tmp_path / "elsewhere"
    archive.extractall(clean)
    replay = subprocess.run(
        [str(Path(sys.executable).with_name("kernel-agent")), "replay", f"{thread}/{thread}.ipynb", "--check"],
        cwd=clean,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "match" in replay.stdout

    # A generated file is served as bytes when a browser would render it, as its own type when passive.
    page = client.get(f"/v1/threads/{thread}/files/page.html")
    assert page.headers["content-type"] == "application/octet-stream"
    assert page.headers["content-disposition"] == 'attachment; filename="page.html"'
    assert client.get(f"/v1/threads/{thread}/files/passwd.csv").status_code == 404  # a link is never followed
    report = client.get(f"/v1/threads/{thread}/notebook/html").raise_for_status()
    assert report.headers["content-disposition"] == f'inline; filename="{thread}.html"'  # shown, named for saving


@pytest.mark.kernel
def test_the_zip_takes_plain_names_only_and_is_bounded(
    client: httpx.Client, server: ServiceServer, model: OpenAIServer, tmp_path: Path
) -> None:
    model.add(Reply("Done at once."))
    thread_id = finish(client, {"task": "Say done."})["thread_id"]
    app: Any = server.server.config.app  # the FastAPI app uvicorn serves (its config types it as any ASGI app)
    store = app.state.service.store  # the service's own store, as its routes see it
    folder = store.thread_dir(thread_id)
    workspace = store.workspace(thread_id)
    secret = tmp_path / "secret.csv"
    secret.write_text("HOST SECRET\n")
    (workspace / "ok.csv").write_text("a\n1\n")
    (workspace / "link.csv").symlink_to(secret)
    notebook = json.loads((folder / "analysis.ipynb").read_text())
    claims = ["ok.csv", "link.csv", "../secret.csv", str(secret), ".hidden", "sub/ok.csv"]
    notebook["metadata"]["kernel_agent"]["data_files"] = claims
    (folder / "analysis.ipynb").write_text(json.dumps(notebook))
    thread = store.thread(thread_id)

    target = io.BytesIO()
    made = write_bundle(store, thread, target)
    assert [entry.split("/", 1)[1] for entry in made.entries if not entry.endswith(("ipynb", "README.txt"))] == [
        "ok.csv"
    ]
    assert made.missing == ("link.csv",)  # named plainly, but a link: left out, and the README says so
    archive = zipfile.ZipFile(target)
    assert b"HOST SECRET" not in b"".join(archive.read(name) for name in archive.namelist())
    assert "Not included (no longer on the server): link.csv" in archive.read(f"{thread_id}/README.txt").decode()

    with pytest.raises(ServiceError, match="over the 100-byte bundle limit") as refused:
        write_bundle(store, thread, io.BytesIO(), limit=100)
    assert refused.value.status == 413
    missing = client.get("/v1/threads/thread-none/notebook/zip")
    assert missing.status_code == 404


def test_a_demo_run_says_what_it_ignores_and_only_then() -> None:
    assert demo_notice(demo_task(), ["sales.csv"]) is None  # the demo's own run
    mine = demo_notice("What is in my file?", ["sales.csv", "mine.csv", "more.csv"])
    assert mine is not None and mine.startswith(
        "Demo server: this run ignores your question and your files mine.csv, more.csv."
    )
    assert "scripted for the bundled sales.csv" in mine and "expect it to fail" not in mine
    alone = demo_notice(demo_task(), ["mine.csv"])
    assert alone is not None and "ignores your file mine.csv" in alone and "your question" not in alone
    assert alone.endswith("The scripted code reads sales.csv, which this run was not given, so expect it to fail.")
