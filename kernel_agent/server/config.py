"""The service's settings: ``ServerConfig`` and where its keys come from.

Precedence as everywhere in kernel-agent: explicit argument > environment
variable > default. Service keys live in the database (``keys.py``: only their
hashes; ``kernel-agent keys add/list/revoke``); keys from ``--keys-file`` (one
a line, ``#`` comments) or ``KERNEL_AGENT_SERVER_KEYS`` (comma-separated) are
imported there at start. Without an active key the server refuses to start
unless auth is off, which is allowed only on a loopback address. Keys are
never logged, echoed or stored: a client is known by a hash of its key
(``owner_of``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._connections import ConnectionLimits
from .._net import is_loopback
from ..errors import ConfigError

__all__ = ["KEYS_VARIABLE", "NO_KEY_HELP", "ConnectionLimits", "ServerConfig", "key_hash", "load_keys", "owner_of"]

KEYS_VARIABLE = "KERNEL_AGENT_SERVER_KEYS"
NO_AUTH_OWNER = "local"
NO_KEY_HELP = (
    f"the service needs at least one key: `kernel-agent keys add`, or set {KEYS_VARIABLE} (comma-separated) "
    "or pass --keys-file FILE; or pass --no-auth to serve without keys on a loopback address"
)


@dataclass(frozen=True)
class ServerConfig:
    """How the service runs.

    data_dir: where files, threads (workspaces, notebooks) and runs live.
    keys: bearer keys to import into the database's keys at start (``--keys-file``, the
        environment); the service refuses to start with auth on and no active key there.
    auth: False serves everyone as one owner (loopback only; see ``check_host``).
    agent: ``AsyncAgent`` keyword arguments for every thread's agent (model,
        base_url, api_key, protocol, max_rounds, exec_timeout, sandbox, ...);
        the CLI builds them exactly as ``kernel-agent run`` does.
    max_running: runs executing at once; a new run over the cap gets 429.
    max_running_per_key: runs one key may have executing at once (``key_share``; None: half of
        ``max_running``, rounded up, so one key never holds every place); a run over it gets 429 that
        says so. Without auth everyone is one owner, who may use every place.
    allowed_hosts: names (``name`` or ``name:port``) the service answers for besides the loopback
        names and the address it listens on (``--allowed-host``; ``*``: any); a request whose ``Host``
        or ``Origin`` names another gets 421 or 403 (``origins.py``).
    max_threads_live: thread kernels kept alive at once; the idlest is shut
        down to make room (a later follow-up rebuilds it from the notebook).
    idle_ttl: seconds an idle thread's kernel lives before it is shut down.
    max_upload_bytes: uploads larger than this get 413; a request body more than 1 MiB over it
        is refused before it is read (limits.BodyLimit).
    pool_size: warm kernels kept ready for new threads (0: none, each thread starts its own);
        the pool's kernels count toward ``max_threads_live``, which caps its refills.
    demo: every thread plays the bundled scripted demo replies (``kernel_agent.demo``) with the
        ``tags`` protocol; no model is asked, and the page and ``/v1/info`` say so. The script answers
        one question, so a follow-up is refused (``DEMO_NO_FOLLOW_UP``, 422).
    temporary: ``data_dir`` is a temporary folder removed when the server exits (``serve --demo``
        without ``--data-dir``); the start-up line says so.
    database: where the records live, a URL: ``sqlite:///PATH`` or ``postgresql://USER:PASSWORD@HOST/DB``
        (None: the embedded SQLite file ``kernel-agent.db`` under ``data_dir``). Never logged whole.
    lease_ttl: seconds a replica's lease on a running thread lasts unless renewed (every third of it);
        a replica that dies is taken over by another this long after its last renewal.
    drain_grace: on SIGTERM, seconds the runs in flight get to finish (no new run is taken, ``/ready``
        says 503); those still running then are stopped and marked ``interrupted``.
    connections: deadlines on a request's headers and body and a cap on open connections
        (``ConnectionLimits``).
    """

    data_dir: Path
    keys: frozenset[str] = field(default=frozenset(), repr=False)
    auth: bool = True
    agent: Mapping[str, Any] = field(default_factory=dict, repr=False)
    max_running: int = 4
    max_running_per_key: int | None = None
    allowed_hosts: tuple[str, ...] = ()
    max_threads_live: int = 8
    idle_ttl: float = 1800.0
    max_upload_bytes: int = 100 * 1024 * 1024
    pool_size: int = 0
    demo: bool = False
    temporary: bool = False
    database: str | None = field(default=None, repr=False)
    lease_ttl: float = 15.0
    drain_grace: float = 30.0
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)

    def __post_init__(self) -> None:
        if self.max_running < 1 or self.max_threads_live < 1:
            raise ConfigError("max_running and max_threads_live must be at least 1")
        if self.max_running_per_key is not None and not 1 <= self.max_running_per_key <= self.max_running:
            raise ConfigError(f"max_running_per_key must be between 1 and max_running ({self.max_running})")
        if not 0 <= self.pool_size <= self.max_threads_live:
            raise ConfigError(
                f"the pool size must be between 0 and max_threads_live ({self.max_threads_live}), not {self.pool_size}"
            )
        if self.idle_ttl <= 0 or self.max_upload_bytes <= 0 or self.lease_ttl <= 0 or self.drain_grace < 0:
            raise ConfigError("idle_ttl, max_upload_bytes and lease_ttl must be positive, drain_grace at least 0")
        if self.database is not None:
            from .database import database_url

            database_url(self.database, self.data_dir)  # a bad URL fails now, not at the first request

    @property
    def key_share(self) -> int:
        """Runs one owner may have executing at once (see ``max_running_per_key``)."""
        if not self.auth:
            return self.max_running
        return self.max_running_per_key or (self.max_running + 1) // 2

    @property
    def model(self) -> str | None:
        return "scripted-demo" if self.demo else self.agent.get("model")

    @property
    def protocol(self) -> str | None:
        return self.agent.get("protocol")


def load_keys(
    keys_file: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> frozenset[str]:
    """The service keys from ``keys_file`` (one a line) or else the environment. Raises ``ConfigError``
    when the file cannot be read."""
    if keys_file is not None:
        try:
            lines = Path(keys_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read the keys file {keys_file}: {exc.strerror}") from None
        return frozenset(k for k in (line.strip() for line in lines) if k and not k.startswith("#"))
    raw = (os.environ if environ is None else environ).get(KEYS_VARIABLE, "")
    return frozenset(k.strip() for k in raw.split(",") if k.strip())


def check_host(host: str, auth: bool) -> None:
    """Raise ``ConfigError`` when auth is off on an address other machines can reach."""
    if not auth and not is_loopback(host):
        raise ConfigError(f"--no-auth is allowed only on a loopback address (127.0.0.1, ::1), not {host}")


def key_hash(key: str) -> str:
    """The hex SHA-256 of ``key``: what the database keeps instead of the key."""
    return hashlib.sha256(key.encode()).hexdigest()


def owner_of(key: str | None) -> str:
    """The stable, non-secret name of a key's owner, which is also the key's id in the database
    (``key-`` and 16 hex digits of its hash); ``local`` without auth."""
    if key is None:
        return NO_AUTH_OWNER
    return "key-" + key_hash(key)[:16]
