"""Pytest plugin: the suite must leave no kernel process, connection file, temp dir (a live source broker's
socket folder, ``kernel-agent-sql-*``, included), live source's database connection or TCP socket for the
garbage collector behind, and every test runs in a clean environment (no model settings leak in from the
developer's shell).

A socket only the garbage collector closes fails some later test at random: the collector finalizes a
cycle's objects in no set order, so when the socket goes before the client that would have closed it, it
warns ``unclosed <socket.socket ...>`` (an error here) during whichever test the collection fell in. So a
module's end with a TCP socket it opened still open collects the garbage itself and names the sockets that
closed (``sockets_for_the_collector``), and ``closed_by_their_owners`` checks one block with the collector off."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import postgres
import psutil
import pytest

from kernel_agent.kernel.providers.runtime import runtime_root
from kernel_agent.kernel.sandbox.template import TEMPLATE_MODULE, close_templates

if TYPE_CHECKING:
    from psutil._ntuples import pconn

_ENV_PREFIXES = ("OPENAI_", "KERNEL_AGENT_")
_ROOT_VARIABLE = "KERNEL_TESTS_TEMP_ROOT"
_JUPYTER_RUNTIME = "jupyter-runtime"
_SHARED_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")  # where runtime_root() may send runtime dirs
_ROOT_KEY = pytest.StashKey[Path]()


def kernels_of(owner: int) -> list[int]:
    """Kernel processes whose JPY_PARENT_PID is ``owner`` (jupyter_client sets it on every kernel,
    and on the bwrap around a sandboxed one), or whose KERNEL_AGENT_OWNER is (a kernel in a sandbox)."""
    marked = _marked({f"JPY_PARENT_PID={owner}".encode(), f"KERNEL_AGENT_OWNER={owner}".encode()})
    # What else runs in a template's own PID namespace is the template's too: the go-between of each fork (whose
    # command line reads empty while it forks) and what its imports run once (``uname -p``).
    templates = {_pid_namespace(pid) for pid in marked if is_template(pid)} - {_pid_namespace(os.getpid()), None}
    return [
        pid for pid in marked if not is_template(pid) and _pid_namespace(pid) not in templates and not process_gone(pid)
    ]


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _marked(markers: set[bytes]) -> list[int]:
    """Running processes whose start-up environment holds one of ``markers``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if markers.intersection(environ) and not process_gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def is_template(pid: int) -> bool:
    """Whether ``pid`` is a kernel template (``sandbox/template.py``) or its bwrap, which live as long as the process
    that started them: its forked kernels share its command line and environment, but each (its init, PID 1, and
    the kernel below it) runs in a namespace below the template's (three numbers or more in ``NSpid``)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
    return TEMPLATE_MODULE.encode() in command and len(nspid) < 3


def our_kernel_pids() -> list[int]:
    """Kernel processes started by this test process."""
    return kernels_of(os.getpid())


def process_gone(pid: int) -> bool:
    """True once ``pid`` no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


SOURCE_APPLICATION = "kernel-agent"  # the application_name every live source's connection gives


def source_connections(wait_s: float = 10.0) -> list[str]:
    """The live sources' connections open on the PostgreSQL servers this process started, once those closing
    have ended (up to ``wait_s``: ``PostgresServer.connections``)."""
    return [found for server in postgres.RUNNING for found in server.connections(SOURCE_APPLICATION, wait_s)]


def tcp_sockets() -> dict[int, str]:
    """This process's TCP sockets: descriptor → its addresses (``_described``)."""
    return {found.fd: _described(found) for found in psutil.Process().net_connections("tcp")}


def _described(found: pconn) -> str:
    """A socket's addresses: ``host:port -> host:port``, or ``host:port listening``."""
    local = f"{found.laddr.ip}:{found.laddr.port}"
    return f"{local} -> {found.raddr.ip}:{found.raddr.port}" if found.raddr else f"{local} listening"


def sockets_for_the_collector(earlier: dict[int, str]) -> list[str]:
    """The TCP sockets opened since ``earlier`` (``tcp_sockets()`` then) that a garbage collection closes now:
    open before it, closed by it (a socket of an object nothing refers to any more, which its owner never
    closed). No collection when none is open (a whole one takes a third of a second in a test process). What
    the collection's finalizers warn is reported as ever (an error, with the test whose teardown this is)."""
    opened = {fd: where for fd, where in tcp_sockets().items() if earlier.get(fd) != where}
    if not opened:
        return []
    gc.collect()
    after = tcp_sockets()
    return sorted(where for fd, where in opened.items() if after.get(fd) != where)


@contextmanager
def closed_by_their_owners() -> Iterator[None]:
    """Run the block with the garbage collector off, then fail if a TCP connection it opened (from this
    process to a port this process does not listen on: a server here closes its side in its own time) is
    still open: one its owner did not close, which only the collector would."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        before = tcp_sockets()
        yield
        now = psutil.Process().net_connections("tcp")
        listening = {found.laddr.port for found in now if not found.raddr}
        left = [
            _described(found)
            for found in now
            if found.raddr and found.laddr.port not in listening and before.get(found.fd) != _described(found)
        ]
        assert not left, f"TCP connections left open for the garbage collector: {left}"
    finally:
        if enabled:
            gc.enable()


def _own_temp_root() -> Path:
    """The temp root of this test process (``pytest_configure``)."""
    return Path(os.environ[_ROOT_VARIABLE])


def temp_leftovers() -> set[str]:
    """Runtime dirs and jupyter connection files in this process's own temp root (whoever made them: only
    this test process and what it started write there), and runtime dirs that ``runtime_root()`` sent to a
    shared short dir (a test's long TMPDIR), attributed there by their owner file."""
    own = _own_temp_root()
    ours = {p.name for folder in (own, own / _JUPYTER_RUNTIME) for p in folder.glob("kernel-*.json")}
    ours.update(folder.name for folder in own.glob("kernel-agent-*"))
    me = str(os.getpid())
    for folder in (found for root in _SHARED_ROOTS for found in Path(root).glob("kernel-agent-*")):
        if folder.name.startswith("kernel-agent-replay-"):  # kernel-agent-replay-<pid>-<random>
            ours.update([folder.name] if folder.name.split("-")[3] == me else [])
            continue
        try:  # another process's dir without an owner file (a tempfile dir, or not yet renamed) is not ours:
            owner = (folder / "owner.pid").read_text()  # ours are made under their name with that file in them
        except OSError:
            continue
        if owner == me:
            ours.add(folder.name)
    return ours


def pytest_configure(config: pytest.Config) -> None:
    """Give this test process (the serial run, or each pytest-xdist worker) a temp root of its own: TMPDIR and
    JUPYTER_RUNTIME_DIR point into it, for this process and every process it starts, so runs side by side
    (``pytest -n 2``, or two engineers' runs) never see each other's temp dirs in the leak checks. It sits
    in a short dir (``runtime_root()``) so that kernels' ipc socket paths still fit. Under pytest-xdist the
    controller's root holds its workers' roots (they inherit its TMPDIR), and goes with the run. pytest's own
    ``tmp_path`` dirs stay where they were (kept for a look after a failure, as pytest does)."""
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    root = Path(tempfile.mkdtemp(prefix=f"tests-{worker}-", dir=runtime_root()))
    root.chmod(0o711)  # others may pass through to what is theirs in it (PostgreSQL's user to its cluster)
    (root / _JUPYTER_RUNTIME).mkdir()
    os.environ.update(
        {_ROOT_VARIABLE: str(root), "TMPDIR": str(root), "JUPYTER_RUNTIME_DIR": str(root / _JUPYTER_RUNTIME)}
    )
    tempfile.tempdir = None  # tempfile caches the temp dir: read TMPDIR again
    config.stash[_ROOT_KEY] = root


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this process's temp root (the session's leak check has looked at it)."""
    root = config.stash.get(_ROOT_KEY, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def no_leftovers() -> Iterator[None]:
    before = temp_leftovers()
    yield
    close_templates()  # they live as long as this process; closed, nothing of theirs may remain
    templates = [pid for pid in _marked({f"KERNEL_AGENT_OWNER={os.getpid()}".encode()}) if is_template(pid)]
    assert not templates, f"kernel templates left running after the suite: {templates}"
    leaked = our_kernel_pids()
    assert not leaked, f"kernel processes left running after the suite: {leaked}"
    new_files = temp_leftovers() - before
    assert not new_files, f"temp files/dirs left behind by the suite: {sorted(new_files)}"


@pytest.fixture(scope="module", autouse=True)
def no_leftovers_per_module(request: pytest.FixtureRequest) -> Iterator[None]:
    """The same check at the end of each module (after its own fixtures are torn down), so a leak
    names the module that made it rather than whichever test happened to run last."""
    kernels_before = set(our_kernel_pids())
    files_before = temp_leftovers()
    sockets_before = tcp_sockets()
    yield
    leaked = set(our_kernel_pids()) - kernels_before
    assert not leaked, f"{request.module.__name__} left kernel processes running: {sorted(leaked)}"
    new_files = temp_leftovers() - files_before
    assert not new_files, f"{request.module.__name__} left temp files/dirs behind: {sorted(new_files)}"
    connections = source_connections()
    assert not connections, f"{request.module.__name__} left live source connections open: {connections}"
    collected = sockets_for_the_collector(sockets_before)
    assert not collected, f"{request.module.__name__} left TCP sockets for the garbage collector: {collected}"


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES):
            monkeypatch.delenv(name)
