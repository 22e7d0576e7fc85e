"""Kernels on a real Jupyter Kernel Gateway and a real Enterprise Gateway, held to the same behaviour as local
kernels. Enterprise Gateway runs its default local process proxy on loopback (tests/enterprise_gateway.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
from click.testing import CliRunner
from enterprise_gateway import EnterpriseGateway
from gateway import KernelGateway
from openai_server import OpenAIServer, Reply, python_call
from ports import closed_port

from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError, KernelStartError
from kernel_agent.kernel.outputs import OutputCaps
from kernel_agent.kernel.providers.gateway.channels import GatewayChannels, parse_frame
from kernel_agent.kernel.providers.gateway.provider import GatewayProvider
from kernel_agent.kernel.providers.gateway.settings import GatewaySettings
from kernel_agent.kernel.sandbox.environment import gateway_environment
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.kernel.session_sync import KernelSession
from kernel_agent.records import Artifact
from kernel_agent.result import ExecutionResult

pytestmark = pytest.mark.kernel


def gateway_provider(session: AsyncKernelSession) -> GatewayProvider:
    provider = session.provider
    assert isinstance(provider, GatewayProvider), provider
    return provider


def channels_of(session: AsyncKernelSession) -> GatewayChannels:
    """The session's websocket channels (opened with the kernel)."""
    channels = gateway_provider(session).client
    assert channels is not None
    return channels


@pytest.fixture(scope="module")
def gateway(kernel_gateway_server: KernelGateway) -> Iterator[KernelGateway]:
    """The run's Kernel Gateway; what this module's tests left on it fails the module."""
    yield kernel_gateway_server
    kernel_gateway_server.assert_clean()


@pytest.fixture(autouse=True)
def _nothing_left_on_the_gateway(kernel_gateway_server: KernelGateway) -> Iterator[None]:
    """A kernel a test leaves on the run's gateway fails that test, not the module's last one (nor a later
    module's test that counts the gateway's kernels, as it did once under load without naming who left it)."""
    yield
    kernel_gateway_server.assert_clean()


@pytest.fixture(scope="module")
def enterprise() -> Iterator[EnterpriseGateway]:
    with EnterpriseGateway() as running:
        yield running


def _running(request: pytest.FixtureRequest, which: str, monkeypatch: pytest.MonkeyPatch) -> KernelGateway:
    """The module's gateway of that kind; for Enterprise Gateway, the user it authorizes, set as its users set it."""
    running = request.getfixturevalue(which)
    if isinstance(running, EnterpriseGateway):
        monkeypatch.setenv("KERNEL_USERNAME", running.username)
    value: KernelGateway = running
    return value


@pytest.fixture(params=["gateway", "enterprise"])
def remote(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> KernelGateway:
    """A Jupyter Kernel Gateway or an Enterprise Gateway (started only when a test asks for it)."""
    return _running(request, request.param, monkeypatch)


@pytest.fixture(params=["local", "gateway", "enterprise"])
def where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Session options for a local kernel or one on either gateway."""
    if request.param == "local":
        return {}
    running = _running(request, request.param, monkeypatch)
    return {"gateway": running.url, "gateway_token": running.token}


def test_state_images_input_and_errors_behave_alike(tmp_path: Path, where: dict[str, object]) -> None:
    with KernelSession(tmp_path, **where) as session:
        assert session.execute("kept = 21").status == "ok"
        assert session.execute("kept * 2").result_text == "42"
        figure = session.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);")
        assert figure.status == "ok" and len(figure.images) == 1
        asked = session.execute("input('name? ')", timeout=20)
        assert asked.status == "error" and asked.error is not None
        failed = session.execute("1/0")
        assert failed.error is not None and failed.error.ename == "ZeroDivisionError"
        assert "\x1b[" not in failed.to_llm_text()


def test_output_cap_applies(tmp_path: Path, where: dict[str, object]) -> None:
    with KernelSession(tmp_path, caps=OutputCaps(max_output_bytes=20_000), **where) as session:
        result = session.execute("print('x' * 50_000)")
        assert result.status == "ok" and result.dropped_chars > 20_000


def test_timeout_interrupts_and_keeps_state(tmp_path: Path, where: dict[str, object]) -> None:
    with KernelSession(tmp_path, **where) as session:
        session.execute("survivor = 'yes'")
        result = session.execute("while True: pass", timeout=1.5)
        assert result.status == "timeout" and not result.state_lost
        assert session.execute("survivor").result_text == "'yes'"


def test_death_is_reported_and_the_kernel_is_rebuilt(tmp_path: Path, where: dict[str, object]) -> None:
    with KernelSession(tmp_path, rebuild=True, **where) as session:
        session.execute("base = 5")
        result = session.execute("import os\nos._exit(1)", timeout=30)
        assert result.status == "died" and result.state_lost
        assert "size bound" not in result.to_llm_text()  # a kernel going away is no oversized message
        assert session.execute("base + 1").result_text == "6"  # rebuilt from the successful cells


# Model code writing to its kernel's iopub socket directly, past the kernel's own output cap: read whole,
# one such message could take the host's memory (900 MB of host RSS for a 300 MB one, before the bound).
RAW_FLOOD = """
k = get_ipython().kernel
k.session.send(k.iopub_socket, "stream", {"name": "stdout", "text": "x" * 40_000_000}, parent=k.get_parent("shell"))
kept = 7
"""


def test_a_message_over_the_bound_is_dropped_unread_and_the_kernel_goes_on(
    tmp_path: Path, where: dict[str, object]
) -> None:
    with KernelSession(tmp_path, caps=OutputCaps(max_output_bytes=1_000_000), **where) as session:
        result = session.execute(RAW_FLOOD, timeout=60)
        assert result.status == "ok", result.to_llm_text()
        text = result.to_llm_text()
        assert "x" * 1000 not in text
        if "IOPub data rate exceeded" not in text:  # Kernel Gateway's own rate limit may stop it first
            assert "over the size bound was dropped unread" in text
            assert session.async_session.provider.dropped_messages >= 1
        assert session.execute("kept * 6").result_text == "42"  # the same kernel, its state kept
        assert session.execute("print('small')").outputs[0]["text"] == "small\n"


def test_restart_waits_until_the_kernel_answers(tmp_path: Path, where: dict[str, object]) -> None:
    with KernelSession(tmp_path, **where) as session:
        session.execute("gone_after = 1")
        session.restart()
        after = session.execute("'gone_after' in dir()")
        assert after.status == "ok" and after.result_text == "False"


def test_files_go_in_and_artifacts_come_back(tmp_path: Path, remote: KernelGateway) -> None:
    (tmp_path / "data.csv").write_text("a,b\n1,2\n3,4\n")

    async def run() -> tuple[ExecutionResult, tuple[Artifact, ...]]:
        async with AsyncKernelSession(tmp_path, gateway=remote.url, gateway_token=remote.token) as session:
            await session.files.put([tmp_path / "data.csv"])
            before = await session.files.snapshot()
            result = await session.execute(
                "import pandas as pd\ndf = pd.read_csv('data.csv')\ndf.a.sum(), __import__('os').getcwd()"
            )
            (tmp_path / "data.csv").unlink()  # what comes back must come from the kernel's side
            await session.execute(
                "df.to_csv('out.csv', index=False)\nopen('big.bin', 'wb').write(bytes(range(256)) * 40000)"
            )
            artifacts = await session.files.changes(before)
            return result, artifacts

    result, artifacts = asyncio.run(run())
    assert result.status == "ok" and str(tmp_path) not in (result.result_text or "")  # the kernel's own folder
    assert sorted(a.path for a in artifacts) == ["big.bin", "out.csv"]
    assert (tmp_path / "out.csv").read_text() == "a,b\n1,2\n3,4\n"
    assert (tmp_path / "big.bin").read_bytes() == bytes(range(256)) * 40000


def test_close_deletes_the_remote_kernel_and_attach_never_kills(tmp_path: Path, remote: KernelGateway) -> None:
    with KernelSession(tmp_path, gateway=remote.url, gateway_token=remote.token) as owner:
        kernel_id = gateway_provider(owner._async).kernel_id
        assert kernel_id in remote.kernels()
        with KernelSession(
            tmp_path, gateway=remote.url, gateway_token=remote.token, gateway_kernel_id=kernel_id
        ) as guest:
            assert guest.execute("40 + 2").result_text == "42"
        assert kernel_id in remote.kernels()  # the attached session left it running
    assert kernel_id not in remote.kernels()


def test_a_dropped_websocket_reconnects_without_losing_the_execution(tmp_path: Path, remote: KernelGateway) -> None:
    async def run() -> tuple[ExecutionResult, ExecutionResult, int]:
        async with AsyncKernelSession(tmp_path, gateway=remote.url, gateway_token=remote.token) as session:
            channels = channels_of(session)
            first_line = asyncio.Event()
            dispatch = channels._dispatch

            def watch(frame: str | bytes) -> None:
                dispatch(frame)
                if '"0\\n"' in str(frame):
                    first_line.set()

            with mock.patch.object(channels, "_dispatch", watch):
                task = asyncio.ensure_future(
                    session.execute("import time\nfor i in range(3):\n    print(i); time.sleep(0.4)")
                )
                await asyncio.wait_for(first_line.wait(), 30)  # cut the wire mid-execution, after the first line
                channels.drop()
                result = await task
            after = await session.execute("1 + 1")
            return result, after, channels.reconnects

    result, after, reconnects = asyncio.run(run())
    assert reconnects == 1
    assert result.status == "ok" and result.stdout == "0\n1\n2\n"  # nothing lost, nothing twice
    assert after.result_text == "2"


def test_secrets_are_not_sent_to_the_gateway_kernel(
    tmp_path: Path, remote: KernelGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-travel")
    monkeypatch.setenv("KERNEL_AGENT_GATEWAY_TOKEN", remote.token)
    monkeypatch.setenv("KERNEL_AGENT_GATEWAY_URL", remote.url)
    monkeypatch.setenv("KERNEL_FROM_SHELL", "forwarded")  # the gateway convention: KERNEL_* names travel
    env = {"KERNEL_VISIBLE": "1", "KERNEL_API_TOKEN": "nope"}
    settings = GatewaySettings.resolve()
    assert settings is not None and settings.token == remote.token and remote.token not in repr(settings)
    with KernelSession(tmp_path, gateway=settings, env=env) as session:
        seen = session.execute("import os\nsorted(os.environ.items())").result_text
    assert seen is not None
    assert "KERNEL_VISIBLE" in seen and "('KERNEL_FROM_SHELL', 'forwarded')" in seen
    for secret in ("sk-should-not-travel", remote.token, "KERNEL_API_TOKEN", "KERNEL_AGENT_"):
        assert secret not in seen


def test_a_wrong_token_or_a_down_gateway_is_a_clear_start_error(tmp_path: Path, remote: KernelGateway) -> None:
    with pytest.raises(KernelStartError, match="refused.*token") as refused:
        KernelSession(tmp_path, gateway=remote.url, gateway_token="wrong").start()
    assert remote.url in str(refused.value) and "wrong" not in str(refused.value)
    with closed_port() as port, pytest.raises(KernelStartError, match="cannot reach") as unreachable:
        down = f"http://127.0.0.1:{port}"
        KernelSession(tmp_path, gateway=down, gateway_token="t").start()
    assert down in str(unreachable.value)
    with pytest.raises(ConfigError):
        GatewaySettings("ftp://example.org")


def test_enterprise_gateway_refusing_the_user_is_said_as_it_said_it(
    tmp_path: Path, enterprise: EnterpriseGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_USERNAME", "mallory")
    with pytest.raises(
        KernelStartError, match="did not start a kernel: 403 User 'mallory' .*KERNEL_USERNAME"
    ) as refused:
        KernelSession(tmp_path, gateway=enterprise.url, gateway_token=enterprise.token).start()
    assert enterprise.url in str(refused.value) and "token" not in str(refused.value)
    assert enterprise.kernels() == []


def test_tcp_nodelay_is_set_on_our_socket(tmp_path: Path, gateway: KernelGateway) -> None:
    import socket

    async def run() -> int:
        async with AsyncKernelSession(tmp_path, gateway=gateway.url, gateway_token=gateway.token) as session:
            websocket = channels_of(session)._ws
            assert websocket is not None
            sock = websocket.transport.get_extra_info("socket")
            value: int = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            return value

    assert asyncio.run(run()) != 0


def test_the_start_request_carries_our_kernel_names_but_not_our_settings_or_secrets() -> None:
    base = {
        "KERNEL_USERNAME": "alice",
        "KERNEL_NAMESPACE": "shell",
        "KERNEL_AGENT_GATEWAY_URL": "http://gw",
        "KERNEL_AGENT_GATEWAY_TOKEN": "t",
        "KERNEL_DB_PASSWORD": "p",
        "HOME": "/home/alice",
    }
    env = gateway_environment({"KERNEL_NAMESPACE": "explicit", "KERNEL_API_KEY": "k", "EXTRA": "1"}, base)
    assert env == {"KERNEL_USERNAME": "alice", "KERNEL_NAMESPACE": "explicit", "EXTRA": "1"}


def test_binary_frames_with_buffers_parse() -> None:
    header = json.dumps({"header": {"msg_id": "m"}, "content": {}}).encode()
    offsets = [12, 12 + len(header)]
    frame = (2).to_bytes(4, "big") + b"".join(o.to_bytes(4, "big") for o in offsets) + header + b"BUF"
    message = parse_frame(frame)
    assert message["header"]["msg_id"] == "m" and message["buffers"] == [b"BUF"]
    assert parse_frame('{"a": 1}') == {"a": 1}
    with pytest.raises(ValueError):
        parse_frame(b"\x00")


def test_the_gateway_refuses_without_a_token(remote: KernelGateway) -> None:
    assert httpx.get(f"{remote.url}/api/kernels", trust_env=False).status_code in (401, 403)


def test_cli_runs_on_the_gateway_with_a_token_file_and_keeps_the_token_out(
    tmp_path: Path, remote: KernelGateway, openai_server: OpenAIServer
) -> None:
    (tmp_path / "numbers.csv").write_text("x\n1\n2\n3\n")
    token_file = tmp_path / "token"
    token_file.write_text(remote.token + "\n")
    code = "import pandas as pd\nprint(pd.read_csv('numbers.csv').x.sum())\npd.DataFrame({'y': [1]}).to_csv('made.csv')"
    openai_server.add(Reply("Sum.", tool_calls=(python_call(code),)), Reply("Six."))
    notebook = tmp_path / "run.ipynb"
    result = CliRunner().invoke(
        cli,
        [
            "run",
            "Sum x",
            "--model",
            "m",
            "--base-url",
            openai_server.base_url,
            "--data",
            str(tmp_path / "numbers.csv"),
            "--gateway",
            remote.url,
            "--gateway-token-file",
            str(token_file),
            "--workspace",
            str(tmp_path / "ws"),
            "--out",
            str(notebook),
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    started = next(e for e in events if e["event"] == "run_started")
    assert started["confinement"].startswith(f"remote: Jupyter gateway at {remote.url}")
    finished = next(e for e in events if e["event"] == "execution_finished")
    assert finished["result"]["stdout"] == "6\n"
    assert (tmp_path / "ws" / "made.csv").is_file()  # the artifact came back into the local run folder
    for text in (result.output, notebook.read_text(), json.dumps(openai_server.requests)):
        assert remote.token not in text


def test_a_pool_of_gateway_kernels(tmp_path: Path, remote: KernelGateway) -> None:
    from kernel_agent.kernel.pool import KernelPool

    async def run() -> tuple[str, list[str]]:
        async with KernelPool(size=1, gateway=remote.url, gateway_token=remote.token) as pool:
            await pool.wait_ready()
            async with pool.acquire(tmp_path / "run") as kernel:
                before = await kernel.files.snapshot()
                await kernel.execute("open('made.txt', 'w').write('remote')")
                made = [a.path for a in await kernel.files.changes(before)]
                modules = (await kernel.evaluate({"m": "'pandas' in __import__('sys').modules"}))["m"]
        return str(modules), made

    modules, made = asyncio.run(run())
    assert modules == "True" and made == ["made.txt"]
    assert (tmp_path / "run" / "made.txt").read_text() == "remote"


def test_the_magic_runs_on_the_gateway(
    tmp_path: Path, gateway: KernelGateway, openai_server: OpenAIServer, shell: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_AGENT_GATEWAY_TOKEN", gateway.token)
    openai_server.add(
        Reply("Where?", tool_calls=(python_call("import os\nprint('KERNEL_GATEWAY' in os.environ)"),)),
        Reply("On the gateway."),
    )
    shell.run_cell_magic(
        "agent",
        f"--model m --base-url {openai_server.base_url} --gateway {gateway.url} --workspace {tmp_path / 'ws'}",
        "Where do you run?",
    )
    run = shell.user_ns["_agent_run"]
    assert run.answer == "On the gateway." and run.rounds[0].result.stdout == "True\n"
    assert gateway.token not in (tmp_path / "ws.ipynb").read_text()


def test_a_dead_kernels_folder_is_removed_on_close(tmp_path: Path, gateway: KernelGateway) -> None:
    with KernelSession(tmp_path, gateway=gateway.url, gateway_token=gateway.token, rebuild=False) as session:
        cwd = session.execute("__import__('os').getcwd()").result_text
        assert cwd is not None
        folder = Path(cwd.strip("'"))
        assert folder.name.startswith("kernel-agent.remote-") and folder.is_dir()
        assert session.execute("import os\nos._exit(1)", timeout=30).status == "died"
    assert not folder.exists()
