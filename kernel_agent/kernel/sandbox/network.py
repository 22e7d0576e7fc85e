"""The sandbox's network when it is on: a namespace of its own behind user-mode networking (``pasta``).

With the network on (``--network``), the kernel reaches the outside world through ``pasta`` (Debian's
``passt`` package), which gives the sandbox's network namespace a copy of the host's addresses and
routes and relays its connections through ordinary sockets of the host. What it must never reach is
this machine's own services, so every way back is closed: no port is forwarded either way
(``-t/-u/-T/-U none``: by default pasta relays a connection to the namespace's 127.0.0.1 to the host's
loopback) and the gateway is not mapped to the host (``--no-map-gw``). Inside, 127.0.0.1 is the
sandbox's own loopback. ``pasta_launch.py`` (standard library only, its own process) starts bwrap,
attaches pasta and lets the kernel run. With the network off, bubblewrap's own empty namespace is
used (``bwrap.py``); without the sandbox, the host's network is shared as it is.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

from ...errors import SandboxUnavailableError
from . import pasta_launch

__all__ = ["network_prefix", "require_pasta"]

_INSTALL_HINT = (
    "--network needs pasta, from the passt package (Debian/Ubuntu: apt-get install passt; Fedora: "
    "dnf install passt), so the kernel has a network of its own and not this machine's loopback; "
    "or leave the network off"
)


def network_prefix(pasta: str) -> list[str]:
    """What goes before ``bwrap ...`` so the sandbox gets its own network behind ``pasta``."""
    return [sys.executable, "-I", "-S", str(Path(pasta_launch.__file__)), pasta, "--"]


def require_pasta(bwrap: Path) -> str:
    """The ``pasta`` to use, checked to work here with ``bwrap``. Raises ``SandboxUnavailableError``
    naming the package."""
    binary = shutil.which("pasta")
    if binary is None:
        raise SandboxUnavailableError(f"pasta is not installed: {_INSTALL_HINT}")
    problem = _probe(binary, str(bwrap))
    if problem:
        raise SandboxUnavailableError(f"{binary} cannot give the sandbox a network here ({problem}): {_INSTALL_HINT}")
    return binary


@functools.lru_cache(maxsize=2)
def _probe(pasta: str, bwrap: str) -> str:
    """ "" when a sandbox gets its network here, else the complaint. Cached per process."""
    sandbox = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "/bin/true",
    ]
    try:
        done = subprocess.run([*network_prefix(pasta), *sandbox], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.decode(errors="replace").splitlines() if "syslog" not in line]
    return "; ".join(lines[-3:]) or f"exit {done.returncode}"
