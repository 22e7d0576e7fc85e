"""The kernel session against real ipykernel kernels."""

from __future__ import annotations

import asyncio
import inspect
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.manager import start_new_kernel

from kernel_agent.errors import KernelStartError, SessionClosedError
from kernel_agent.kernel.outputs import OutputCaps
from kernel_agent.kernel.providers.runtime import runtime_root
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.kernel.session_sync import KernelSession
from kernel_agent.result import png_size

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    """One kernel for tests that do not restart it."""
    with KernelSession(tmp_path_factory.mktemp("ws")) as session:
        yield session


@pytest.fixture
def session(tmp_path: Path) -> Iterator[KernelSession]:
    with KernelSession(tmp_path / "ws") as s:
        yield s


def test_state_persists_across_executes(shared: KernelSession) -> None:
    assert shared.execute("persist_me = 20").status == "ok"
    result = shared.execute("print('doubled'); persist_me * 2")
    assert result.status == "ok"
    assert result.stdout == "doubled\n"
    assert result.result_text == "40"
    assert result.execution_count is not None and result.execution_count >= 2


def test_matplotlib_figure_arrives_as_png(shared: KernelSession) -> None:
    result = shared.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t');")
    assert result.status == "ok"
    assert len(result.images) == 1
    image = result.images[0]
    assert not image.startswith("data:")
    width, height = png_size(image)  # type: ignore[misc]
    assert width > 100 and height > 100
    assert "[image 1: png" in result.to_llm_text()


def test_errors_are_data_without_ansi(shared: KernelSession) -> None:
    result = shared.execute("def f():\n    return 1/0\nf()")
    assert result.status == "error"
    assert result.error is not None and result.error.ename == "ZeroDivisionError"
    assert not any("\x1b[" in line for line in result.error.traceback)
    assert "ZeroDivisionError" in result.to_llm_text()


def test_input_is_a_clear_error_not_a_hang(shared: KernelSession) -> None:
    result = shared.execute("input('name? ')", timeout=30)
    assert result.status == "error"
    assert result.error is not None and result.error.ename == "StdinNotImplementedError"


def test_unicode_round_trips(shared: KernelSession) -> None:
    text = "héllo ✓ 日本語 🚀"
    assert shared.execute(f"print({text!r})").stdout == text + "\n"


def test_clear_output_wait_keeps_only_the_last(shared: KernelSession) -> None:
    code = "from IPython.display import clear_output\nfor i in range(5):\n    clear_output(wait=True)\n    print(i)"
    result = shared.execute(code)
    assert [o["output_type"] for o in result.outputs] == ["stream"]
    assert result.stdout == "4\n"


def test_display_update_replaces_by_display_id(shared: KernelSession) -> None:
    code = (
        "from IPython.display import display\nh = display('first', "
        "display_id=True)\nprint('between')\nh.update('second')"
    )
    result = shared.execute(code)
    displays = [o for o in result.outputs if o["output_type"] == "display_data"]
    assert len(displays) == 1
    assert displays[0]["data"]["text/plain"] == "'second'"
    assert "transient" not in displays[0]


def test_carriage_returns_resolve_like_a_terminal(shared: KernelSession) -> None:
    code = "import sys\nfor i in range(3):\n    sys.stdout.write(f'\\r{i}/3'); sys.stdout.flush()\nprint()"
    assert shared.execute(code).stdout == "2/3\n"


def test_interruptible_loop_times_out_and_keeps_state(shared: KernelSession) -> None:
    shared.execute("survivor = 'still here'")
    result = shared.execute("while True: pass", timeout=2)  # how soon it returns: bench's session.timeout rows
    assert result.status == "timeout"
    assert result.state_lost is False
    assert "still defined" in result.to_llm_text()
    assert shared.execute("survivor").result_text == "'still here'"


def test_long_sleep_times_out_and_keeps_state(shared: KernelSession) -> None:
    shared.execute("sleeper = 7")
    result = shared.execute("import time\ntime.sleep(10**6)", timeout=2)
    assert result.status == "timeout" and not result.state_lost
    assert shared.execute("sleeper").result_text == "7"


def test_swallowed_interrupt_forces_a_restart(session: KernelSession) -> None:
    session.execute("doomed = 1")
    code = (
        "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        "
        "print('caught')"
    )
    result = session.execute(code, timeout=2)  # how soon it returns: bench's session.timeout rows
    assert result.status == "timeout"
    assert result.state_lost is True
    assert "restarted" in result.note
    assert "caught" in result.stdout  # partial output kept
    assert "were lost" in result.to_llm_text()
    after = session.execute("doomed")
    assert after.status == "error" and after.error is not None and after.error.ename == "NameError"


def test_os_exit_is_reported_as_died_and_next_execute_works(session: KernelSession) -> None:
    session.execute("gone = 1")
    result = session.execute("import os\nos._exit(1)", timeout=30)
    assert result.status == "died"
    assert result.state_lost is True
    assert "exit code 1" in result.note
    assert session.execute("print('alive again')").stdout == "alive again\n"


def test_exit_call_is_treated_as_a_death(session: KernelSession) -> None:
    result = session.execute("exit()", timeout=30)
    assert result.status == "died" and result.state_lost
    assert session.execute("1 + 1").result_text == "2"


def test_rebuild_reruns_successful_cells_after_death(tmp_path: Path) -> None:
    with KernelSession(tmp_path, rebuild=True) as session:
        session.execute("base = 5")
        session.execute("1/0")  # failed cells are not re-run
        session.execute("derived = base * 2")
        result = session.execute("import os\nos._exit(3)", timeout=30)
        assert result.status == "died"
        assert result.rebuilt_cells == (1, 3)  # labels are the session's execute calls
        assert (
            "state rebuilt: re-ran 2 cells (1, 3); cell 2 was not re-run (it raised an error); no names are missing"
        ) in result.note
        assert "names missing: none" in result.to_llm_text() and "were lost" not in result.to_llm_text()
        assert session.execute("derived").result_text == "10"


def test_huge_print_is_capped(tmp_path: Path) -> None:
    caps = OutputCaps(max_output_bytes=1_000_000)
    with KernelSession(tmp_path, caps=caps) as session:
        result = session.execute("print('x' * 50_000_000)\nprint('the end')", timeout=60)
    assert result.status == "ok"
    assert len(result.stdout) < 1_010_000
    assert result.dropped_chars > 48_000_000
    note = result.outputs[-1]["data"]["text/plain"]  # the kernel sent no more than the cap, and says so
    assert "passed the cap of 1000000 characters" in note and note.rstrip(" ]\n").endswith("the end")
    assert "characters omitted" in result.to_llm_text(max_chars=2000)


def test_image_cap(tmp_path: Path) -> None:
    with KernelSession(tmp_path, caps=OutputCaps(max_images=2)) as session:
        result = session.execute("import matplotlib.pyplot as plt\nfor i in range(4):\n    plt.figure(); plt.plot([i])")
    assert len(result.images) == 2
    assert result.dropped_images == 2


def test_workspace_is_the_cwd_and_is_created(tmp_path: Path) -> None:
    workspace = tmp_path / "new" / "ws"
    with KernelSession(workspace) as session:
        assert workspace.is_dir()
        assert session.execute("import os; os.getcwd()").result_text == repr(str(workspace))


def test_a_temp_dir_too_long_for_ipc_sockets_still_starts_a_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_temp = tmp_path / ("t" * 60) / ("u" * 40)  # with ours, past a unix socket's 107 bytes
    long_temp.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(long_temp))
    assert runtime_root() != long_temp and len(str(runtime_root())) < 20
    with KernelSession(tmp_path / "ws") as session:
        assert session.execute("21 * 2").result_text == "42"
        assert session.async_session.provider._runtime_dir.parent == runtime_root()  # type: ignore[attr-defined]
    assert not list(long_temp.iterdir())


def test_kernel_never_sees_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-123")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "t0k")
    monkeypatch.setenv("DB_PASSWORD", "hunter2")
    monkeypatch.setenv("ALLOWED_KEY", "fine")
    monkeypatch.setenv("HARMLESS", "yes")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    # Secrets whose names say nothing: an allow-list keeps them out, a deny-list would not.
    monkeypatch.setenv("MYSQL_PWD", "mysql-pw-1")
    monkeypatch.setenv("GITHUB_PAT", "ghp_pat1")
    monkeypatch.setenv("HTTPS_PROXY", "http://user:proxy-pw-1@proxy:3128")
    monkeypatch.setenv("REDIS_URL", "redis://:redis-pw-1@cache:6379")
    monkeypatch.setenv("SENTRY_DSN", "https://sentry-pw-1@sentry.example/1")
    with KernelSession(tmp_path, allow_env=("ALLOWED_KEY",), env={"EXTRA": "1"}) as session:
        seen = session.execute(
            "import os; sorted(k for k in os.environ if k in "
            "{'OPENAI_API_KEY','MY_SERVICE_TOKEN','DB_PASSWORD','ALLOWED_KEY','HARMLESS','EXTRA',"
            "'LC_ALL'})"
        )
        dump = session.execute("import os; print(repr(dict(os.environ)))").stdout
    assert seen.result_text == "['ALLOWED_KEY', 'EXTRA', 'LC_ALL']"
    for secret in ("sk-live-123", "hunter2", "mysql-pw-1", "ghp_pat1", "proxy-pw-1", "redis-pw-1", "sentry-pw-1"):
        assert secret not in dump


def test_sync_facade_works_inside_a_running_event_loop(tmp_path: Path) -> None:
    async def main() -> str | None:
        with KernelSession(tmp_path) as session:
            return session.execute("6 * 7").result_text

    assert asyncio.run(main()) == "42"


def test_async_session_context_manager(tmp_path: Path) -> None:
    async def main() -> tuple[str | None, bool]:
        async with AsyncKernelSession(tmp_path) as session:
            value = (await session.execute("'async'")).result_text
            alive = await session.is_alive()
        return value, alive

    assert asyncio.run(main()) == ("'async'", True)


def test_connect_attaches_and_never_kills(tmp_path: Path) -> None:
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        with KernelSession.connect(manager.connection_file) as session:
            assert session.execute("attached = 3; attached").result_text == "3"
        assert manager.is_alive()
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_closed_session_refuses_and_close_is_idempotent(tmp_path: Path) -> None:
    session = KernelSession(tmp_path).start()
    session.close()
    session.close()
    with pytest.raises(SessionClosedError):
        session.async_session._check_open()
    assert session.is_alive() is False


def test_unknown_kernel_is_a_start_error(tmp_path: Path) -> None:
    with pytest.raises(KernelStartError, match="no-such-kernel"):
        KernelSession(tmp_path, kernel_name="no-such-kernel").start()


def test_sync_and_async_sessions_expose_the_same_methods() -> None:
    def public(cls: type) -> set[str]:
        return {n for n, v in inspect.getmembers(cls) if not n.startswith("_") and callable(v)}

    assert public(KernelSession) == public(AsyncKernelSession)


def test_default_workspace_is_private_and_removed(tmp_path: Path) -> None:
    with KernelSession() as session:
        workspace = session.workspace
        assert workspace is not None and workspace.is_dir()
        assert session.execute("open('made.txt', 'w').write('x')").status == "ok"
    assert not workspace.exists()
    assert os.path.basename(str(workspace)) == "workspace"


def test_kernel_cannot_read_the_agents_process_environment(tmp_path: Path) -> None:
    """/proc/<agent>/environ holds the API key the agent was started with: the kernel must not read it."""

    from kernel_agent.kernel.sandbox.limits import Limits

    code = f"import os\nlen(open('/proc/{os.getpid()}/environ', 'rb').read())"
    with KernelSession(tmp_path) as session:
        blocked = session.execute(code)
    assert blocked.status == "error" and blocked.error is not None and blocked.error.ename == "FileNotFoundError"
    with KernelSession(tmp_path, limits=Limits(sandbox="off")) as session:
        assert session.execute(code).status == "ok"  # the hole the sandbox's PID namespace closes
