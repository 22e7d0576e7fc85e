"""Attacks on the host through the files a live kernel can write, as model code would make them: links
planted where the host will read or write, and a folder swapped for a link while the host looks
(renameat2 RENAME_EXCHANGE in a kernel thread). Each test asserts on the host's effect: the target file
unchanged, the secret never returned. Real service, real MCP server, real sandboxed kernels."""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_client import HeldClient
from openai_server import OpenAIServer, Reply, python_call
from service_server import ServiceServer
from test_mcp import open_stdio, run, stdio_params, text_of

pytestmark = pytest.mark.kernel

KEY = {"Authorization": "Bearer boundary-key"}

# Kernel code: a daemon thread that swaps ``sub`` (a real folder holding data.txt) and ``evil`` (a link to
# the host's folder) with RENAME_EXCHANGE for ``seconds``, as fast as it can.
SWAPPER = """
import ctypes, os, threading, time
os.makedirs('sub', exist_ok=True)
open('sub/data.txt', 'w').write('inside\\n')
if os.path.lexists('evil'):
    os.remove('evil')
os.symlink({host!r}, 'evil')
_libc = ctypes.CDLL(None, use_errno=True)
stop = threading.Event()  # set by a later cell: the swaps go on until the host has raced them enough
def _swap(until=time.monotonic() + {seconds}):
    global swaps
    while time.monotonic() < until and not stop.is_set():
        _libc.renameat2(-100, b'sub', -100, b'evil', 2)
        swaps += 1
swaps = 0
swapper = threading.Thread(target=_swap, daemon=True)
swapper.start()
"""


@pytest.fixture
def host_secret(tmp_path: Path) -> tuple[Path, str]:
    """A folder on the host (outside every workspace) with a secret the kernel cannot see itself."""
    folder = tmp_path / "host"
    folder.mkdir()
    secret = f"HOST-SECRET-{secrets.token_hex(8)}"
    for name in ("data.txt", "secret.txt", "target.txt"):
        (folder / name).write_text(secret + "\n")
    (folder / "target.txt").chmod(0o600)
    return folder, secret


@pytest.fixture(scope="module")
def service(
    model: OpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceServer, httpx.Client]]:
    with (
        ServiceServer(tmp_path_factory.mktemp("service"), model.base_url, keys={"boundary-key"}) as server,
        httpx.Client(base_url=server.url, headers=KEY, timeout=120) as client,
    ):
        yield server, client


def finished(client: httpx.Client, run_id: str) -> dict[str, Any]:
    with client.stream("GET", f"/v1/runs/{run_id}/events") as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["event"] == "finished", events[-3:]
    value: dict[Any, Any] = client.get(f"/v1/runs/{run_id}").json()
    return value


def changing(client: httpx.Client, run_id: str, model: OpenAIServer) -> dict[str, Any]:
    """A run whose code left a thread changing the workspace, once finished: it ends with the model's answer, or
    after that round when the changes kept the round's listing of the workspace from being whole (the run stops
    with ``disk_quota`` and says so rather than count what it could not see); then the reply it did not ask for
    is dropped, so the next run of the module's shared model gets its own."""
    record = finished(client, run_id)
    assert record["stop_reason"] in ("answer", "disk_quota"), record
    assert model.discard() == (record["stop_reason"] == "disk_quota")
    return record


def test_an_upload_never_writes_through_links_the_kernel_planted(
    service: tuple[ServiceServer, httpx.Client], model: OpenAIServer, host_secret: tuple[Path, str]
) -> None:
    server, client = service
    folder, secret = host_secret
    target = folder / "target.txt"
    uploaded = client.post("/v1/files", files={"file": ("sales.csv", b"a,b\n1,2\n", "text/csv")}).json()
    plant = (
        f"import os\nos.symlink({str(target)!r}, '.sales.csv.kernel-agent-partial')\n"
        f"os.remove('sales.csv')\nos.symlink({str(target)!r}, 'sales.csv')\nprint('planted')"
    )
    model.add(Reply("Plant.", tool_calls=(python_call(plant),)), Reply("Planted."))
    first = client.post("/v1/runs", json={"task": "Plant links", "file_ids": [uploaded["id"]]}).json()
    assert finished(client, first["id"])["status"] == "completed"
    model.add(Reply("Read.", tool_calls=(python_call("print(open('sales.csv').read())"),)), Reply("Read it."))
    second = client.post(
        "/v1/runs", json={"task": "Again", "thread_id": first["thread_id"], "file_ids": [uploaded["id"]]}
    ).json()
    assert finished(client, second["id"])["status"] == "completed"
    assert target.read_text() == secret + "\n" and target.stat().st_mode & 0o777 == 0o600
    workspace = server.config.data_dir / "threads" / first["thread_id"] / "workspace"
    assert not (workspace / "sales.csv").is_symlink() and (workspace / "sales.csv").read_bytes() == b"a,b\n1,2\n"


def test_downloads_never_serve_what_a_link_points_at(
    service: tuple[ServiceServer, httpx.Client], model: OpenAIServer, host_secret: tuple[Path, str]
) -> None:
    _, client = service
    folder, secret = host_secret
    # A link as a generated file, and a thread that keeps swapping the notebook for a link to the secret
    # after the run's last save (the kernel lives on between turns).
    code = (
        f"import os, threading, time\nos.symlink({str(folder / 'secret.txt')!r}, 'leak.txt')\n"
        "def _plant(until=time.monotonic() + 8):\n"
        "    while time.monotonic() < until:\n"
        f"        os.symlink({str(folder / 'secret.txt')!r}, '.planted')\n"
        "        os.replace('.planted', 'analysis.ipynb')\n"
        "        os.symlink(" + repr(str(folder / "secret.txt")) + ", '.planted')\n"
        "        os.replace('.planted', 'analysis.clean.ipynb')\n"
        "threading.Thread(target=_plant, daemon=True).start()\nprint('planting')"
    )
    model.add(Reply("Plant.", tool_calls=(python_call(code),)), Reply("Planted."))
    run_ = client.post("/v1/runs", json={"task": "Plant a notebook link"}).json()
    record = changing(client, run_["id"], model)
    assert "leak.txt" not in [f["name"] for f in record["files"]]  # a link is not an artifact
    thread = run_["thread_id"]
    # The thread's notebooks are records beside the workspace, never in it: what the kernel plants there under
    # their names changes nothing they serve; the link it made is no file of the run's.
    expected = {
        f"/v1/threads/{thread}/notebook": 200,
        f"/v1/threads/{thread}/notebook/clean": 200,
        f"/v1/threads/{thread}/files/leak.txt": 404,
        f"/v1/threads/{thread}/notebook/html": 200,
    }
    for _ in range(150):
        for path, status in expected.items():
            response = client.get(path)
            assert secret not in response.text, path
            assert response.status_code == status, (path, response.status_code)
    assert client.get(f"/v1/threads/{thread}/files/leak.txt").status_code == 404


def test_the_files_api_never_follows_a_folder_swapped_for_a_link(
    service: tuple[ServiceServer, httpx.Client], model: OpenAIServer, host_secret: tuple[Path, str]
) -> None:
    _, client = service
    folder, secret = host_secret
    model.add(Reply("Swap.", tool_calls=(python_call(SWAPPER.format(host=str(folder), seconds=300)),)), Reply("On."))
    run_ = client.post("/v1/runs", json={"task": "Swap folders"}).json()
    changing(client, run_["id"], model)
    outcomes = set()
    for _ in range(300):  # while the kernel swaps (until told to stop, not for a time a loaded machine may pass)
        response = client.get(f"/v1/threads/{run_['thread_id']}/files/sub/data.txt")
        assert secret not in response.text
        outcomes.add(response.status_code)
    model.add(Reply("Stop.", tool_calls=(python_call("stop.set()\nswapper.join()\nprint(swaps)"),)), Reply("Off."))
    stopped = client.post("/v1/runs", json={"task": "Stop swapping", "thread_id": run_["thread_id"]}).json()
    finished(client, stopped["id"])
    assert outcomes <= {200, 404} and 200 in outcomes  # the swap raced the reads: sometimes the folder was there
    assert (folder / "data.txt").read_text() == secret + "\n"


@pytest.fixture
def mcp_client(tmp_path: Path) -> Iterator[HeldClient]:
    workspace = tmp_path / "ws"
    with open_stdio(stdio_params(workspace, "--timeout", "60"), tmp_path / "server.log") as client:
        yield client


def test_mcp_file_tools_never_follow_a_folder_swapped_for_a_link(
    mcp_client: HeldClient, host_secret: tuple[Path, str]
) -> None:
    folder, secret = host_secret
    started = run(mcp_client, SWAPPER.format(host=str(folder), seconds=300))
    assert started.structured_content["status"] == "ok", text_of(started)
    read = written = 0
    for n in range(300):
        result = mcp_client.call("read_file", {"path": "sub/data.txt"})
        assert secret not in text_of(result)
        read += "inside" in text_of(result)
        if n % 3 == 0:
            result = mcp_client.call("write_file", {"path": "sub/data.txt", "content": "inside\n"})
            written += not result.is_error
    for _ in range(50):
        try:
            contents = mcp_client.submit(lambda s: s.read_resource("kernel-agent://files/sub/data.txt"))[0].result(60)
        except Exception as exc:  # the SDK raises the server's "not found" as an error: a refusal is fine
            assert secret not in str(exc)
            continue
        assert all(secret not in getattr(c, "text", "") for c in contents.contents)
    assert read > 0 and written > 0  # the swap raced the calls: some found the real folder
    assert (folder / "data.txt").read_text() == secret + "\n"
    assert sorted(p.name for p in folder.iterdir()) == ["data.txt", "secret.txt", "target.txt"]
    swaps = run(mcp_client, "stop.set()\nswapper.join()\nswaps")  # stopped once raced, not after a time
    assert int(text_of(swaps).strip().split()[-1].strip("'")) > 100, text_of(swaps)


def test_a_pooled_kernels_link_is_not_copied_back_as_a_file(tmp_path: Path, host_secret: tuple[Path, str]) -> None:
    import asyncio

    from kernel_agent.kernel.pool import KernelPool

    folder, secret = host_secret

    async def main() -> list[str]:
        async with KernelPool(size=1) as pool, pool.acquire(tmp_path / "run") as session:
            before = await session.files.snapshot()
            await session.execute(
                f"import os\nos.symlink({str(folder / 'secret.txt')!r}, 'leak.txt')\nopen('real.txt', 'w').write('ok')"
            )
            artifacts = await session.files.changes(before)
            return [a.path for a in artifacts]

    assert asyncio.run(main()) == ["real.txt"]
    assert not (tmp_path / "run" / "leak.txt").exists() and (tmp_path / "run" / "real.txt").read_text() == "ok"
    assert all(secret not in p.read_text() for p in (tmp_path / "run").rglob("*") if p.is_file())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
