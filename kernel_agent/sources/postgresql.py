"""The ``postgresql`` source kind: libpq URIs, their password only where libpq finds it on the host.

``check`` reads a target (``postgresql://USER@HOST:PORT/DB?…``, ``postgres://…``,
``postgresql:///?service=NAME``): a password anywhere in it is refused (userinfo ``user:pw@``, a
``password=`` parameter, a ``dbname`` that is itself a connection string); the default name is the
service's, else the database's, else the user's (libpq's own default database). ``PostgresSource``
(psycopg 3, imported at first use) describes and queries it read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import SourceError
from .registry import SourceKind

if TYPE_CHECKING:
    from .base import Source, SourceSpec

__all__ = ["PASSWORD_WHERE", "POSTGRESQL", "check"]

SCHEMES = ("postgresql", "postgres")
PASSWORD_WHERE = (
    "put the password in ~/.pgpass (or the file PGPASSFILE names: one line host:port:database:user:password, "
    "mode 0600) or in a pg_service.conf service (then --data NAME=postgresql:///?service=SERVICE)"
)


def check(target: str) -> str:
    """``target``'s default source name (service, else database, else user, else ``postgresql``). Raises
    ``SourceError`` when it carries a password or is not a PostgreSQL URI; the message never holds the target."""
    try:
        parts = urlsplit(target)
    except ValueError as exc:
        raise SourceError(f"a PostgreSQL URI that cannot be read ({exc.__class__.__name__})") from None
    if parts.scheme.lower() not in SCHEMES:
        raise SourceError(f"not a PostgreSQL URI: the scheme is {parts.scheme!r}, not postgresql://")
    userinfo, at, _hosts = parts.netloc.rpartition("@")
    if at and ":" in userinfo:
        raise SourceError(f"a PostgreSQL URI must not carry a password (user:password@): {PASSWORD_WHERE}")
    params = parse_qsl(parts.query, keep_blank_values=True)
    for key, value in params:
        key = key.strip().lower()
        if key == "password":
            raise SourceError(f"a PostgreSQL URI must not carry a password (password=): {PASSWORD_WHERE}")
        if key == "dbname" and ("=" in value or "://" in value):
            raise SourceError("a PostgreSQL URI's dbname must be a database's name, not a connection string")
    named = dict((key.strip().lower(), value) for key, value in params)
    user = unquote(userinfo) if at else ""
    return named.get("service") or named.get("dbname") or unquote(parts.path.lstrip("/")) or user or "postgresql"


def _open(spec: SourceSpec) -> Source:
    from .postgresql_source import PostgresSource

    return PostgresSource(spec)


POSTGRESQL = SourceKind("postgresql", SCHEMES, check, _open)
