"""The kernel's system-call filter: which Linux interfaces model code may not reach.

Owns the rule table (``DENIED`` and the flag rules below), compiling it to a seccomp BPF program
with libseccomp (through ``pyseccomp``, ctypes over the system's ``libseccomp.so.2``), the program
shipped compiled for x86_64 (``seccomp-x86_64.bpf``: no libseccomp needed at start, and loading
libseccomp through ctypes costs a process 0.1-0.3 s; ``main`` rewrites it from the rules) and the
words for it. Does not own handing the program to bubblewrap (``bwrap.py``: ``--add-seccomp-fd``, which
bwrap loads just before it runs the kernel, after its own setup) or the launch command
(``kernelspec.py``).

The filter allows by default and refuses, with ``EPERM`` (never a kill: the analysed code gets an
``OSError`` and the kernel lives on), what container runtimes refuse an unprivileged container:
Docker's default profile and Flatpak's filter are the anchors. What it refuses is kernel code that
only makes sense to a privileged program or a root of its own namespaces, which is where the Linux
kernel's privilege-escalation bugs cluster (nf_tables and other namespace-gated code, io_uring,
keyrings, perf events, BPF):

* new namespaces: ``unshare`` and ``clone`` with any ``CLONE_NEW*`` flag, ``setns``; ``clone3``
  gets ``ENOSYS`` (its flags sit in memory a filter cannot read), so glibc falls back to ``clone``;
* 32-bit entry on a 64-bit host (i386 ``int 0x80``, x32 numbers): every call from an architecture
  other than the native one is refused, so no second, less-watched syscall table is reachable;
* ``personality`` with a flag that weakens address-space randomisation (``ADDR_NO_RANDOMIZE``,
  ``READ_IMPLIES_EXEC``, ``ADDR_COMPAT_LAYOUT``, ``MMAP_PAGE_ZERO``, the address limits); the
  query ``personality(0xffffffff)`` sets every bit and is refused too, as Flatpak refuses it;
* ``socket(AF_VSOCK)`` (a hypervisor's own channel, in no network namespace), and the
  ``TIOCSTI``/``TIOCLINUX`` ioctls (typing into a terminal);
* whole calls, by group: ``DENIED``.

``ptrace`` and ``process_vm_readv``/``writev`` stay allowed, as in Docker's profile on kernels
since 4.8 (a tracer can no longer change a call after the filter saw it): the sandbox's PID
namespace gives no process outside it a number the code could name, so it can trace its own
children (a debugger) and nothing else. Netlink sockets stay allowed (the network's own setup).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import logging
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from ...errors import SandboxUnavailableError

__all__ = [
    "DENIED",
    "FILTER_ID",
    "SECCOMP_FD",
    "Program",
    "compile_filter",
    "describe",
    "require_filter",
    "shipped_path",
]

log = logging.getLogger(__name__)

FILTER_ID = "kernel-agent/2"  # bump with any change to the rules
SECCOMP_FD = 3  # the descriptor the program reaches bwrap on (``Confinement.launch_prefix`` opens it there)
_HERE = Path(__file__).resolve().parent

# (what, why, calls): each refused whole, with EPERM.
DENIED: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "mounts",
        "rearranging the file system is what bwrap did once, before the code ran",
        (
            "mount",
            "umount",
            "umount2",
            "pivot_root",
            "chroot",
            "open_tree",
            "open_tree_attr",
            "move_mount",
            "fsopen",
            "fsconfig",
            "fsmount",
            "fspick",
            "mount_setattr",
        ),
    ),
    ("namespaces", "joining another namespace", ("setns",)),
    (
        "keyrings",
        "kernel keyrings: shared across namespaces, a long list of bugs",
        ("keyctl", "add_key", "request_key"),
    ),
    (
        "io_uring",
        "a second system-call interface that seccomp cannot see into",
        ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    ),
    (
        "kernel tracing and BPF",
        "performance counters, BPF programs and fault handlers: exploit primitives, no analysis need",
        ("perf_event_open", "bpf", "userfaultfd", "lookup_dcookie", "fanotify_init"),
    ),
    (
        "kernel code and machine state",
        "loading kernels and modules, accounting, swap, reboot, the kernel log, quotas, clocks, raw I/O",
        (
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "create_module",
            "get_kernel_syms",
            "query_module",
            "acct",
            "swapon",
            "swapoff",
            "reboot",
            "syslog",
            "quotactl",
            "quotactl_fd",
            "nfsservctl",
            "_sysctl",
            "sysfs",
            "ustat",
            "uselib",
            "vhangup",
            "iopl",
            "ioperm",
            "modify_ldt",
            "settimeofday",
            "stime",
            "clock_settime",
            "sethostname",
            "setdomainname",
        ),
    ),
    (
        "other processes' files and memory layout",
        "file handles that skip path checks, comparing or taking another process's files, NUMA moves",
        (
            "open_by_handle_at",
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "mbind",
            "get_mempolicy",
            "set_mempolicy",
            "set_mempolicy_home_node",
            "move_pages",
            "migrate_pages",
        ),
    ),
)

# Calls newer than some libseccomp releases know by name; numbered alike on every architecture since 5.1.
_UNIFIED_NUMBERS = {"open_tree_attr": 467, "set_mempolicy_home_node": 450}

_CLONE_NAMESPACES = {  # linux/sched.h
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
_CLONE_NEWTIME = 0x00000080  # unshare only: in clone's flags these bits are the exit signal
_WEAK_ASLR = {  # linux/personality.h
    "ADDR_NO_RANDOMIZE": 0x0040000,
    "MMAP_PAGE_ZERO": 0x0100000,
    "ADDR_COMPAT_LAYOUT": 0x0200000,
    "READ_IMPLIES_EXEC": 0x0400000,
    "ADDR_LIMIT_32BIT": 0x0800000,
    "ADDR_LIMIT_3GB": 0x8000000,
}
_AF_VSOCK = 40
# seccomp hands a filter all 64 bits of each argument; Linux reads an ``int`` argument (socket's family,
# ioctl's request) as its low 32. A rule on such a value compares those bits only, or ``(1 << 32) | 40``
# passes the filter and still makes an AF_VSOCK socket. Flag rules (clone, unshare, personality) test
# single low bits, which the high ones cannot hide.
_INT_BITS = 0xFFFFFFFF
_TERMINAL_IOCTLS = {"TIOCSTI": 0x5412, "TIOCLINUX": 0x541C}

_INSTALL_HINT = (
    "install libseccomp (Debian/Ubuntu: apt-get install libseccomp2; Fedora: dnf install libseccomp) "
    "and the pyseccomp package (pip install pyseccomp), or run unconfined on purpose with sandbox='off' "
    "(--sandbox off)"
)


@dataclass(frozen=True)
class Program:
    """A compiled filter: the BPF ``code`` bwrap loads, where it comes from (``source``: the program
    shipped with the package for this architecture, or libseccomp here), and the calls the libseccomp
    that compiled it did not know by name (``unknown``: newer than it; refused by number where fixed)."""

    code: bytes
    source: str
    unknown: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.code).hexdigest()[:12]


def describe() -> str:
    """The filter in words, for the confinement line (notebook metadata, events)."""
    return (
        f"seccomp filter {FILTER_ID} (EPERM for new namespaces, mounts, keyrings, io_uring, perf and BPF, "
        "kernel modules, 32-bit calls)"
    )


def shipped_path(machine: str | None = None) -> Path:
    """Where the package keeps the compiled program for ``machine`` (``platform.machine()``)."""
    return _HERE / f"seccomp-{machine or platform.machine()}.bpf"


def require_filter() -> Program:
    """The filter for this machine: the program shipped for its architecture (x86_64), else compiled
    here with libseccomp. Raises ``SandboxUnavailableError`` naming what to install when neither can
    be had. Once per process."""
    try:
        return _program()
    except (ImportError, RuntimeError, OSError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        raise SandboxUnavailableError(
            f"the kernel sandbox's system-call filter is not shipped for {platform.machine()} and needs "
            f"libseccomp to be built here, which cannot be used ({exc}): {_INSTALL_HINT}"
        ) from exc


@functools.lru_cache(maxsize=1)
def _program() -> Program:
    shipped = shipped_path()
    try:
        return Program(shipped.read_bytes(), f"shipped ({shipped.name})")
    except FileNotFoundError:
        return compile_filter()


def compile_filter() -> Program:
    """The rules compiled for this machine's architecture with libseccomp (through ``pyseccomp``).
    Raises ``RuntimeError``/``ImportError`` when libseccomp or pyseccomp is missing."""
    import pyseccomp as sc  # type: ignore[import-untyped]  # RuntimeError at import without libseccomp

    refuse = sc.ERRNO(errno.EPERM)
    rules = sc.SyscallFilter(sc.ALLOW)
    rules.set_attr(sc.Attr.ACT_BADARCH, refuse)  # i386 and x32 calls on x86_64 (only the native arch is added)
    rules.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree over call numbers, not a list
    unknown = []
    for _, _, names in DENIED:
        for name in names:
            number = sc.resolve_syscall(sc.Arch.NATIVE, name)
            if number == -1:  # __NR_SCMP_ERROR: newer than this libseccomp
                unknown.append(name)
                if name not in _UNIFIED_NUMBERS:
                    continue
                number = _UNIFIED_NUMBERS[name]
            rules.add_rule(refuse, number)  # a negative number: a call this arch does not have; ignored
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for flag in _CLONE_NAMESPACES.values():  # rules OR: any one namespace flag refuses the call
        rules.add_rule(refuse, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        rules.add_rule(refuse, "unshare", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    rules.add_rule(refuse, "unshare", sc.Arg(0, sc.MASKED_EQ, _CLONE_NEWTIME, _CLONE_NEWTIME))
    for flag in _WEAK_ASLR.values():
        rules.add_rule(refuse, "personality", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    rules.add_rule(refuse, "socket", sc.Arg(0, sc.MASKED_EQ, _INT_BITS, _AF_VSOCK))
    for request in _TERMINAL_IOCTLS.values():
        rules.add_rule(refuse, "ioctl", sc.Arg(1, sc.MASKED_EQ, _INT_BITS, request))
    memory = os.memfd_create("kernel-agent-seccomp", os.MFD_CLOEXEC)
    try:
        with os.fdopen(memory, "w+b", closefd=False) as out:
            rules.export_bpf(out)
            out.seek(0)
            code = out.read()
    finally:
        os.close(memory)
    return Program(code, f"compiled here (libseccomp, API level {sc.get_api()})", tuple(unknown))


def main() -> None:
    """Write this architecture's shipped program from the rules: ``python -m kernel_agent.kernel.sandbox.seccomp``
    (run after changing a rule, with ``FILTER_ID`` bumped; ``tests/test_seccomp.py`` checks the two agree)."""
    program = compile_filter()
    shipped_path().write_bytes(program.code)
    log.warning("wrote %s (%d bytes, sha256 %s)", shipped_path(), len(program.code), program.digest)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
