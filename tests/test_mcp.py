"""The MCP server through the official SDK client: ``kernel-agent mcp`` over stdio, real kernels.

One server subprocess (module scope) serves most tests over one connection, as
a desktop client would; the lifecycle tests start their own. Kernels are found
by their working directory (the workspace), which holds inside the sandbox too.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mcp import MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_client import HeldClient

from kernel_agent.result import png_size

pytestmark = pytest.mark.kernel

CLI = str(Path(sys.executable).with_name("kernel-agent"))
SECRET = "sk-test-secret-never-in-the-kernel"


def kernels_in(workspace: Path) -> list[int]:
    """Processes whose working directory is ``workspace`` (our kernels; the server runs elsewhere)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == workspace:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_until_gone(workspace: Path, seconds: float = 15) -> list[int]:
    """Poll for the workspace's kernels to exit (shutdown is asynchronous); return those left."""
    end = time.monotonic() + seconds
    while (left := kernels_in(workspace)) and time.monotonic() < end:
        time.sleep(0.1)
    return left


def stdio_params(workspace: Path, *extra: str) -> StdioServerParameters:
    env = {**os.environ, "OPENAI_API_KEY": SECRET}
    return StdioServerParameters(
        command=CLI, args=["mcp", "--workspace", str(workspace), *extra], env=env, cwd=str(workspace.parent)
    )


@contextmanager
def open_stdio(params: StdioServerParameters, errlog: Path) -> Iterator[HeldClient]:
    """An SDK client connected to a ``kernel-agent mcp`` subprocess; its stderr goes to ``errlog``."""
    with errlog.open("a") as log, HeldClient(lambda: stdio_client(params, errlog=log)) as client:
        yield client


def text_of(result) -> str:  # type: ignore[no-untyped-def]
    return "\n".join(block.text for block in result.content if block.type == "text")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HeldClient, Path]]:
    root = tmp_path_factory.mktemp("mcp")
    data = root / "sales.csv"
    data.write_text("region,units\nnorth,3\nsouth,5\n")
    workspace = root / "ws"
    with open_stdio(stdio_params(workspace, "--data", str(data), "--timeout", "60"), root / "server.log") as client:
        yield client, workspace
    assert wait_until_gone(workspace) == []


def run(client: HeldClient, code: str, **arguments: object):  # type: ignore[no-untyped-def]
    return client.call("execute_python", {"code": code, **arguments})


def test_tools_are_listed_with_descriptions_and_schemas(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    tools = {tool.name: tool for tool in client.submit(lambda s: s.list_tools())[0].result(60).tools}
    assert {
        "execute_python",
        "interrupt",
        "restart",
        "list_variables",
        "describe_data",
        "list_files",
        "read_file",
        "write_file",
        "export_notebook",
    } <= set(tools)
    execute = tools["execute_python"]
    assert execute.input_schema["required"] == ["code"] and "timeout" in execute.input_schema["properties"]
    assert all(tool.description for tool in tools.values())
    assert client.server_info.server_info.name == "kernel-agent"


def test_state_persists_and_data_is_preloaded(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    first = run(client, "sales = pd.read_csv(data.sales)\ntotal = int(sales['units'].sum())")
    assert first.structured_content["status"] == "ok" and not first.is_error
    second = run(client, "total * 10")
    assert "80" in text_of(second)
    assert "region" in text_of(client.call("describe_data"))


def test_figures_arrive_as_downscaled_image_content(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    result = run(
        client,
        "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(30, 15), dpi=100)\nplt.plot([1, 3, 2]); plt.show()",
    )
    images = [block for block in result.content if block.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data)[:8] == b"\x89PNG\r\n\x1a\n"
    size = png_size(images[0].data)
    assert size is not None and max(size) == 1024  # 3000x1500 scaled to fit 1024
    assert result.structured_content["figures"] == 1


def test_errors_are_results_and_output_is_bounded(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    failed = run(client, "1 / 0")
    assert failed.is_error and failed.structured_content["status"] == "error"  # the model sees it failed
    assert "ZeroDivisionError" in text_of(failed)
    refused = run(client, "1", timeout=-1)
    assert refused.is_error and "timeout" in text_of(refused)
    flood = run(client, "print('x' * 200_000)")
    body = text_of(flood)
    assert "characters omitted" in body and len(body) < 10_000


def test_a_timeout_interrupts_and_keeps_state(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    run(client, "kept = 'still here'")
    result = run(client, "while True:\n    pass", timeout=2)
    assert result.structured_content["status"] == "timeout" and not result.structured_content["state_lost"]
    assert result.is_error  # interrupted: the call did not do its job
    assert "still here" in text_of(run(client, "kept"))


def test_a_client_cancel_interrupts_the_code(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    run(client, "before_cancel = 7")
    progressed = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.append(progress)

    future, cancel = client.submit(
        lambda s: s.call_tool(
            "execute_python", {"code": "import time\nwhile True:\n    time.sleep(0.05)"}, progress_callback=on_progress
        )
    )
    end = time.monotonic() + 30
    while not progressed and time.monotonic() < end:  # a progress notification: the code is running
        time.sleep(0.05)
    assert progressed, "no progress notification while the code ran"
    cancel()
    after = run(client, "before_cancel + 1")
    # the loop was interrupted, not left running: the next call ran
    assert after.structured_content["status"] == "ok" and "8" in text_of(after), text_of(after)
    assert future.cancelled()


def test_the_interrupt_tool_stops_running_code(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    run(client, "survivor = 'kept'")
    progressed: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.append(progress)

    future, _ = client.submit(
        lambda s: s.call_tool(
            "execute_python", {"code": "import time\nwhile True:\n    time.sleep(0.05)"}, progress_callback=on_progress
        )
    )
    end = time.monotonic() + 30
    while not progressed and time.monotonic() < end:
        time.sleep(0.05)
    assert "interrupt sent" in text_of(client.call("interrupt"))
    stopped = future.result(timeout=15)
    assert stopped.structured_content["status"] == "error" and "KeyboardInterrupt" in text_of(stopped)
    assert "kept" in text_of(run(client, "survivor"))


def test_a_dead_kernel_is_reported_and_the_next_call_works(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    died = run(client, "import os\nos._exit(1)")
    assert died.structured_content["status"] == "died" and died.structured_content["state_lost"] and died.is_error
    assert "3" in text_of(run(client, "1 + 2"))
    assert "sales.csv" in text_of(run(client, "data.sales"))  # the setup (data preload) ran again


def test_variables_restart_and_secrets(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    run(
        client,
        "frame = pd.read_csv(data.sales)\ngrid = np.zeros((3, 4))\nleak = "
        "__import__('os').environ.get('OPENAI_API_KEY')",
    )
    listed = client.call("list_variables")
    rows = {row["name"]: row for row in listed.structured_content["variables"]}
    assert rows["grid"]["type"] == "ndarray" and rows["grid"]["shape"] == "(3, 4)"
    assert rows["frame"]["type"] == "DataFrame" and rows["frame"]["shape"] == "(2, 2)"
    assert SECRET not in text_of(run(client, "print(leak)"))
    restarted = client.call("restart")
    assert "all variables were lost" in text_of(restarted)
    assert "NameError" in text_of(run(client, "grid"))


def test_files_upload_list_read_and_confinement(served: tuple[HeldClient, Path]) -> None:
    client, workspace = served
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    assert "notes/a.txt" in text_of(client.call("write_file", {"path": "notes/a.txt", "content": "hello"}))
    client.call("write_file", {"path": "dot.png", "content": png, "encoding": "base64"})
    listing = text_of(client.call("list_files"))
    assert "notes/a.txt" in listing and "sales.csv" in listing and ".ipynb" not in listing  # the record is beside
    assert "hello" in text_of(run(client, "open('notes/a.txt').read()"))
    image = client.call("read_file", {"path": "dot.png"})
    assert image.content[0].type == "image" and image.content[0].data == png
    outside = client.call("read_file", {"path": "../server.log"})
    assert outside.is_error and "outside the workspace" in text_of(outside)
    refused = client.call("write_file", {"path": "/etc/evil", "content": "x"})
    assert refused.is_error and not Path("/etc/evil").exists()
    assert (workspace / "notes" / "a.txt").read_text() == "hello"


def test_the_exported_notebook_replays(served: tuple[HeldClient, Path]) -> None:
    client, workspace = served
    run(client, "squares = [n * n for n in range(5)]\nprint(squares)")
    path = Path(text_of(client.call("export_notebook", {"path": "export/session.ipynb"})))
    assert path == workspace / "export" / "session.ipynb" and path.exists()
    assert workspace.with_name("ws.ipynb").exists()  # the live record, written as it goes, beside the workspace
    # It claims '..' as its workspace, which replay never follows by itself: the user names the folder.
    refused = subprocess.run(
        [CLI, "replay", str(path), "--timeout", "60"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=workspace,
    )
    assert refused.returncode == 2 and "pass --workspace" in refused.stderr
    replay = subprocess.run(
        [CLI, "replay", str(path), "--check", "--timeout", "60", "--workspace", str(workspace)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=workspace,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr


def test_disconnect_leaves_no_kernel_and_keeps_the_notebook(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with open_stdio(stdio_params(workspace), tmp_path / "server.log") as client:
        assert "ok" in text_of(run(client, "value = 1"))
        assert kernels_in(workspace)
    assert wait_until_gone(workspace) == []
    notebook = (tmp_path / "ws.ipynb").read_text()
    assert "value = 1" in notebook and "The MCP session ended after 1 code execution" in notebook


def wait_for_a_kernel(workspace: Path, seconds: float = 60) -> list[int]:
    """Poll until a kernel works in ``workspace``; return them (empty when none came)."""
    end = time.monotonic() + seconds
    while not (found := kernels_in(workspace)) and time.monotonic() < end:
        time.sleep(0.05)
    return found


def test_the_stdio_kernel_starts_before_the_first_call_and_serves_it(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with open_stdio(stdio_params(workspace), tmp_path / "server.log") as client:
        assert wait_for_a_kernel(workspace)  # started after initialize, with no call made
        # Its preload imported pandas; a kernel started for the call would not have (no data files).
        assert "ok" in text_of(run(client, "import sys; started_ahead = 'pandas' in sys.modules"))
        assert "True" in text_of(run(client, "print(started_ahead)"))
    assert wait_until_gone(workspace) == []
    assert "started_ahead" in (tmp_path / "ws.ipynb").read_text()


def test_a_kernel_started_ahead_and_never_used_is_shut_down(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with open_stdio(stdio_params(workspace), tmp_path / "server.log"):
        assert wait_for_a_kernel(workspace)
    assert wait_until_gone(workspace) == []


def test_a_client_that_stops_the_server_while_its_kernel_starts_finds_nothing_left(tmp_path: Path) -> None:
    """The SDK's client closes stdin, waits 2 s, sends SIGTERM and SIGKILLs 2 s later. The kernel started
    ahead may still be starting then (on a loaded machine it can take longer; this one never answers):
    the SIGTERM kills it at once, so the server removes its runtime dir before the SIGKILL, which would
    leave it behind (the first loaded run of issue 36 found one)."""
    spec = tmp_path / "jupyter" / "kernels" / "never-ready"
    spec.mkdir(parents=True)
    kernel = {"argv": ["sh", "-c", "sleep 120", "{connection_file}"], "display_name": "x", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))  # short: a kernel's ipc sockets live under it
    params = stdio_params(tmp_path / "ws", "--kernel", "never-ready")
    params.env = {**(params.env or {}), "TMPDIR": str(runtime), "JUPYTER_PATH": str(tmp_path / "jupyter")}
    try:
        with open_stdio(params, tmp_path / "server.log"):
            deadline = time.monotonic() + 60
            while not list(runtime.glob("kernel-agent-*")):  # the kernel's start is under way
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.05)  # polling another process's progress
        assert list(runtime.iterdir()) == []
        assert "1 kernel(s) killed at once" in (tmp_path / "server.log").read_text()
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_sandbox_flags_reach_the_kernel(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    with open_stdio(stdio_params(workspace, "--no-network", "--memory", "3000"), tmp_path / "server.log") as client:
        probe = (
            "import os, resource, socket\n"
            "print('interfaces', sorted(name for _, name in socket.if_nameindex()))\n"
            "print('uid', os.getuid(), 'as', resource.getrlimit(resource.RLIMIT_AS)[0] // 2**20)"
        )
        text = text_of(run(client, probe))
        assert "interfaces ['lo']" in text  # a network namespace of its own: only its own loopback
        assert "uid 1000 as 3000" in text
    assert wait_until_gone(workspace) == []


def test_the_notebook_and_workspace_files_are_resources(served: tuple[HeldClient, Path]) -> None:
    client, _ = served
    run(
        client,
        "import os, matplotlib.pyplot as plt\nos.makedirs('plots', exist_ok=True)\n"
        "plt.plot([2, 1]); plt.savefig('plots/line.png'); plt.close()",
    )
    templates = client.submit(lambda s: s.list_resource_templates())[0].result(60).resource_templates
    assert {t.uri_template for t in templates} == {"kernel-agent://notebook/{view}", "kernel-agent://files/{+path}"}
    notebook = client.submit(lambda s: s.read_resource("kernel-agent://notebook/full"))[0].result(60)
    assert "plots/line.png" in notebook.contents[0].text and '"nbformat": 4' in notebook.contents[0].text
    figure = client.submit(lambda s: s.read_resource("kernel-agent://files/plots/line.png"))[0].result(60)
    assert base64.b64decode(figure.contents[0].blob)[:4] == b"\x89PNG"
    with pytest.raises(MCPError) as refused:
        client.submit(lambda s: s.read_resource("kernel-agent://files/../server.log"))[0].result(60)
    assert "Unknown resource" in str(refused.value)  # the SDK's own path check
    run(client, "os.symlink('/etc/hostname', 'escape')")
    with pytest.raises(MCPError, match="leads through a link"):  # ours: the door follows no link
        client.submit(lambda s: s.read_resource("kernel-agent://files/escape"))[0].result(60)


def test_progress_messages_carry_the_output_while_the_code_runs(tmp_path: Path) -> None:
    # Its own server: the cell waits for a marker file, which would stall a replay of the shared notebook.
    workspace = tmp_path / "ws"
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        if "early output" in (message or ""):
            (workspace / "progress-seen").touch()  # lets the cell go on: the output arrived while it ran

    code = (
        "import pathlib, time\nprint('x' * 50_000)\nprint('early output', flush=True)\n"
        "deadline = time.monotonic() + 60\n"
        "while not pathlib.Path('progress-seen').exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print('late output' if pathlib.Path('progress-seen').exists() else 'no marker came')"
    )
    with open_stdio(stdio_params(workspace), tmp_path / "server.log") as client:
        result = client.call("execute_python", {"code": code}, progress_callback=on_progress)
    body = text_of(result)
    assert "late output" in body and "no marker came" not in body
    early = next(message for message in messages if "early output" in message)
    assert early.startswith("running for ") and "late output" not in early
    assert len(early) < 2200 and "…" in early  # the tail of 50 kB, bounded, the cut shown
    assert wait_until_gone(workspace) == []
