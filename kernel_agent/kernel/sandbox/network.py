"""The sandbox's network when it is on: a namespace of its own behind user-mode networking (``pasta``).

With the network on (``--network``), the kernel reaches the outside world through ``pasta`` (Debian's
``passt`` package), which gives the sandbox's network namespace a copy of the host's addresses and
routes and relays its connections through ordinary sockets of the host. What it must never reach is
this machine's own services, so every way back is closed: no port is forwarded either way
(``-t/-u/-T/-U none``: by default pasta relays a connection to the namespace's 127.0.0.1 to the host's
loopback), the gateway is not mapped to the host (``--no-map-gw``), and ``nft`` rules in the
namespace, set before the kernel runs, reject every packet to an address this machine has when the
kernel starts (a second interface, a container bridge: pasta would relay to them). Inside, 127.0.0.1
is the sandbox's own loopback. Without ``nft`` and ``nsenter`` (or the right to use them: the host
user must be root) ``--network`` refuses to start: it cannot keep the kernel off this machine.
``pasta_launch.py`` (standard library only, its own process) starts bwrap, attaches pasta, sets the
rules and lets the kernel run. With the network off, bubblewrap's own empty namespace is
used (``bwrap.py``); without the sandbox, the host's network is shared as it is.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

from ..._python import script_argv
from ...errors import SandboxUnavailableError
from . import pasta_launch
from .bwrap import probe_sandbox

__all__ = ["NetworkTools", "network_prefix", "require_pasta"]

NetworkTools = tuple[str, str, str]  # pasta, nsenter, nft

_FENCE_HINT = (
    "--network needs nft (Debian/Ubuntu: apt-get install nftables; Fedora: dnf install nftables) and nsenter "
    "(util-linux) to keep the kernel off this machine's own addresses; or leave the network off"
)
_INSTALL_HINT = (
    "--network needs pasta, from the passt package (Debian/Ubuntu: apt-get install passt; Fedora: "
    "dnf install passt), so the kernel has a network of its own and not this machine's loopback; "
    "or leave the network off"
)


def network_prefix(tools: NetworkTools) -> list[str]:
    """What goes before ``bwrap ...`` so the sandbox gets its own network behind pasta, fenced off this machine
    (``tools``: ``require_pasta``'s)."""
    return script_argv(pasta_launch.__file__, *tools, "--", site=False)  # standard library only


def require_pasta(bwrap: Path) -> NetworkTools:
    """The ``pasta``, ``nsenter`` and ``nft`` to use, checked to work here with ``bwrap``. Raises
    ``SandboxUnavailableError`` naming the package."""
    binary = shutil.which("pasta")
    if binary is None:
        raise SandboxUnavailableError(f"pasta is not installed: {_INSTALL_HINT}")
    nsenter, nft = shutil.which("nsenter"), shutil.which("nft") or _sbin("nft")
    if nsenter is None or nft is None:
        raise SandboxUnavailableError(f"{'nft' if nsenter else 'nsenter'} is not installed: {_FENCE_HINT}")
    tools = (binary, nsenter, nft)
    problem = _probe(tools, str(bwrap))
    if problem:
        hint = _FENCE_HINT if "fence" in problem else _INSTALL_HINT
        raise SandboxUnavailableError(f"{binary} cannot give the sandbox a network here ({problem}): {hint}")
    return tools


def _sbin(name: str) -> str | None:
    """``name`` in /usr/sbin or /sbin, which a user's PATH may leave out."""
    return shutil.which(name, path="/usr/sbin:/sbin")


@functools.lru_cache(maxsize=2)
def _probe(tools: NetworkTools, bwrap: str) -> str:
    """ "" when a sandbox like the launch's gets its network here, else the complaint. Cached per process."""
    return probe_sandbox(bwrap, network_prefix(tools))
