"""Kernels forked from a warmed template: the host's side.

Owns the template processes (``Template``: one per kernel kind, i.e. per interpreter and environment, started
once per host process in a bubblewrap sandbox of its own, ``bwrap.template_argv``, restarted when it has died
or its packages changed, retired when the host closes them) and one forked kernel's start (``ForkedKernel``:
the child the template forked, made into a kernel inside the sandbox the host built for it, and then the
handle jupyter_client signals and polls like a ``Popen``). What runs in the template and in the child is
``inside/template.py``'s.

A forked kernel's start, in order:

1. the template forks a child into a PID namespace of its own (its PID 1); the child's hello carries its
   credentials, so the host learns its pid;
2. the host builds the child's sandbox with bwrap, exactly as for a kernel started cold (``bwrap_argv``, the
   same view), but in the template's user namespace and the child's PID namespace (``--userns``,
   ``--pidns``), behind the same cgroup join, which moves the child into the kernel's cgroups too; bwrap runs a
   holder (``HOLDER``) that says when the sandbox is whole;
3. the host opens that sandbox's namespaces and root, lets the holder go, and hands them to the child with the
   kernel's folder, environment, stderr and system-call filter; the child joins them, drops every capability,
   takes a session of its own, sets no-new-privileges and loads the filter, then reports its confinement as
   Linux states it, which the host checks (``check_confined``) before it trusts the kernel;
4. the child runs the launcher (the kernel's rlimits, then ipykernel), as a kernel started cold does.

Everything a child sends is checked as data. The template never sees a workspace: only the holder's sandbox
does, and the child, once it has stepped into it for good.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..._python import NEUTRAL_CWD, python_argv
from ...errors import SandboxUnavailableError
from ..inside.handover import OWNER_ENV
from ..inside.template import MAX_MESSAGE, NAMESPACES
from .bwrap import missing_template_flags, require_bwrap, template_argv

__all__ = [
    "HOLDER",
    "INFO_FD",
    "JOINED_FDS",
    "KERNEL_PID",
    "PROVISIONER",
    "TEMPLATE_PID",
    "TEMPLATE_MODULE",
    "ForkedKernel",
    "Template",
    "TemplateError",
    "TemplateKey",
    "check_confined",
    "close_templates",
    "fill_in",
    "holder_output",
    "namespace_files",
    "provisioner_metadata",
    "template_for",
]

log = logging.getLogger(__name__)

TEMPLATE_MODULE = "kernel_agent.kernel.inside.template"
PROVISIONER = "kernel-agent-template"  # the jupyter_client provisioner's entry point (pyproject)
# Run by bwrap in a forked kernel's sandbox: says the sandbox is whole, then waits for the host to let go.
HOLDER = ("/bin/sh", "-c", "echo ready; read -r _")
# In the holder's command, filled in by the provisioner: the template's pid, then the forked child's.
TEMPLATE_PID = "{template_pid}"
KERNEL_PID = "{kernel_pid}"
JOINED_FDS = (4, 5)  # where bwrap finds the template's user namespace and the child's PID namespace
INFO_FD = 6  # where bwrap writes its sandbox's pid: a copy of the holder's stdout (bwrap closes it after)
_LOG_TAIL_BYTES = 4096  # of a template's log, what an error message quotes from its end
_READY_TIMEOUT_S = 120.0  # a template imports the whole stack: seconds on a loaded machine
_CONFINED = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}


class TemplateError(SandboxUnavailableError):
    """A template could not start, died, or gave a kernel that is not confined as asked."""


@dataclass(frozen=True)
class TemplateKey:
    """What makes one template serve a kernel: its interpreter, the environment it imports under (the
    kernel's allow-listed environment, no per-kernel value) and the host paths it reads."""

    interpreter: str
    env: tuple[tuple[str, str], ...]
    extra_read: tuple[str, ...] = ()

    @classmethod
    def make(cls, env: Mapping[str, str], extra_read: Iterable[Path] = ()) -> TemplateKey:
        return cls(sys.executable, tuple(sorted(env.items())), tuple(sorted(str(path) for path in extra_read)))

    def with_env(self, more: Mapping[str, str]) -> TemplateKey:
        """This key with ``more`` laid over its environment (a kernelspec's own: what its imports read)."""
        return TemplateKey(self.interpreter, tuple(sorted({**dict(self.env), **more}.items())), self.extra_read)


def namespace_files() -> tuple[tuple[int, str], ...]:
    """The namespaces the holder's sandbox joins: (descriptor, path) pairs the launch prefix opens."""
    userns, pidns = JOINED_FDS
    return ((userns, f"/proc/{TEMPLATE_PID}/ns/user"), (pidns, f"/proc/{KERNEL_PID}/ns/pid"))


def fill_in(holder: Sequence[str], template_pid: int, kernel_pid: int) -> list[str]:
    """The holder's command with the pids put in: only the arguments that are placeholders whole (the launch
    prefix's), so a path that happens to contain one (a data file's name) is left as it is."""
    (_, userns), (_, pidns) = namespace_files()
    given = {
        KERNEL_PID: str(kernel_pid),
        userns: userns.replace(TEMPLATE_PID, str(template_pid)),
        pidns: pidns.replace(KERNEL_PID, str(kernel_pid)),
    }
    return [given.get(arg, arg) for arg in holder]


def provisioner_metadata(key: TemplateKey, holder: list[str]) -> dict[str, object]:
    """A kernelspec's ``metadata`` entry that has jupyter_client fork its kernel from ``key``'s template."""
    config = {"holder": holder, "template_env": dict(key.env), "extra_read": list(key.extra_read)}
    return {"kernel_provisioner": {"provisioner_name": PROVISIONER, "config": config}}


def _packages_stamp() -> tuple[tuple[str, int], ...]:
    """When each folder the interpreter imports from last changed: a package installed or removed changes it."""
    stamp = []
    for entry in sys.path:
        if "-packages" not in entry:  # the script's own folder, the standard library: not where packages come and go
            continue
        try:
            stamp.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            continue
    return tuple(stamp)


class Template:
    """One template process and the socket only this host process holds to it. Thread-safe."""

    def __init__(self, key: TemplateKey) -> None:
        self.key = key
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._log: IO[bytes] | None = None  # its stderr: a file without a name
        self._stamp: tuple[tuple[str, int], ...] = ()
        self.pid: int | None = None  # the template's own process (inside bwrap), in the host's numbering
        self._inner: list[int] = []  # pidfds of the template and of bwrap's init above it (not our children)
        self.modules: list[str] = []
        self.starts = 0  # how often it was (re)started
        self._refused = ""  # why this template cannot serve here: not tried again for a minute (for good: cannot fork)
        self._refused_until = 0.0

    def __repr__(self) -> str:
        return f"<Template pid={self.pid} starts={self.starts}>"

    def fork(self, timeout: float) -> ForkedKernel:
        """A new child of the template, waiting for its orders. Starts (or restarts) the template first when
        it is not running or the packages changed. Raises ``TemplateError``."""
        with self._lock:
            if self._refused and time.monotonic() < self._refused_until:
                raise TemplateError(self._refused)
            if not self._alive() or self._stamp != _packages_stamp():
                self._stop()
                try:
                    self._start()
                except TemplateError as exc:  # each kernel would wait for it in vain: cold starts for a while
                    self._refused, self._refused_until = str(exc), max(self._refused_until, time.monotonic() + 60)
                    raise
            assert self._socket is not None
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
                socket.send_fds(self._socket, [b'{"op": "fork"}'], [theirs.fileno()])
                reply = self._receive(self._socket, timeout)
            except (OSError, TemplateError) as exc:
                ours.close()
                self._stop()
                raise TemplateError(f"the kernel template did not fork: {exc}") from exc
            finally:
                theirs.close()
        if not reply.get("forked"):
            ours.close()
            raise TemplateError(f"the kernel template did not fork: {reply.get('error', reply)}")
        return ForkedKernel.hello(ours, timeout)

    def alive(self) -> bool:
        with self._lock:
            return self._alive()

    def close(self) -> None:
        """Stop the template (the kernels it forked die with it). Idempotent."""
        with self._lock:
            self._stop()

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _start(self) -> None:
        binary = require_bwrap()
        missing = missing_template_flags(binary)
        if missing:
            raise TemplateError(f"{binary} lacks {', '.join(missing)}, which a forked kernel's sandbox needs")
        # Its log has no name (O_TMPFILE): nothing of a template's is left on disk, even when its owner is killed.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in _stop
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [
            *template_argv(binary, [Path(p) for p in self.key.extra_read]),
            *python_argv(TEMPLATE_MODULE, str(theirs.fileno())),
        ]
        try:  # from a thread that lives as long as this process: bwrap dies with the thread that started it
            self._process = _spawner().submit(_popen, argv, self.key.env, self._log, theirs.fileno()).result()
        except OSError as exc:
            ours.close()
            raise TemplateError(f"cannot start the kernel template: {exc}") from exc
        finally:
            theirs.close()
        self._socket = ours
        self._stamp = _packages_stamp()
        self.starts += 1
        try:
            ready = self._receive(ours, _READY_TIMEOUT_S)
        except TemplateError as exc:
            self._stop()
            raise TemplateError(f"the kernel template did not start: {exc}") from exc
        if not ready.get("ready"):
            self._stop()
            self._refused_until = float("inf")
            raise TemplateError(
                f"the kernel template cannot fork: it runs {ready.get('threads')} threads after its imports"
            )
        self.modules = [str(name) for name in ready.get("modules", [])]
        self.pid = _bwrap_child(self._process.pid)
        self._inner = _pidfds(self.pid)
        log.info("kernel template started (pid %s): %s", self.pid, ", ".join(self.modules))

    def _receive(self, sock: socket.socket, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TemplateError(f"no answer within {timeout:.0f} s{self._log_tail()}")
            readable, _, _ = select.select([sock], [], [], min(left, 0.5))
            if readable:
                message = sock.recv(MAX_MESSAGE)
                if not message:
                    raise TemplateError(f"the template ended{self._log_tail()}")
                return _json_object(message)
            if not self._alive():
                raise TemplateError(f"the template ended{self._log_tail()}")

    def _log_tail(self) -> str:
        if self._log is None:
            return ""
        try:
            size = os.fstat(self._log.fileno()).st_size
            text = os.pread(self._log.fileno(), _LOG_TAIL_BYTES, max(size - _LOG_TAIL_BYTES, 0)).decode(
                errors="replace"
            )
        except OSError:
            return ""
        lines = [line for line in text.splitlines() if line.strip()][-3:]
        return (": " + " | ".join(lines)) if lines else ""

    def _stop(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._process is not None:
            if self._process.poll() is None:
                try:
                    os.killpg(self._process.pid, signal.SIGKILL)
                except OSError:
                    self._process.kill()
            self._process.wait()
            self._process = None
        for pidfd in self._inner:  # they die with bwrap, a moment later: wait, so nothing of ours outlives close()
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            select.select([pidfd], [], [], 5)
            os.close(pidfd)
        self._inner = []
        self.pid = None
        if self._log is not None:
            self._log.close()
            self._log = None


class ForkedKernel:
    """A child of a template: made into a kernel by ``join``, then a ``Popen`` look-alike for jupyter_client
    (``poll``, ``wait``, ``send_signal``, ``kill``, ``terminate``, ``pid``, ``returncode``). Its exit status comes
    from the template, its parent; signals go through a pidfd, so a reused pid is never signalled."""

    stdin = stdout = stderr = None  # what jupyter_client closes after a wait

    def __init__(self, channel: socket.socket, pid: int) -> None:
        self._channel = channel
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = os.pidfd_open(pid)

    def __repr__(self) -> str:
        return f"<ForkedKernel pid={self.pid} returncode={self.returncode}>"

    @classmethod
    def hello(cls, channel: socket.socket, timeout: float) -> ForkedKernel:
        """Wait for a new child's hello: its pid, as Linux gives it in our numbering. Raises ``TemplateError``."""
        readable, _, _ = select.select([channel], [], [], timeout)
        message, ancillary, _, _ = channel.recvmsg(MAX_MESSAGE, socket.CMSG_SPACE(12)) if readable else (b"", [], 0, 0)
        pids = [
            struct.unpack("3i", data[:12])[0]
            for level, kind, data in ancillary
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
        ]
        if message != b"hello" or not pids:
            channel.close()
            raise TemplateError(f"the template's child did not say hello: {message[:200]!r}")
        return cls(channel, pids[0])

    def join(
        self,
        sandbox: int,
        *,
        cwd: str,
        env: Mapping[str, str],
        argv: Sequence[str],
        seccomp: bytes,
        stderr: int,
        timeout: float,
    ) -> None:
        """Hand the child the sandbox of process ``sandbox`` (its namespaces and root) and what makes it a
        kernel; return once it has stepped in for good and its confinement checked. Raises ``TemplateError``."""
        fds = [os.open(f"/proc/{sandbox}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC) for name in NAMESPACES]
        try:
            fds.append(os.open(f"/proc/{sandbox}/root", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            orders = {
                "namespaces": list(NAMESPACES),
                "cwd": cwd,
                "env": dict(env),
                "argv": list(argv),
                "seccomp": seccomp.hex(),
            }
            socket.send_fds(self._channel, [json.dumps(orders).encode()], [*fds, stderr])
        finally:
            for fd in fds:
                os.close(fd)
        readable, _, _ = select.select([self._channel], [], [], timeout)
        reply = _json_object(self._channel.recv(MAX_MESSAGE)) if readable else {}
        if "joined" not in reply:
            self.kill()  # the caller closes
            raise TemplateError(f"the forked kernel did not step into its sandbox: {reply.get('error', reply)}")
        check_confined(reply["joined"])

    # The Popen look-alike.
    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_status(block=False)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            readable, _, _ = select.select([self._channel], [], [], timeout)
            if not readable:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout or 0)
            self._read_status(block=True)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def close(self) -> None:
        """Let go of the channel and pidfd (the kernel is gone or left to its init's fate). Idempotent."""
        if self._channel.fileno() != -1:
            self._release()

    def _read_status(self, *, block: bool) -> None:
        try:
            message = self._channel.recv(MAX_MESSAGE, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            message = b""
        if message:
            report = _json_object(message)
            if "status" not in report:
                return  # a late word of the child's own: its end follows
            status = report["status"]
            self.returncode = os.waitstatus_to_exitcode(status) if isinstance(status, int) else 1
        else:  # the template is gone, and every kernel it forked with it
            self.returncode = -signal.SIGKILL
        self._release()

    def _release(self) -> None:
        self._channel.close()  # idempotent
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


def check_confined(status: object) -> None:
    """Raise ``TemplateError`` unless a forked kernel's init reports (``/proc/self/status``) itself confined before it
    forks the kernel: no capability in any set, no new privileges, the system-call filter loaded, PID 1 of its own
    namespace, uid 1000, the sandbox's root."""
    if not isinstance(status, dict):
        raise TemplateError(f"the forked kernel's report is not an object: {status!r}")
    problems = [name for name in _CONFINED if str(status.get(name, "")).strip("0") != ""]
    if str(status.get("NoNewPrivs")) != "1":
        problems.append("NoNewPrivs")
    if str(status.get("Seccomp")) != "2":
        problems.append("Seccomp")
    if str(status.get("NSpid", "")).split()[-1:] != ["1"]:
        problems.append("NSpid")
    if str(status.get("Uid", "")).split()[:1] != ["1000"]:
        problems.append("Uid")
    if status.get("root") != "/":
        problems.append("root")
    if problems:
        raise TemplateError(f"the forked kernel is not confined as asked ({', '.join(sorted(problems))}): {status}")


def _json_object(message: bytes) -> dict[str, Any]:
    try:
        value = json.loads(message)
    except ValueError as exc:
        raise TemplateError(f"not JSON: {message[:200]!r}") from exc
    if not isinstance(value, dict):
        raise TemplateError(f"not a JSON object: {message[:200]!r}")
    return value


def _bwrap_child(outer: int) -> int | None:
    """The process bwrap runs (the template), below ``outer``: bwrap's own PID-1 reaper sits between."""
    from .bwrap import sandboxed_pid

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = sandboxed_pid(outer)
        if found is not None:
            return found
        time.sleep(0.01)
    return None


def _popen(argv: list[str], env: Iterable[tuple[str, str]], log_file: IO[bytes], fd: int) -> subprocess.Popen[bytes]:
    """Start a template's bwrap (on ``_spawner``'s thread), in a session of its own, with ``fd`` (its socket) and
    the owner's pid, as a kernel started cold has it (its forked kernels show it in ``/proc/<pid>/environ``)."""
    return subprocess.Popen(
        argv,
        env={**dict(env), OWNER_ENV: str(os.getpid())},
        cwd=NEUTRAL_CWD,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log_file,
        pass_fds=(fd,),
        start_new_session=True,
    )


def _pidfds(template: int | None) -> list[int]:
    """Pidfds of the template process and of its parent (bwrap's init in its PID namespace)."""
    if template is None:
        return []
    try:
        parent = int(Path(f"/proc/{template}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        parent = None
    found = []
    for pid in (template, parent):
        if pid is not None:
            try:
                found.append(os.pidfd_open(pid))
            except OSError:
                continue
    return found


_SPAWNER: ThreadPoolExecutor | None = None


def _spawner() -> ThreadPoolExecutor:
    """The one thread templates are started from: bwrap's ``--die-with-parent`` watches the thread that started
    it, and this one lives as long as the process (a loop's worker thread may end before the template should)."""
    global _SPAWNER
    with _TEMPLATES_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-agent-template")
        return _SPAWNER


_TEMPLATES: dict[TemplateKey, Template] = {}
_TEMPLATES_LOCK = threading.Lock()


def template_for(key: TemplateKey) -> Template:
    """This process's template for ``key`` (made, not started: its first ``fork`` starts it)."""
    with _TEMPLATES_LOCK:
        if not _TEMPLATES:
            atexit.register(close_templates)  # their folders; the processes die with this one anyway
        template = _TEMPLATES.get(key)
        if template is None:
            template = _TEMPLATES[key] = Template(key)
        return template


def close_templates() -> None:
    """Stop every template of this process (at exit; their kernels die with them)."""
    with _TEMPLATES_LOCK:
        templates = list(_TEMPLATES.values())
        _TEMPLATES.clear()
    for template in templates:
        template.close()


def holder_output(stream: IO[bytes], deadline: float) -> tuple[dict[str, Any], str]:
    """bwrap's info (its sandbox's pid) and the holder's line, read from the holder's stdout by ``deadline``."""
    seen = b""
    while not seen.endswith(b"ready\n"):
        left = deadline - time.monotonic()
        readable, _, _ = select.select([stream], [], [], max(left, 0))
        chunk = os.read(stream.fileno(), 4096) if readable else b""
        if not chunk:
            break
        seen += chunk
    info, _, rest = seen.rpartition(b"}")
    return _json_object(info + b"}") if info else {}, rest.decode(errors="replace").strip()
