"""The warmed template: imports the analysis stack once, then forks each kernel into a sandbox of its own.

``python -I /abs/kernel_agent/_boot.py kernel_agent.kernel.inside.template FD``, started by the host
(``sandbox/template.py``) inside a bubblewrap sandbox of its own: no workspace, no network, a user namespace
in which it holds ``CAP_SYS_ADMIN``, ``CAP_SYS_CHROOT`` and ``CAP_SETPCAP`` (what its children need to step
into their sandbox, then drop) and nothing else. It imports the stack (``WARM``), starts no event loop, no ZMQ
context and no thread (the numeric libraries are held to one thread until after the fork), freezes what it
imported out of the garbage collector's reach (``gc.freeze``: its pages stay shared), says ``ready`` and serves
the one socket it inherited (``FD``: no path, only the host holds the other end).

A request is one message ``{"op": "fork"}`` carrying a socket (the kernel's channel). The template forks a
child into a new PID namespace (its PID 1) and answers ``{"forked": true}``; the child says hello on the
channel (its credentials tell the host its pid), then waits there for the sandbox the host built
(``become_kernel``), steps into it, and forks the kernel (PID 2, ``_kernel``) whose init it stays (``_init``), as
bwrap's init is for a kernel started cold: PID 1 of a namespace ignores the signals it has no handler for, which
a kernel must not (``SIGXCPU`` at its CPU limit, its own ``SIGKILL``). The template never reads or runs anything
the child is sent. When a child ends, the template writes its wait status on the child's channel and closes it.

Standard library only (``ctypes`` for ``setns``, ``unshare``, ``chroot``, ``capset`` and ``prctl``), like all
of ``inside/``.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
from collections.abc import Sequence

__all__ = ["KernelOrders", "WARM", "become_kernel", "main"]

# What the template imports, in order: the kernel itself, then the analysis stack (each only if installed).
WARM = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "IPython.core.completerlib",  # what the kernel app's initialize imports, when the template has not
    "IPython.core.debugger",
    "IPython.core.oinspect",
    "IPython.extensions.storemagic",
    "IPython.utils.wildcard",
    "tornado.platform.asyncio",
    "IPython.core.interactiveshell",
    "numpy",
    "pandas",
    "pyarrow",
    "matplotlib",
    "matplotlib.pyplot",
    "seaborn",
    "scipy.stats",
    "sklearn",
    "threadpoolctl",
)
# The template's own settings, before it imports: the numeric libraries at one thread (a thread does not survive
# a fork; the kernel gets its own count back, ``_threads_back``) and Arrow's jemalloc without its background
# thread (Arrow allocates with mimalloc by default; jemalloc's purging thread stays off in the kernels too).
TEMPLATE_SETTINGS = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}
MAX_MESSAGE = 1 << 20
NAMESPACES = ("mnt", "net", "ipc", "uts", "cgroup")  # joined in this order (the mount namespace first)

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWPID = 0x20000000
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CAPABILITY_VERSION_3 = 0x20080522


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


class KernelOrders:
    """What the host sends a forked child to make it a kernel: the namespaces' names (their descriptors
    arrive beside, in that order, then the sandbox's root, then the kernel's stderr), its folder, environment,
    system-call filter and the launcher's arguments. Raises ``ValueError`` for anything else."""

    def __init__(self, text: bytes) -> None:
        orders = json.loads(text)
        if not isinstance(orders, dict):
            raise ValueError("orders are not a JSON object")
        self.namespaces = [str(name) for name in orders["namespaces"]]
        if any(name not in NAMESPACES for name in self.namespaces):
            raise ValueError(f"unknown namespace in {self.namespaces}")
        self.cwd = str(orders["cwd"])
        self.env = {str(k): str(v) for k, v in dict(orders["env"]).items()}
        self.argv = [str(arg) for arg in orders["argv"]]
        self.seccomp = bytes.fromhex(str(orders["seccomp"]))
        if len(self.seccomp) % 8 or not self.seccomp:
            raise ValueError("the system-call filter is not a whole BPF program")


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    host = socket.socket(fileno=int(args[0]))
    os.set_inheritable(host.fileno(), False)
    _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "become the children's reaper")
    warmed = _warm()
    gc.collect()
    gc.freeze()  # what is imported stays out of the collector's passes: its pages are not written to again
    threads = len(os.listdir("/proc/self/task"))
    host.send(json.dumps({"ready": threads == 1, "threads": threads, "modules": warmed}).encode())
    if threads != 1:
        return  # a fork would copy a process whose other threads are gone mid-work: the host starts kernels cold
    _serve(host)


def _warm() -> list[str]:
    os.environ.update(TEMPLATE_SETTINGS)
    warmed = []
    for name in WARM:
        try:
            importlib.import_module(name)
        except Exception:
            continue
        warmed.append(name)
    return warmed


def _serve(host: socket.socket) -> None:
    """Answer fork requests until the host closes its end; report each child's end on its channel."""
    wake_read, wake_write = socket.socketpair()
    wake_read.setblocking(False)
    wake_write.setblocking(False)
    signal.set_wakeup_fd(wake_write.fileno())
    signal.signal(signal.SIGCHLD, lambda *_: None)
    channels: dict[int, socket.socket] = {}  # child pid -> its channel (the template's copy)
    selector = selectors.DefaultSelector()
    selector.register(host, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is wake_read:
                _drain(wake_read)
                _reap(channels)
                continue
            message, fds, _, _ = socket.recv_fds(host, MAX_MESSAGE, 4)
            if not message:
                for fd in fds:
                    os.close(fd)
                return
            channel = socket.socket(fileno=fds[0]) if len(fds) == 1 else None
            for fd in fds[1:]:
                os.close(fd)
            if channel is None:
                host.send(json.dumps({"error": "a fork request carries one socket"}).encode())
                continue
            try:
                pid = _fork(channel)
            except OSError as exc:
                channel.close()
                host.send(json.dumps({"error": str(exc)}).encode())
                continue
            channels[pid] = channel
            host.send(json.dumps({"forked": True}).encode())


def _drain(wake: socket.socket) -> None:
    try:
        while wake.recv(4096):
            pass
    except BlockingIOError:
        pass


def _reap(channels: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel = channels.pop(pid, None)
        if channel is not None:
            try:
                channel.send(json.dumps({"status": status}).encode())
            except OSError:
                pass  # the host has let go of this kernel
            channel.close()


def _fork(channel: socket.socket) -> int:
    """Fork a child into a PID namespace of its own (through a go-between that makes the namespace and exits at
    once, so the child is ours, the reaper's); return its pid. In the child, never return (``_child``)."""
    pid_read, pid_write = os.pipe()
    between = os.fork()
    if between == 0:
        code = 1
        try:
            os.close(pid_read)
            _check(_libc.unshare(_CLONE_NEWPID), "make a PID namespace")
            pid = os.fork()
            if pid == 0:
                _become_child(channel)
            os.write(pid_write, struct.pack("i", pid))
            code = 0
        finally:
            os._exit(code)
    os.close(pid_write)
    try:
        _, status = os.waitpid(between, 0)
        told = os.read(pid_read, 4)
    finally:
        os.close(pid_read)
    if status != 0 or len(told) != 4:
        raise OSError(errno.ECHILD, f"the fork's go-between failed (status {status})")
    return int(struct.unpack("i", told)[0])


def _become_child(channel: socket.socket) -> None:
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _keep_only(channel.fileno())  # the template's socket, and other kernels' channels, stay the template's
        code = _child(channel)
    except BaseException as exc:
        try:
            channel.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def _keep_only(channel: int) -> None:
    """Close every descriptor the template had open but stdio and ``channel``: the host's socket, the wake-up pair,
    the selector, every other kernel's channel (which would let this one report a sibling dead)."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != channel:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, closed by now


def _child(channel: socket.socket) -> int:
    """PID 1 of the new namespace: say hello with our credentials, take the orders, step into the sandbox, then fork
    the kernel (PID 2) and be its init, as bwrap's is for a kernel started cold; the exit code when it ends."""
    credentials = struct.pack("3i", os.getpid(), os.getuid(), os.getgid())
    channel.sendmsg([b"hello"], [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, credentials)])
    message, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, len(NAMESPACES) + 2)
    if not message:
        return 1
    # The go-between has exited (the template answered the host only after reaping it): our parent is the template.
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "die with the template")
    orders = KernelOrders(message)
    if len(fds) != len(orders.namespaces) + 2:
        raise ValueError(f"expected {len(orders.namespaces) + 2} descriptors, got {len(fds)}")
    become_kernel(orders, fds[: len(orders.namespaces)], fds[-2], fds[-1])
    channel.send(json.dumps({"joined": _status()}).encode())
    kernel = os.fork()
    if kernel == 0:
        channel.close()
        os._exit(_kernel(orders))
    channel.close()
    return _init(kernel)


def _kernel(orders: KernelOrders) -> int:
    """PID 2: the kernel itself, in a session of its own; its exit code."""
    _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "die with its init")
    os.setsid()
    _fresh_state(orders.env)
    from . import launcher

    try:
        launcher.main(orders.argv)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return 0


def _init(kernel: int) -> int:
    """Reap every process of the namespace until the kernel ends; then end, as bwrap's init does (128 + N for a
    kernel killed by signal N), which ends everything left in the namespace. Termination signals go to the kernel."""
    for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(number, lambda received, _: _forward(kernel, received))
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if pid == kernel:
            code = os.waitstatus_to_exitcode(status)
            return code if code >= 0 else 128 - code


def _forward(kernel: int, number: int) -> None:
    try:
        os.kill(kernel, number)
    except OSError:
        pass


def become_kernel(orders: KernelOrders, namespaces: Sequence[int], root: int, stderr: int) -> None:
    """Step into the sandbox the host built, for good: join its namespaces, take its root and folder, drop every
    capability, no new privileges, the system-call filter. Raises ``OSError``."""
    for name, fd in zip(orders.namespaces, namespaces, strict=True):
        _check(_libc.setns(fd, 0), f"join the {name} namespace")
        os.close(fd)
    os.fchdir(root)
    _check(_libc.chroot(b"."), "take the sandbox's root")
    os.close(root)
    os.chdir(orders.cwd)
    os.dup2(stderr, 2)
    os.close(stderr)
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    _drop_capabilities()
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "set no_new_privs")
    _load_filter(orders.seccomp)


def _drop_capabilities() -> None:
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != errno.EINVAL:
            _check(-1, f"drop capability {cap} from the bounding set")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear the ambient capabilities")
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable x 2: all zero
    _check(_libc.capset(header, data), "drop every capability")


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def _load_filter(program: bytes) -> None:
    count = len(program) // 8
    instructions = (_SockFilter * count).from_buffer_copy(program)
    fprog = _SockFprog(count, instructions)
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "load the filter")


def _status() -> dict[str, str]:
    """The confinement the kernel is in, as Linux reports it: what the host checks before it trusts the start."""
    wanted = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Uid", "NSpid")
    with open("/proc/self/status", encoding="ascii") as status:
        fields = dict(line.split(":", 1) for line in status.read().splitlines() if ":" in line)
    found = {name: fields.get(name, "").strip() for name in wanted}
    found["root"] = os.readlink("/proc/self/root")
    return found


def _fresh_state(env: dict[str, str]) -> None:
    """What the template's imports fixed that must be this kernel's own: its environment, random states,
    temporary names, multiprocessing's key and the numeric libraries' thread counts (str hashing stays shared)."""
    os.environ.clear()
    os.environ.update(env)
    import random
    import tempfile

    random.seed()
    setattr(tempfile, "_name_sequence", None)  # noqa: B010 - private: reseeded at its next use
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        process.current_process().authkey = os.urandom(32)
    _threads_back(env)


def _threads_back(env: dict[str, str]) -> None:
    """Give the numeric libraries the thread count a kernel started cold would have."""
    try:
        wanted = int(env.get("OMP_NUM_THREADS") or env.get("OPENBLAS_NUM_THREADS") or 0) or os.cpu_count() or 1
    except ValueError:
        wanted = os.cpu_count() or 1
    if "numpy" in sys.modules:
        try:
            from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

            threadpool_limits(limits=wanted)
        except Exception:
            pass
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.set_cpu_count(wanted)


if __name__ == "__main__":
    main()
