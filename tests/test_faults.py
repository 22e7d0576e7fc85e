"""The fault suite: misbehaving code against real, confined kernels.

Each case checks the status the user is given, that the session works
afterwards (or ends cleanly), and that nothing is left behind. Sessions are
shared per module where the cases allow: ``steady`` never restarts,
``crashy`` is restarted by every case, ``confined`` runs under small limits.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from leaks import kernels_of, process_gone

from kernel_agent.errors import SandboxUnavailableError
from kernel_agent.kernel.sandbox.bwrap import find_bwrap
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.sandbox.template import TEMPLATE_MODULE
from kernel_agent.kernel.session import AsyncKernelSession
from kernel_agent.kernel.session_sync import KernelSession

pytestmark = pytest.mark.kernel

SECRETS = {"OPENAI_API_KEY": "sk-fault-suite", "MY_SERVICE_TOKEN": "t0k-fault", "DB_PASSWORD": "hunter2-fault"}


def kernel_tree(session: KernelSession) -> list[int]:
    """The pid of the process we launched (the sandbox's bwrap, or a forked kernel's init), then those of
    everything below it, sorted."""
    manager = session.async_session.manager
    assert manager is not None
    top = psutil.Process(manager.provisioner.process.pid)  # type: ignore[union-attr]
    return [top.pid, *sorted(child.pid for child in top.children(recursive=True))]


def kernel_pid(session: KernelSession) -> int:
    """The host pid of the ipykernel process itself (inside the sandbox: below bwrap and its init; forked from a
    template: the child of the init we launched, which runs the template's command line)."""
    tree = kernel_tree(session)
    for pid in tree:
        try:
            process = psutil.Process(pid)
            command = process.cmdline()
            if "kernel_agent.kernel.inside.launcher" in command and process.name() != "bwrap":
                return pid
            if TEMPLATE_MODULE in command and process.ppid() == tree[0]:
                return pid
        except psutil.NoSuchProcess:
            continue
    raise AssertionError("no kernel process found")


def cgroup_of(session: KernelSession) -> Path:
    confinement = session.async_session._confinement
    assert confinement is not None and confinement.cgroup is not None, "this machine should give kernels a pids cgroup"
    return confinement.cgroup.path


def cgroup_pids(path: Path) -> list[int]:
    return [int(pid) for pid in (path / "cgroup.procs").read_text().split()]


@pytest.fixture(scope="module")
def steady(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    """A session with the default limits, for cases that keep the kernel alive.

    Started without ``PYTEST_CURRENT_TEST``, whose presence makes ipykernel skip
    capturing file-descriptor output (what C code and subprocesses write).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTEST_CURRENT_TEST", raising=False)
        session = KernelSession(tmp_path_factory.mktemp("steady")).start()
    with session:
        yield session


@pytest.fixture(scope="module")
def crashy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    """A session for cases that end in a restart; each case sets up its own state."""
    with KernelSession(tmp_path_factory.mktemp("crashy")) as session:
        yield session


@pytest.fixture(scope="module")
def confined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    limits = Limits(memory_mb=2048, max_processes=64, max_file_mb=1)
    with KernelSession(tmp_path_factory.mktemp("confined"), limits=limits) as session:
        yield session


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    """No network; started with secrets in our environment."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SECRETS.items():
            patch.setenv(name, value)
        session = KernelSession(tmp_path_factory.mktemp("offline"), limits=Limits(network=False)).start()
    with session:
        yield session


@pytest.fixture(scope="module")
def listener() -> Iterator[int]:
    """A TCP port on 127.0.0.1 of this (the host's) network namespace that accepts connections."""
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        yield server.getsockname()[1]


# ------------------------------------------------------------------ runaway code
def test_infinite_loop_is_interrupted_and_state_kept(steady: KernelSession) -> None:
    steady.execute("loop_state = 'kept'")
    result = steady.execute("while True: pass", timeout=2)
    assert result.status == "timeout" and not result.state_lost
    assert "stopped by an interrupt after 2s" in result.note
    assert steady.execute("loop_state").result_text == "'kept'"


def test_long_sleep_is_interrupted_and_state_kept(steady: KernelSession) -> None:
    steady.execute("sleep_state = 1")
    result = steady.execute("import time\ntime.sleep(10**6)", timeout=2)
    assert result.status == "timeout" and not result.state_lost
    assert steady.execute("sleep_state").result_text == "1"


def test_swallowed_keyboard_interrupt_ends_in_a_restart(crashy: KernelSession) -> None:
    crashy.execute("doomed = 1")
    code = (
        "import time\nwhile True:\n    try:\n        time.sleep(10)\n"
        "    except KeyboardInterrupt:\n        print('caught')"
    )
    result = crashy.execute(code, timeout=2)  # how soon it returns: bench's session.timeout rows
    assert result.status == "timeout" and result.state_lost
    assert "the kernel was restarted" in result.note and "caught" in result.stdout
    assert crashy.execute("doomed").error.ename == "NameError"  # type: ignore[union-attr]


def test_long_c_call_ends_in_a_restart(crashy: KernelSession) -> None:
    # An endless recursive query runs inside sqlite's C code, where SIGINT is only noted, never acted on.
    code = (
        "import sqlite3\nsqlite3.connect(':memory:').execute("
        "'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c').fetchall()"
    )
    result = crashy.execute(code, timeout=2)
    assert result.status == "timeout" and result.state_lost
    assert "did not stop within 1s of an interrupt after 2s; the kernel was restarted" in result.note
    assert crashy.execute("'back'").result_text == "'back'"


# ------------------------------------------------------------------ deaths
def test_os_exit_is_a_death_and_the_next_execute_works(crashy: KernelSession) -> None:
    result = crashy.execute("import os\nos._exit(3)", timeout=30)
    assert result.status == "died" and result.state_lost
    assert result.note == "the kernel died (exit code 3); the kernel was restarted"
    assert "kernel died" in result.to_llm_text() and "all variables were lost" in result.to_llm_text()
    assert crashy.execute("2 + 2").result_text == "4"


def test_segfault_is_named(crashy: KernelSession) -> None:
    result = crashy.execute("import ctypes\nctypes.string_at(0)", timeout=30)
    assert result.status == "died" and result.state_lost
    assert "signal SIGSEGV: segmentation fault" in result.note
    assert crashy.execute("'after segfault'").result_text == "'after segfault'"


def test_kill_from_outside_mid_cell(crashy: KernelSession) -> None:
    assert crashy.workspace is not None
    marker = crashy.workspace / "running"  # the only place the sandboxed code can write
    pid = kernel_pid(crashy)

    def kill_once_running() -> None:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_once_running)
    killer.start()
    result = crashy.execute(f"open({str(marker)!r}, 'w').close()\nimport time\ntime.sleep(60)", timeout=30)
    killer.join()
    assert result.status == "died" and result.state_lost
    assert "signal SIGKILL: killed from outside" in result.note
    assert process_gone(pid)
    assert crashy.execute("'after kill'").result_text == "'after kill'"


def test_sys_exit_is_an_error_and_the_kernel_lives(steady: KernelSession) -> None:
    steady.execute("exit_state = 5")
    result = steady.execute("import sys\nsys.exit(3)")
    assert result.status == "error" and not result.state_lost
    assert result.error is not None and (result.error.ename, result.error.evalue) == ("SystemExit", "3")
    assert steady.execute("exit_state").result_text == "5"


FLOOD_RSS = """
import json, resource, sys
from pathlib import Path
from kernel_agent.kernel.session_sync import KernelSession
with KernelSession(Path.cwd() / "flood") as session:  # the test's own tmp_path: nothing left in /tmp
    session.execute("x = 1")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = session.execute(sys.argv[1], 300)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kept = sum(len(json.dumps(o)) for o in result.outputs)
    print(json.dumps({"grew_mb": (after - before) / 1024, "status": result.status, "dropped": result.dropped_chars,
                      "kept": kept, "llm": result.to_llm_text()[-400:]}))
"""


@pytest.mark.parametrize(
    "code",
    [
        "print('x' * 400_000_000)",
        "import sys\nfor _ in range(400):\n    sys.stdout.write('y' * 1_000_000)",
        "from IPython.display import HTML, display\nfor _ in range(300):\n    display(HTML('<p>' + 'z' * 1_000_000 + "
        "'</p>'))",
    ],
    ids=["one-400MB-print", "400x1MB-writes", "300x1MB-HTML"],
)
def test_a_flood_raises_the_hosts_peak_memory_by_little(code: str, tmp_path: Path) -> None:
    """One byte budget per execution, all outputs together: the peak resident memory of the process holding
    the session (a fresh one, so ru_maxrss is this execution's) grows by well under 100 MB, not by the flood."""
    done = subprocess.run(
        [sys.executable, "-c", FLOOD_RSS, code], capture_output=True, text=True, timeout=600, check=True, cwd=tmp_path
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["status"] == "ok" and report["dropped"] > 250_000_000
    assert report["kept"] < 11_000_000 and "not" in report["llm"]  # what was dropped is said
    assert report["grew_mb"] < 100, report


def test_input_is_an_error_not_a_hang(steady: KernelSession) -> None:
    result = steady.execute("input('name? ')", timeout=30)
    assert result.status == "error"
    assert result.error is not None and result.error.ename == "StdinNotImplementedError"


# ------------------------------------------------------------------ floods
def test_hundred_megabytes_printed_are_capped(steady: KernelSession) -> None:
    result = steady.execute("for _ in range(100):\n    print('x' * 10**6)\nprint('the end')", timeout=60)
    assert result.status == "ok"
    assert result.dropped_chars > 89_000_000
    assert len(result.stdout) < steady.async_session.caps.max_output_bytes + 10_000
    note = result.outputs[-1]["data"]["text/plain"]  # the kernel's own cap says what it did not send
    assert "were not sent" in note and note.rstrip(" ]\n").endswith("the end")
    assert len(result.to_llm_text()) < 7000 and "the end" in result.to_llm_text()
    assert steady.execute("'fine'").result_text == "'fine'"


def test_invalid_utf8_becomes_replacement_characters(steady: KernelSession) -> None:
    # Undecodable bytes as Python holds them (surrogate escapes), e.g. a file name from os.listdir.
    surrogates = steady.execute(
        "import sys\nsys.stdout.write(b'\\xff\\xfe text bad\\n'.decode('utf-8', 'surrogateescape'))"
    )
    assert surrogates.status == "ok" and surrogates.stdout == "\ufffd\ufffd text bad\n"
    # Raw bytes on fd 1 reach us through ipykernel's pipe reader, a thread that reads the pipe and then writes what
    # it read to sys.stdout: the cell waits until that write is made (the pipe being empty is not enough: the
    # thread may not have written yet when the cell ends, and the cell's output is published as it ends).
    code = (
        "import os, sys, threading\nhanded = threading.Event()\nwrite = sys.stdout.write\n"
        "def watched(text):\n    written = write(text)\n"
        "    handed.set() if 'raw bad' in text else None\n    return written\n"
        "sys.stdout.write = watched\nos.write(1, b'\\xff\\xfe raw bad\\n')\n"
        "assert handed.wait(25), 'the pipe reader never wrote'\ndel sys.stdout.write"
    )
    raw = steady.execute(code, timeout=30)
    assert raw.status == "ok" and "\ufffd\ufffd raw bad" in raw.stdout, raw.to_llm_text()
    assert steady.execute("'still fine'").result_text == "'still fine'"


def test_five_hundred_figures_are_capped(steady: KernelSession) -> None:
    code = (
        "import matplotlib.pyplot as plt\nfor i in range(500):\n"
        "    fig, ax = plt.subplots(figsize=(1, 1), dpi=20)\n    ax.axis('off')"
    )
    result = steady.execute(code, timeout=120)
    cap = steady.async_session.caps.max_images
    assert result.status == "ok"
    assert len(result.images) == cap and result.dropped_images == 500 - cap
    assert f"{500 - cap} images not kept" in result.to_llm_text()
    assert steady.execute("len(plt.get_fignums())").result_text == "0"


# ------------------------------------------------------------------ limits
def test_memory_bomb_is_a_memory_error_and_the_kernel_lives(confined: KernelSession) -> None:
    code = "import numpy as np\nhog = []\nwhile True:\n    hog.append(np.empty(2**25))  # 256 MB of address space each"
    result = confined.execute(code, timeout=60)
    assert result.status == "error" and not result.state_lost
    assert result.error is not None and result.error.ename == "MemoryError"
    assert 1 <= int(confined.execute("len(hog)").result_text or 0) <= 8  # state kept, at most 2 GB
    assert confined.execute("del hog; 'freed'").result_text == "'freed'"


def test_file_size_limit_is_an_os_error(confined: KernelSession) -> None:
    result = confined.execute("with open('big.bin', 'wb') as fh:\n    fh.write(b'x' * (3 * 2**20))")
    assert result.status == "error"
    assert result.error is not None and result.error.ename == "OSError" and "File too large" in result.error.evalue
    assert confined.execute("import os; os.path.getsize('big.bin')").result_text == str(2**20)


def test_fork_bomb_is_stopped_and_every_child_goes(confined: KernelSession) -> None:
    cgroup = cgroup_of(confined)
    bomb = textwrap.dedent("""\
        import os, time
        children, refused = [], None
        try:
            while len(children) < 500:  # a guard of our own, should the process limit be missing
                pid = os.fork()
                if pid == 0:
                    time.sleep(120)
                    os._exit(0)
                children.append(pid)
        except OSError as exc:
            refused = exc
        print(len(children), type(refused).__name__)
        children
    """)
    result = confined.execute(bomb, timeout=60)
    assert result.status == "ok"
    count, refusal = result.stdout.split()
    assert 30 < int(count) < 64 and refusal == "BlockingIOError"
    children = kernel_tree(confined)  # host pids: the code's own are those of its PID namespace
    assert len(children) > 30
    refusals = dict(line.split() for line in (cgroup / "pids.events").read_text().splitlines())["max"]
    assert int(refusals) > 0  # pids.max did the refusing
    assert confined.execute("'alive with a full process table'").status == "ok"

    confined.restart()  # the children hold every pid the limit allows: a restart clears them
    assert sorted(cgroup_pids(cgroup)) == kernel_tree(confined)  # the new sandbox's processes, and no child
    assert all(process_gone(pid) for pid in children)


def test_cpu_time_limit_ends_the_kernel_with_a_clear_reason(tmp_path: Path) -> None:
    with KernelSession(tmp_path, limits=Limits(cpu_seconds=2)) as session:
        session.execute("lost = 1")
        result = session.execute("while True: pass", timeout=30)
        assert result.status == "died" and result.state_lost
        assert "signal SIGXCPU: CPU time limit of 2 s reached" in result.note
        assert "kernel was restarted" in result.note
        assert session.execute("'fresh budget'").result_text == "'fresh budget'"


def test_no_cgroup_is_left_after_close(tmp_path: Path) -> None:
    with KernelSession(tmp_path, limits=Limits(max_processes=32)) as session:
        cgroup = cgroup_of(session)
        session.execute("import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)")
        stray = [pid for pid in cgroup_pids(cgroup) if psutil.Process(pid).name() == "sleep"]
        assert len(stray) == 1  # it left the kernel's process group, not its cgroup
    assert not cgroup.exists()
    assert process_gone(stray[0])


# ------------------------------------------------------------------ network and secrets
def test_a_default_kernel_cannot_reach_this_machine(steady: KernelSession, listener: int) -> None:
    # The network is off unless asked for: model code cannot drive this machine's own services.
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), timeout=5)"
    result = steady.execute(code, timeout=30)
    assert result.error is not None and result.error.ename == "ConnectionRefusedError"
    assert steady.execute("[name for _, name in socket.if_nameindex()]").result_text == "['lo']"


def test_with_the_network_on_the_kernel_has_its_own_and_still_not_this_machine(tmp_path: Path, listener: int) -> None:
    """--network: a namespace of its own behind pasta, with an interface besides loopback; its 127.0.0.1
    is its own (a server of its own answers there), never the host's (the host's listener is refused)."""
    with socket.create_server(("127.0.0.1", 0)) as host_server:
        host_port = host_server.getsockname()[1]
        with KernelSession(tmp_path, limits=Limits(network=True)) as session:
            host = session.execute(
                f"import socket\nsocket.create_connection(('127.0.0.1', {host_port}), timeout=5)", timeout=30
            )
            assert host.error is not None and host.error.ename == "ConnectionRefusedError"
            host = session.execute(f"socket.create_connection(('127.0.0.1', {listener}), timeout=5)", timeout=30)
            assert host.error is not None and host.error.ename == "ConnectionRefusedError"
            own = session.execute(
                "own = socket.create_server(('127.0.0.1', 0))\n"
                "socket.create_connection(own.getsockname(), timeout=5).close()\n'own'",
                timeout=30,
            )
            assert own.result_text == "'own'"
            names = session.execute("[name for _, name in socket.if_nameindex()]").result_text
            assert names is not None and names != "['lo']" and "'lo'" in names  # a route out, through pasta
        host_server.settimeout(0)
        with pytest.raises(BlockingIOError):
            host_server.accept()  # nothing ever arrived


def test_the_network_without_pasta_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with bwrap but no pasta: --network refuses to start, naming the package, rather than share
    the host's network."""
    tools = tmp_path / "bin"
    tools.mkdir()
    bwrap = shutil.which("bwrap") or find_bwrap()
    assert bwrap is not None
    (tools / "bwrap").symlink_to(bwrap)
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(SandboxUnavailableError, match="passt"):
        KernelSession(tmp_path / "ws", limits=Limits(network=True)).start()


def test_network_call_fails_without_network(offline: KernelSession, listener: int) -> None:
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), timeout=5)"
    result = offline.execute(code, timeout=30)
    assert result.status == "error"
    assert result.error is not None and result.error.ename == "ConnectionRefusedError"
    outside = offline.execute("socket.create_connection(('192.0.2.1', 80), timeout=5)", timeout=30)
    assert outside.error is not None and outside.error.ename == "OSError" and "unreachable" in outside.error.evalue
    assert offline.execute("[name for _, name in socket.if_nameindex()]").result_text == "['lo']"


def test_offline_kernel_is_interrupted_like_any_other(offline: KernelSession) -> None:
    offline.execute("offline_state = 'kept'")
    result = offline.execute("import time\ntime.sleep(100)", timeout=1)
    assert result.status == "timeout" and not result.state_lost
    assert offline.execute("offline_state").result_text == "'kept'"


def test_loopback_inside_the_offline_kernel_works(offline: KernelSession) -> None:
    code = (
        "import socket\nwith socket.create_server(('127.0.0.1', 0)) as server:\n"
        "    socket.create_connection(server.getsockname(), timeout=5).close()\n'local ok'"
    )
    assert offline.execute(code, timeout=30).result_text == "'local ok'"


def test_secrets_are_invisible_inside_the_kernel(offline: KernelSession) -> None:
    seen = offline.execute(f"import os\nsorted(name for name in os.environ if name in {sorted(SECRETS)!r})")
    assert seen.result_text == "[]"
    dump = offline.execute("print(dict(os.environ))").stdout
    assert not any(value in dump for value in SECRETS.values())
    assert "KERNEL_AGENT_" not in dump
    # Nor through our process: the sandbox's PID namespace has no /proc entry for it.
    parent = offline.execute(f"open('/proc/{os.getpid()}/environ', 'rb').read()")
    assert parent.error is not None and parent.error.ename == "FileNotFoundError"


def test_no_network_when_the_machine_cannot_isolate_is_an_error(tmp_path: Path) -> None:
    # A user namespace where no further namespace may be made stands in for a machine without them.
    script = tmp_path / "refused.py"
    script.write_text(
        textwrap.dedent("""\
        import ctypes, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        uid, gid = os.getuid(), os.getgid()
        assert libc.unshare(0x10000000) == 0, os.strerror(ctypes.get_errno())
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
        for name in ("max_user_namespaces", "max_net_namespaces"):
            with open(f"/proc/sys/user/{name}", "w") as fh:
                fh.write("0")
        from dataclasses import replace
        from kernel_agent.errors import SandboxUnavailableError
        from kernel_agent.kernel.sandbox.limits import Limits
        from kernel_agent.kernel.session_sync import KernelSession
        try:
            KernelSession(sys.argv[1]).start()
        except SandboxUnavailableError as exc:
            print("refused:", exc)
        else:
            print("started")
    """)
    )
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused:") and "cannot make a sandbox here" in done.stdout
    assert "sandbox='off'" in done.stdout  # says how to run unconfined on purpose
    assert list(tmp.iterdir()) == []


# ------------------------------------------------------------------ the owner goes away
OWNER = """\
import sys
from kernel_agent.kernel.session_sync import KernelSession
workspace, how = sys.argv[1], sys.argv[2]
session = KernelSession(workspace).start()
print(session.async_session._confinement.cgroup.path, flush=True)
if how == "forgotten":
    session.execute("x = 1")
    sys.exit(0)  # never closed: the interpreter's exit has to clean up
with session:
    if how == "interrupt":
        session.execute("open('started', 'w').close()\\nimport time\\ntime.sleep(100)")
    else:
        session.execute("x = 1")
        raise RuntimeError("the owner failed")
"""


@pytest.mark.parametrize(
    ("how", "says"),
    [("interrupt", "KeyboardInterrupt"), ("exception", "RuntimeError: the owner failed"), ("forgotten", "")],
)
def test_owner_going_away_leaves_nothing_behind(tmp_path: Path, how: str, says: str) -> None:
    workspace, tmp = tmp_path / "ws", tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = subprocess.Popen(
        [sys.executable, str(script), str(workspace), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        assert owner.stdout is not None
        cgroup = Path(owner.stdout.readline().strip())
        if how == "interrupt":
            deadline = time.monotonic() + 30
            while not (workspace / "started").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert kernels_of(owner.pid)
            owner.send_signal(signal.SIGINT)
        _, stderr = owner.communicate(timeout=30)  # it exits (how soon: bench's models.exit row)
    finally:
        owner.kill()
    assert (owner.returncode == 0) == (how == "forgotten"), stderr
    assert says in stderr
    assert kernels_of(owner.pid) == []
    assert list(tmp.iterdir()) == []
    assert cgroup.is_absolute() and cgroup.name.startswith("kernel-agent-") and not cgroup.exists()


def test_limits_off_gives_an_unconfined_kernel(tmp_path: Path) -> None:
    with KernelSession(tmp_path, limits=replace(Limits.off())) as session:
        assert session.async_session._confinement.cgroup is None  # type: ignore[union-attr]
        limits = session.execute(
            "import resource\n[resource.getrlimit(r)[0] for r in "
            "(resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE)]"
        )
        assert limits.result_text == "[-1, -1, -1]"


def test_cpu_time_limit_counts_the_whole_process_tree(tmp_path: Path) -> None:
    # Three children each stay under the per-process RLIMIT_CPU (2.5 s of 3 s), so only a limit on
    # the tree together (7.5 s) can stop them; the kernel itself stays idle in a quiet sleep.
    spin = "import resource, time\nwhile resource.getrusage(resource.RUSAGE_SELF).ru_utime < 2.5: pass\ntime.sleep(300)"
    code = (
        "import subprocess, sys, time\n"
        f"children = [subprocess.Popen([sys.executable, '-c', {spin!r}]) for _ in range(3)]\n"
        "time.sleep(120)"
    )
    with KernelSession(tmp_path, limits=Limits(cpu_seconds=3)) as session:
        result = session.execute(code, timeout=100)
        assert result.status == "died" and result.state_lost
        assert "CPU time limit of 3 s for the kernel and every process it started, together, reached" in result.note
        assert session.execute("'fresh budget'").result_text == "'fresh budget'"


def test_a_close_cancelled_midway_still_cleans_up(tmp_path: Path) -> None:
    """A server's reaper cancelled while it shut a kernel down once left the kernel unreaped, its
    log open and its runtime dir behind: the cancel now waits for the clean-up, then goes on."""

    async def run() -> tuple[list[int], Path]:
        session = await AsyncKernelSession(tmp_path).start()
        provider = session.provider
        runtime = provider._runtime_dir  # type: ignore[attr-defined]
        tree = [provider.manager.provisioner.process.pid]  # type: ignore[attr-defined]
        closing = asyncio.ensure_future(session.close())
        await asyncio.sleep(0)  # one turn of the loop: the shutdown has begun
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        await session.close()  # idempotent afterwards
        return tree, runtime

    others = set(kernels_of(os.getpid()))  # the module's shared sessions
    tree, runtime = asyncio.run(run())
    assert runtime is not None and not runtime.exists()
    assert all(process_gone(pid) for pid in tree) and set(kernels_of(os.getpid())) <= others
