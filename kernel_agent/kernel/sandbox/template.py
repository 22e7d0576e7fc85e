"""Kernels forked from a warmed template: the host's side of the templates.

Owns the template processes (``Template``: one per kernel kind, i.e. per interpreter and environment, started
once per host process in a bubblewrap sandbox of its own, ``bwrap.template_argv``, restarted when it has died
or its packages changed, retired when the host closes them). One forked kernel's start (the holder's sandbox,
``ForkedKernel``) is ``forked_kernel.py``'s; what runs in the template and in the child is
``inside/template.py``'s.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..._python import NEUTRAL_CWD, python_argv
from ..inside.handover import OWNER_ENV
from ..inside.template import MAX_MESSAGE
from .bwrap import missing_template_flags, require_bwrap, template_argv
from .forked_kernel import ForkedKernel, TemplateError, json_object

__all__ = [
    "PROVISIONER",
    "TEMPLATE_MODULE",
    "Template",
    "TemplateKey",
    "close_templates",
    "provisioner_metadata",
    "template_for",
]

log = logging.getLogger(__name__)

TEMPLATE_MODULE = "kernel_agent.kernel.inside.template"
PROVISIONER = "kernel-agent-template"  # the jupyter_client provisioner's entry point (pyproject)
_LOG_TAIL_BYTES = 4096  # of a template's log, what an error message quotes from its end
_READY_TIMEOUT_S = 120.0  # a template imports the whole stack: seconds on a loaded machine


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
            self._stop()  # its log too
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
                return json_object(message)
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
