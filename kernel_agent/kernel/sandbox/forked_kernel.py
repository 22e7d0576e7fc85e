"""One kernel forked from a template, on the host's side: the sandbox bwrap builds for it (the holder) and the
child made into a kernel inside it (``ForkedKernel``), checked before it is trusted (``check_confined``).

The holder is bwrap running ``HOLDER`` in the kernel's sandbox (the same view as a kernel started cold), in the
template's user namespace and the child's PID namespace (``namespace_files``, opened by the launch prefix at
``JOINED_FDS``); it says when the sandbox is whole (``holder_output``). The child then joins that sandbox
(``ForkedKernel.join``) and is, from then on, the handle jupyter_client signals and polls like a ``Popen``.

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
does, and the child, once it has stepped into it for good. The templates themselves are ``template.py``'s.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

from ...errors import SandboxUnavailableError
from ..inside.template import MAX_MESSAGE, NAMESPACES

__all__ = [
    "HOLDER",
    "INFO_FD",
    "JOINED_FDS",
    "KERNEL_PID",
    "TEMPLATE_PID",
    "ForkedKernel",
    "TemplateError",
    "check_confined",
    "fill_in",
    "holder_output",
    "json_object",
    "namespace_files",
]

# Run by bwrap in a forked kernel's sandbox: says the sandbox is whole, then waits for the host to let go.
HOLDER = ("/bin/sh", "-c", "echo ready; read -r _")
# In the holder's command, filled in by the provisioner: the template's pid, then the forked child's.
TEMPLATE_PID = "{template_pid}"
KERNEL_PID = "{kernel_pid}"
JOINED_FDS = (4, 5)  # where bwrap finds the template's user namespace and the child's PID namespace
INFO_FD = 6  # where bwrap writes its sandbox's pid: a copy of the holder's stdout (bwrap closes it after)
_CONFINED = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}


class TemplateError(SandboxUnavailableError):
    """A template could not start, died, or gave a kernel that is not confined as asked."""


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
        fds: list[int] = []
        try:  # each one opened inside: a sandbox gone half-way leaves none of them open
            for name in NAMESPACES:
                fds.append(os.open(f"/proc/{sandbox}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
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
        reply = json_object(self._channel.recv(MAX_MESSAGE)) if readable else {}
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
            report = json_object(message)
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


def json_object(message: bytes) -> dict[str, Any]:
    """``message`` as a JSON object. Raises ``TemplateError`` when it is not one."""
    try:
        value = json.loads(message)
    except ValueError as exc:
        raise TemplateError(f"not JSON: {message[:200]!r}") from exc
    if not isinstance(value, dict):
        raise TemplateError(f"not a JSON object: {message[:200]!r}")
    return value


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
    return json_object(info + b"}") if info else {}, rest.decode(errors="replace").strip()
