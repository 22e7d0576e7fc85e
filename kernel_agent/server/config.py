"""The service's settings: ``SERVE``, one row per ``serve`` option; ``ServerConfig``, made from it; where its
keys come from.

``SERVE`` is a table of the agent settings' rows (``agent/settings.py``): ``kernel-agent serve``'s options are
made from it (``cli/options.table_options``), ``ServerConfig``'s fields take their names, defaults and checks
from its rows, and the docs' configuration page lists them. ``host``, ``port``, ``data_dir``, ``keys_file``,
``no_auth`` and ``log_format`` are read by the command itself (where to listen, what to import, how to log).

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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._connections import ConnectionLimits
from .._net import is_loopback
from ..agent.settings import Table, option
from ..errors import ConfigError, SourceError

if TYPE_CHECKING:
    from ..sources.base import SourceSpec

__all__ = [
    "KEYS_VARIABLE",
    "NO_KEY_HELP",
    "SERVE",
    "ConnectionLimits",
    "ServerConfig",
    "key_hash",
    "load_keys",
    "owner_of",
]

KEYS_VARIABLE = "KERNEL_AGENT_SERVER_KEYS"
NO_AUTH_OWNER = "local"
NO_KEY_HELP = (
    f"the service needs at least one key: `kernel-agent keys add`, or set {KEYS_VARIABLE} (comma-separated) "
    "or pass --keys-file FILE; or pass --no-auth to serve without keys on a loopback address"
)

_LIMITS = ConnectionLimits()

# fmt: off
SERVE = Table(
    option("serve", "host", str, "127.0.0.1", "Address to listen on"),
    option("serve", "port", int, 8200, "Port to listen on", minimum=0, maximum=65535),
    option(
        "serve", "data_dir", str, None, "Where uploads, thread workspaces, notebooks and run records live",
        aliases=("--workspace-root",), metavar="DIR", optional=True,
        shown_default="./kernel-agent-data; with --demo, a temporary folder removed at exit",
    ),
    option(
        "serve", "keys_file", str, None,
        "Service keys, one a line, imported (hashed) into the database at start; `kernel-agent keys` manages them "
        "there", aliases=("--key-file",), metavar="FILE", optional=True,
        shown_default=f"env {KEYS_VARIABLE}, comma-separated",
    ),
    option("serve", "no_auth", bool, False, "Serve without keys (allowed only on a loopback address)"),
    option("serve", "max_running", int, 4, "Runs executing at once; more get 429", minimum=1),
    option(
        "serve", "max_running_per_key", int, None,
        "Runs one key may have executing at once, so one tenant never takes every place", metavar="N",
        minimum=1, optional=True, shown_default="half of --max-running, rounded up; all of it with --no-auth",
    ),
    option(
        "serve", "allowed_hosts", str, (),
        "A name (NAME or NAME:PORT) this server answers for besides 127.0.0.1, localhost, [::1] and --host; "
        "repeat for more; '*' for any. Other Host or Origin headers get 421/403 (DNS rebinding)",
        flag="--allowed-host", metavar="NAME", multiple=True,
    ),
    option(
        "serve", "max_live_kernels", int, 8, "Thread kernels kept alive at once (the idlest is shut down)",
        minimum=1,
    ),
    option(
        "serve", "idle_ttl", float, 1800.0,
        "Seconds before an idle thread's kernel is shut down (a follow-up rebuilds it)", metavar="S",
        minimum=0, positive=True,
    ),
    option("serve", "max_upload_mb", float, 100.0, "Largest upload accepted", metavar="MB", minimum=0, positive=True),
    option(
        "serve", "pool", int, 0, "Keep N warm kernels for new threads (0: off); they count toward --max-live-kernels",
        metavar="N", minimum=0,
    ),
    option(
        "serve", "demo", bool, False,
        "Try it without a model: the scripted demo replies and the bundled sales data (no key needed on a loopback "
        "address)",
    ),
    option(
        "serve", "lease_ttl", float, 15.0,
        "Replicas: seconds before a dead replica's running thread is taken over by another", metavar="S",
        minimum=0, positive=True,
    ),
    option(
        "serve", "log_format", str, "text",
        "json: one JSON object a line (time, level, logger, message, run_id, thread_id) for a log pipeline",
        choices=lambda: ("text", "json"),
    ),
    option(
        "serve", "drain_grace", float, 30.0,
        "On SIGTERM: seconds the runs in flight get to finish (no new runs meanwhile) before they are stopped",
        metavar="S", minimum=0,
    ),
    option(
        "serve", "header_timeout", float, _LIMITS.header_timeout,
        "Seconds a request's line and headers may take in all; then its connection is closed (slow clients)",
        metavar="S", minimum=0, positive=True,
    ),
    option(
        "serve", "body_timeout", float, _LIMITS.body_timeout,
        "Seconds without a byte while a request's body is read; then its connection is closed", metavar="S",
        minimum=0, positive=True,
    ),
    option(
        "serve", "max_connections", int, _LIMITS.max_connections,
        "Connections open at once; one more is answered 503 and closed (keep it under the open-file limit)",
        metavar="N", minimum=1,
    ),
    option(
        "serve", "sources", str, (),
        "A live database threads may query, NAME=postgresql://USER@HOST/DB (no password: libpq's ~/.pgpass, "
        "PGPASSFILE or a pg_service.conf service gives it); a thread names it (sources: [NAME]); repeat for more",
        flag="--source", env="KERNEL_AGENT_SERVER_SOURCES", metavar="NAME=URI", multiple=True,
    ),
    option(
        "serve", "database", str, None,
        "Where the records live: sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DB (replicas share one)",
        env="KERNEL_AGENT_DATABASE", metavar="URL", optional=True, secret=True,
        shown_default="DATA-DIR/kernel-agent.db",
    ),
)
# fmt: on


def _setting(name: str) -> Any:
    """The ``ServerConfig`` field of the ``SERVE`` row ``name``: its default from the row."""
    row = SERVE[name]
    return field(default=row.default, repr=not row.secret, metadata={"setting": name})


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
    max_live_kernels: thread kernels kept alive at once; the idlest is shut
        down to make room (a later follow-up rebuilds it from the notebook).
    idle_ttl: seconds an idle thread's kernel lives before it is shut down.
    max_upload_mb: uploads larger than this (``max_upload_bytes``) get 413; a request body more than 1 MiB
        over it is refused before it is read (limits.BodyLimit).
    pool: warm kernels kept ready for new threads (0: none, each thread starts its own);
        the pool's kernels count toward ``max_live_kernels``, which caps its refills.
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
        (``ConnectionLimits``, its fields ``SERVE``'s rows of the same names).
    sources: the live databases the operator offers (``--source NAME=URI``, each a ``[NAME=]postgresql://…``
        value as ``--data`` takes one, never with a password); a thread names those it queries
        (``source_specs``), never a URI of its own.

    Each field but ``data_dir``, ``keys``, ``auth``, ``agent``, ``temporary`` and ``connections`` is the row of
    ``SERVE`` of its name, which gives its default and its checks (``ConfigError``).
    """

    data_dir: Path
    keys: frozenset[str] = field(default=frozenset(), repr=False)
    auth: bool = True
    agent: Mapping[str, Any] = field(default_factory=dict, repr=False)
    max_running: int = _setting("max_running")
    max_running_per_key: int | None = _setting("max_running_per_key")
    allowed_hosts: tuple[str, ...] = _setting("allowed_hosts")
    max_live_kernels: int = _setting("max_live_kernels")
    idle_ttl: float = _setting("idle_ttl")
    max_upload_mb: float = _setting("max_upload_mb")
    pool: int = _setting("pool")
    demo: bool = _setting("demo")
    temporary: bool = False
    database: str | None = _setting("database")
    lease_ttl: float = _setting("lease_ttl")
    drain_grace: float = _setting("drain_grace")
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    sources: tuple[str, ...] = _setting("sources")

    def __post_init__(self) -> None:
        SERVE.check({f.metadata["setting"]: getattr(self, f.name) for f in fields(self) if "setting" in f.metadata})
        if self.max_running_per_key is not None and not self.max_running_per_key <= self.max_running:
            raise ConfigError(f"max_running_per_key must be between 1 and max_running ({self.max_running})")
        if not self.pool <= self.max_live_kernels:
            raise ConfigError(
                f"the pool size must be between 0 and max_live_kernels ({self.max_live_kernels}), not {self.pool}"
            )
        if self.database is not None:
            from .database import database_url

            database_url(self.database, self.data_dir)  # a bad URL fails now, not at the first request
        if self.sources:
            self.source_specs()  # a password, a file or a name twice fails now, never echoed
            if self.agent.get("gateway_url"):
                raise ConfigError(
                    "--source needs kernels on this machine (a gateway's kernel cannot reach the broker's socket)"
                )

    def source_specs(self) -> dict[str, SourceSpec]:
        """The operator's live sources by name (``sources`` parsed). Raises ``SourceError`` (a ``ConfigError``)
        for a value that is not a source URI, carries a password, or repeats a name."""
        from ..agent.run.live import split_data

        files, specs = split_data(self.sources)
        if files:
            raise SourceError("--source takes a live database's URI, NAME=postgresql://USER@HOST/DB, not a file")
        return {spec.name: spec for spec in specs}

    @property
    def max_upload_bytes(self) -> int:
        """``max_upload_mb`` in bytes."""
        return int(self.max_upload_mb * 1024 * 1024)

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
