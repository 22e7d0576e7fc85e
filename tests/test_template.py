"""Kernels forked from a warmed template (issue 52), attacked as model code would attack them.

Two kernels, ``a`` (the attacker) and ``b`` (the victim), are forked from this process's template; each case
runs an attack in ``a`` and asserts on what ``b`` suffers, from the host where it can (``b`` still runs, its
variables and files unchanged), else on the attacker's failure. Both assert that they were forked (the
confinement line), so no case passes on the cold path by accident. Then: a kernel that dies (a signal, its
memory) leaves the template and its siblings running; a template that dies is restarted; the analysis stack
works in a forked kernel; ``template=False``, an R kernel and another Python environment start cold. Sessions
are ``KernelSession``s (``AsyncKernelSession`` behind its blocking facade, with its default ``template=True``),
``a`` and ``b`` shared by the module. ``test_template_siblings.py`` holds the attack on the template's channels.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from bombs import memory_hog_children
from leaks import process_gone
from test_hostile import attack

from kernel_agent.kernel.providers.forked import TemplateProvisioner
from kernel_agent.kernel.providers.local import LocalProvider
from kernel_agent.kernel.sandbox.limits import Limits
from kernel_agent.kernel.sandbox.template import Template, TemplateKey, template_for
from kernel_agent.kernel.session_sync import KernelSession

pytestmark = pytest.mark.kernel

FORKED = "; start: forked from a warmed template"
VICTIM_STATE = "the victim keeps this"


def forked(session: KernelSession) -> KernelSession:
    """``session``, asserted to run a kernel forked from a template (not one started cold)."""
    assert session.async_session.confinement.endswith(FORKED), session.async_session.confinement
    return session


def provisioner(session: KernelSession) -> TemplateProvisioner:
    manager = session.async_session.manager
    assert manager is not None and isinstance(manager.provisioner, TemplateProvisioner)
    return manager.provisioner


def host_pid(session: KernelSession) -> int:
    """The forked child's pid in the host's numbering: PID 1 of its own namespace, the kernel's init."""
    pid = provisioner(session).pid
    assert isinstance(pid, int)
    return pid


def host_pids(session: KernelSession) -> list[int]:
    """Every process of the forked kernel's sandbox, in the host's numbering: its init and the kernel below it."""
    top = psutil.Process(host_pid(session))
    pids = [top.pid, *(child.pid for child in top.children(recursive=True))]
    assert len(pids) >= 2, pids
    return pids


def template_of(session: KernelSession) -> Template:
    """The template ``session``'s kernel was forked from (this process's, for its key)."""
    made = provisioner(session)
    return template_for(TemplateKey.make(made.template_env, [Path(p) for p in made.extra_read]))


def runtime_dir(session: KernelSession) -> Path:
    """The host folder holding the kernel's connection file and its ZMQ ipc sockets."""
    manager = session.async_session.manager
    assert manager is not None and manager.transport == "ipc"
    return Path(manager.connection_file).parent


@pytest.fixture(scope="module")
def b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with KernelSession(tmp_path_factory.mktemp("victim")) as session:
        forked(session).execute(f"victim_state = {VICTIM_STATE!r}").raise_for_status()
        yield session


@pytest.fixture(scope="module")
def a(tmp_path_factory: pytest.TempPathFactory, b: KernelSession) -> Iterator[KernelSession]:
    with KernelSession(tmp_path_factory.mktemp("attacker")) as session:
        yield forked(session)


def assert_unharmed(b: KernelSession, pid: int) -> None:
    """The victim's kernel is the same process, alive, with its state."""
    assert psutil.pid_exists(pid) and host_pid(b) == pid
    assert b.execute("victim_state").result_text == repr(VICTIM_STATE)


# ------------------------------------------------------------------ processes
def test_a_sees_signals_and_traces_none_of_bs_processes(a: KernelSession, b: KernelSession) -> None:
    victim, victims = host_pid(b), host_pids(b)
    out = attack(
        a,
        f"""
        import ctypes, os, signal
        print(sorted(p for p in os.listdir('/proc') if p.isdigit()) == sorted({{'1', str(os.getpid())}}))
        libc = ctypes.CDLL(None, use_errno=True)
        for pid in {victims!r}:
            print(os.path.exists(f'/proc/{{pid}}'))
            for sig in (signal.SIGKILL, signal.SIGSTOP, 0):
                try:
                    os.kill(pid, sig)
                    print('signalled')
                except OSError as exc:
                    print(type(exc).__name__)
            for request in (16, 0x4206):  # PTRACE_ATTACH, PTRACE_SEIZE
                print(libc.ptrace(request, pid, None, None), ctypes.get_errno())
        """,
    )
    lines = out.splitlines()
    assert lines[0] == "True", lines  # its own PID namespace: its init (PID 1) and itself
    for at in range(1, len(lines), 6):  # per victim pid: not there, no such process to signal or trace
        assert lines[at : at + 4] == ["False", *["ProcessLookupError"] * 3], lines
        assert all(line.startswith("-1 ") for line in lines[at + 4 : at + 6]), lines
    assert len(lines) == 1 + 6 * len(victims)
    assert_unharmed(b, victim)
    assert host_pids(b) == victims


def test_killing_all_it_can_kills_only_itself(tmp_path: Path, b: KernelSession) -> None:
    victim = host_pid(b)
    with KernelSession(tmp_path / "ws") as attacker:
        forked(attacker)
        template = template_of(attacker)
        out = attack(
            attacker,
            """
            import os, signal
            for pid in (-1, os.getppid(), 1):  # everyone it may signal, its parent, its namespace's init
                try:
                    os.kill(pid, signal.SIGKILL)
                    print(pid, 'sent')
                except OSError as exc:
                    print(pid, type(exc).__name__)
            """,
        )
        assert out.splitlines() == ["-1 ProcessLookupError", "1 sent", "1 sent"], out  # its init ignores it
        assert template.alive() and template_of(b).pid == template.pid
        assert attacker.execute("'still served'").result_text == "'still served'"
    assert_unharmed(b, victim)


# ------------------------------------------------------------------ files
def test_a_can_neither_read_nor_write_bs_workspace(a: KernelSession, b: KernelSession) -> None:
    victim = b.workspace
    assert victim is not None and a.workspace is not None
    b.execute("open('private.txt', 'w').write('only b')").raise_for_status()
    out = attack(
        a,
        f"""
        import os
        print(os.path.exists({str(victim)!r}), os.path.exists({str(victim / "private.txt")!r}), os.listdir('.'))
        for path in ({str(victim / "planted.txt")!r}, {str(victim / "private.txt")!r}):
            try:
                open(path, 'w').write('from a')
                print('written')
            except OSError as exc:
                print(type(exc).__name__)
        """,
    )
    assert out.splitlines() == ["False False []", "FileNotFoundError", "FileNotFoundError"], out
    assert (victim / "private.txt").read_text() == "only b" and not (victim / "planted.txt").exists()
    assert sorted(p.name for p in a.workspace.iterdir()) == []


def test_a_shares_no_tmp_or_shm_with_b(a: KernelSession, b: KernelSession) -> None:
    b.execute("for path in ('/tmp/b-only', '/dev/shm/b-only'):\n    open(path, 'w').write('b')").raise_for_status()
    out = attack(
        a,
        """
        import os
        print(os.path.exists('/tmp/b-only'), os.path.exists('/dev/shm/b-only'), os.listdir('/dev/shm'))
        open('/tmp/a-only', 'w').write('a')
        open('/dev/shm/a-only', 'w').write('a')
        """,
    )
    assert out.splitlines() == ["False False []"], out
    seen = b.execute("import os\nprint(sorted(os.listdir('/tmp')), os.listdir('/dev/shm'))").stdout
    assert "a-only" not in seen and "b-only" in seen, seen
    assert not Path("/tmp/b-only").exists() and not Path("/dev/shm/b-only").exists()


# ------------------------------------------------------------------ sockets
def test_a_cannot_reach_bs_sockets(a: KernelSession, b: KernelSession) -> None:
    name = f"kernel-agent-victim-{os.getpid()}"
    listened = b.execute(
        textwrap.dedent(f"""
        import socket
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind('\\0{name}')
        listener.listen()
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect('\\0{name}')  # reachable from b itself
        print('listening')
        """)
    )
    assert listened.stdout == "listening\n", listened
    sockets = runtime_dir(b)
    ipc = sorted(str(p) for p in sockets.rglob("*") if p.is_socket())
    assert ipc, f"no ZMQ ipc socket in {sockets}"
    out = attack(
        a,
        f"""
        import glob, os, socket
        for address in ['\\0{name}', *{ipc!r}]:
            try:
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(address)
                print('connected')
            except OSError as exc:
                print(type(exc).__name__)
        print(os.path.exists({str(sockets)!r}), {str(sockets)!r} in glob.glob('/tmp/*'))
        """,
    )
    assert out.splitlines() == ["ConnectionRefusedError", *["FileNotFoundError"] * len(ipc), "False False"], out
    assert b.execute("listener.accept is not None").result_text == "True"


# ------------------------------------------------------------------ memory
def test_a_cannot_read_bs_memory(a: KernelSession, b: KernelSession) -> None:
    victim = host_pids(b)[-1]  # the kernel itself, below its init
    secret = f"b-secret-{os.urandom(8).hex()}"
    b.execute(f"held = {secret!r}").raise_for_status()
    out = attack(
        a,
        f"""
        import ctypes, glob, os
        for name in ('mem', 'maps', 'environ', 'cmdline'):
            try:
                print(open('/proc/{victim}/' + name, 'rb').read(100))
            except OSError as exc:
                print(type(exc).__name__)
        found = []
        for path in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):
            if {secret!r}.encode() in open(path, 'rb').read():
                found.append(path)
        class Iovec(ctypes.Structure):
            _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
        buffer = ctypes.create_string_buffer(64)
        local, remote = Iovec(ctypes.addressof(buffer), 64), Iovec(0x400000, 64)
        libc = ctypes.CDLL(None, use_errno=True)
        print(found, libc.process_vm_readv({victim}, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
        """,
    )
    assert out.splitlines() == ["FileNotFoundError"] * 4 + ["[] -1"], out
    assert secret not in out


# ------------------------------------------------------------------ secrets and randomness
# Each kernel's next draws from every generator the template's imports seeded. A generator two kernels share would
# give one kernel's values again in the other's, a few draws later (each kernel used it a little since the fork):
# so each kernel draws many, and no value of one may appear among the other's. (``random`` and tempfile's names
# are reseeded after a fork by CPython itself; numpy's generator and multiprocessing's key only by the template.)
FRESH = """
import json, multiprocessing, random, secrets, tempfile, uuid
import numpy
named = []
for _ in range(50):
    with tempfile.NamedTemporaryFile() as made:
        named.append(made.name)
print(json.dumps({
    'random': [random.random() for _ in range(2000)], 'numpy': numpy.random.random(2000).tolist(),
    'uuid': [str(uuid.uuid4())], 'secrets': [secrets.token_hex(16)],
    'mktemp': [tempfile.mktemp() for _ in range(500)], 'named': named,
    'authkey': [multiprocessing.current_process().authkey.hex()], 'hash': hash('kernel-agent'),
}))
"""


def test_each_kernel_has_its_own_randomness_and_keys(a: KernelSession, b: KernelSession) -> None:
    first, second = (json.loads(session.execute(FRESH).stdout) for session in (a, b))
    # str hashing is fixed when the template's interpreter starts: kernels forked from one template may share it
    # (documented); every other state below must be the kernel's own.
    first.pop("hash")
    second.pop("hash")
    shared = {name: set(first[name]) & set(second[name]) for name in first}
    assert not any(shared.values()), shared
    keys = [json.loads(Path(s.async_session.manager.connection_file).read_text())["key"] for s in (a, b)]  # type: ignore[union-attr]
    assert keys[0] != keys[1] and all(len(key) >= 32 for key in keys)


# ------------------------------------------------------------------ the template
def test_a_cannot_reach_the_template(a: KernelSession) -> None:
    template = template_of(a)
    assert template.pid is not None and psutil.pid_exists(template.pid)
    out = attack(
        a,
        f"""
        import ctypes, json, os, socket
        status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)
        fds = {{}}
        for fd in os.listdir('/proc/self/fd'):
            try:
                fds[fd] = os.readlink('/proc/self/fd/' + fd)
            except FileNotFoundError:  # the listing's own descriptor, closed since
                pass
        sockets = []  # (family, type, name) of each: the template's and the host's channels are SOCK_SEQPACKET
        for fd, link in fds.items():
            if link.startswith('socket:'):
                held = socket.socket(fileno=os.dup(int(fd)))
                try:
                    name = held.getsockname()
                except OSError:
                    name = None
                sockets.append([held.family.name, held.type.name, name if isinstance(name, str) else str(name)])
                held.close()
        libc = ctypes.CDLL(None, use_errno=True)
        tries = {{}}
        for flag, name in ((0x10000000, 'user'), (0x00020000, 'mnt'), (0x40000000, 'net'), (0x20000000, 'pid')):
            tries['unshare ' + name] = (libc.unshare(flag), ctypes.get_errno())
        for name in ('user', 'mnt', 'net', 'pid'):
            fd = os.open('/proc/self/ns/' + name, os.O_RDONLY)
            tries['setns ' + name] = (libc.setns(fd, 0), ctypes.get_errno())
            os.close(fd)
        try:
            os.chroot('/')
            tries['chroot'] = (0, 0)
        except OSError as exc:
            tries['chroot'] = (-1, exc.errno)
        print(json.dumps({{
            'caps': [status[name].strip() for name in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')],
            'seccomp': status['Seccomp'].strip(), 'nnp': status['NoNewPrivs'].strip(),
            'template': os.path.exists('/proc/{template.pid}'), 'pids': sorted(p for p in os.listdir('/proc')
            if p.isdigit()) == sorted({{'1', str(os.getpid())}}), 'stdin': fds['0'], 'sockets': sockets, 'tries': tries,
        }}))
        """,
    )
    seen = json.loads(out)
    assert seen["caps"] == ["0000000000000000"] * 5 and seen["seccomp"] == "2" and seen["nnp"] == "1", seen
    assert not seen["template"] and seen["pids"], seen
    assert seen["stdin"] == "/dev/null", seen
    # ipykernel's own sockets only: its ZMQ ipc sockets (named in its own runtime folder) and their connections,
    # ZMQ's signalling pairs, one loopback TCP socket; none the template or the host held.
    own = str(runtime_dir(a))
    kinds = {(family, kind) for family, kind, _ in seen["sockets"]}
    assert kinds <= {("AF_UNIX", "SOCK_STREAM"), ("AF_INET", "SOCK_STREAM")}, seen["sockets"]
    names = [name for family, _, name in seen["sockets"] if family == "AF_UNIX" and name]
    assert names and all(name.startswith(own + "/") for name in names), seen["sockets"]
    assert all(name.startswith("('127.0.0.1', ") for family, _, name in seen["sockets"] if family == "AF_INET")
    assert all(result == -1 and number in (1, 22) for result, number in seen["tries"].values()), seen["tries"]
    assert template.alive()


# ------------------------------------------------------------------ deaths
def test_a_kernel_that_kills_itself_leaves_the_template_and_siblings(tmp_path: Path, b: KernelSession) -> None:
    victim = host_pid(b)
    with KernelSession(tmp_path / "ws") as doomed:
        template = template_of(forked(doomed))
        before = (template.pid, template.starts)
        for code, words in (
            ("import ctypes\nctypes.string_at(0)", "signal SIGSEGV: segmentation fault"),
            ("import os\nos._exit(3)", "exit code 3"),
            ("import os\nos.kill(os.getpid(), 9)", "signal SIGKILL: killed from outside"),
        ):
            doomed.execute("doomed = 1").raise_for_status()
            result = doomed.execute(code, timeout=30)
            assert result.status == "died" and result.state_lost, result
            assert result.note == f"the kernel died ({words}); the kernel was restarted"
            assert (template.pid, template.starts) == before and template.alive()
            assert forked(doomed).execute("'doomed' in dir()").result_text == "False"  # restarted, forked again
            assert_unharmed(b, victim)


def test_a_forked_kernel_is_killed_at_once_whole_and_alone(tmp_path: Path, b: KernelSession) -> None:
    """``kill_now`` (what ``kill_local_kernels`` runs for each kernel when a SIGTERM stops the MCP server, so that
    its close ends before the client's SIGKILL) reaches a forked kernel, the init of its own PID namespace in no
    process group of its own, and every process in its sandbox; the template and a sibling live on."""
    victim = host_pid(b)
    with KernelSession(tmp_path / "ws") as doomed:
        template = template_of(forked(doomed))
        doomed.execute("import subprocess\nchild = subprocess.Popen(['sleep', '600'])").raise_for_status()
        pids = host_pids(doomed)
        assert len(pids) >= 3, pids  # the init, the kernel and its child
        provider = doomed.async_session.provider
        assert isinstance(provider, LocalProvider) and provider.kill_now()
        deadline = time.monotonic() + 30  # SIGKILL is not instant: the kernel of Linux ends them, then reaps
        while not all(process_gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(process_gone(pid) for pid in pids), pids
        assert template.alive()
        assert_unharmed(b, victim)


def test_a_kernel_out_of_memory_leaves_the_template_and_siblings(tmp_path: Path, b: KernelSession) -> None:
    victim = host_pid(b)
    with KernelSession(tmp_path / "ws", limits=Limits(memory_mb=2048)) as hungry:
        template = template_of(forked(hungry))
        before = (template.pid, template.starts)
        bomb = "import numpy as np\nhog = []\nwhile True:\n    hog.append(np.ones(2**24))  # 128 MB, touched"
        result = hungry.execute(bomb, timeout=60)
        assert result.status == "error" and result.error is not None and result.error.ename == "MemoryError", result
        hungry.execute("del hog").raise_for_status()
        memory = hungry.async_session._confinement.memory  # type: ignore[union-attr]
        if memory is not None:  # the machine gives kernels a memory cgroup: the tree together goes over it
            out = attack(hungry, memory_hog_children(900))
            assert "-9" in out and (memory.oom_kills() or 0) >= 1, out
        assert (template.pid, template.starts) == before and template.alive()
        assert hungry.execute("'lives on'").result_text == "'lives on'"
    assert_unharmed(b, victim)


def test_a_template_that_dies_is_restarted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A template of its own (its key has one more variable), so that killing it leaves the module's kernels alone.
    monkeypatch.setenv("KERNEL_AGENT_TEST_OWN_TEMPLATE", str(os.getpid()))
    own = {"allow_env": ("KERNEL_AGENT_TEST_OWN_TEMPLATE",)}
    with KernelSession(tmp_path / "first", **own) as first:
        template = template_of(forked(first))
        first.execute("kept = 1").raise_for_status()
        pid, starts = template.pid, template.starts
        assert pid is not None and starts >= 1
        kernel = host_pid(first)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not process_gone(kernel) and time.monotonic() < deadline:
            time.sleep(0.01)  # the kernel's parent-death signal arrives as its template ends
        result = first.execute("kept", timeout=30)  # its kernel died with its template
        assert result.status == "died" and result.state_lost, result
        assert template.pid not in (None, pid) and template.starts == starts + 1 and template.alive()
        assert forked(first).execute("'again'").result_text == "'again'"
    with KernelSession(tmp_path / "next", **own) as following:
        assert template_of(forked(following)) is template and template.starts == starts + 1
        assert following.execute("1 + 1").result_text == "2"


# ------------------------------------------------------------------ the analysis stack
STACK = """
import json, os, subprocess
import matplotlib.pyplot as plt
import numpy as np
from joblib import Parallel, delayed
from multiprocessing import get_context
from sklearn.ensemble import RandomForestClassifier
from threadpoolctl import threadpool_info

def square(x):
    return x * x

X = np.random.default_rng(0).random((200, 4))
model = RandomForestClassifier(n_estimators=8, n_jobs=2, random_state=0).fit(X, X[:, 0] > 0.5)
with get_context('fork').Pool(2) as pool:
    pooled = pool.map(square, range(5))
print(json.dumps({
    'sklearn': float(model.score(X, X[:, 0] > 0.5)),
    'joblib': Parallel(n_jobs=2)(delayed(square)(i) for i in range(5)),
    'pool': pooled,
    'echo': subprocess.run(['echo', 'hi'], capture_output=True, text=True).stdout,
    'blas': sorted({p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'}),
    'omp': os.environ.get('OMP_NUM_THREADS'),
}))
plt.plot([1, 2, 3])
plt.show()
"""


def test_the_analysis_stack_works_in_a_forked_kernel(a: KernelSession, tmp_path: Path) -> None:
    result = a.execute(STACK, timeout=120)
    assert result.ok, result.to_llm_text()
    done = json.loads(result.stdout)
    assert done["sklearn"] > 0.9 and done["joblib"] == done["pool"] == [0, 1, 4, 9, 16] and done["echo"] == "hi\n"
    assert len(result.images) == 1 and result.images[0].startswith("iVBOR")  # a PNG
    shown = a.execute("plt.figure()\nplt.plot([3, 2, 1])")  # shown at the cell's end, without plt.show()
    assert len(shown.images) == 1 and shown.images[0].startswith("iVBOR"), shown.to_llm_text()
    # The numeric libraries have the threads a kernel started cold has (the template ran them at one).
    with KernelSession(tmp_path / "cold", template=False) as cold:
        assert cold.async_session.confinement.endswith("; start: cold"), cold.async_session.confinement
        expected = json.loads(cold.execute(STACK, timeout=120).stdout)
    assert done["blas"] == expected["blas"] and done["omp"] == expected["omp"] == os.environ.get("OMP_NUM_THREADS")
    if os.cpu_count() != 1 and "OMP_NUM_THREADS" not in os.environ and "OPENBLAS_NUM_THREADS" not in os.environ:
        assert min(done["blas"]) > 1, done


# ------------------------------------------------------------------ the cold path
@pytest.mark.parametrize(
    "kwargs",
    # --python: this venv's interpreter by another of its names, so that it counts as another environment
    [{"kernel_name": "ir"}, {"python": str(Path(sys.executable).with_name("python3.11"))}],
    ids=["R", "another-python"],
)
def test_kernels_without_a_template_start_cold(kwargs: dict[str, str], tmp_path: Path) -> None:
    with KernelSession(tmp_path / "ws", **kwargs) as session:
        assert session.async_session.confinement.endswith("; start: cold"), session.async_session.confinement
        code = "cat(1 + 1)" if "kernel_name" in kwargs else "print(1 + 1)"
        assert session.execute(code).stdout.strip() == "2"
