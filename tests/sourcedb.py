"""A database of its own on the session's PostgreSQL for a sources test, owned by a login role of its own
(a role the database itself lets write: what a refused write must be refused to)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg
from postgres import PostgresServer

__all__ = ["OwnedDatabase", "owned_database"]


@dataclass(frozen=True)
class OwnedDatabase:
    """``admin``: the superuser's URL to it; ``owner``: its owning role's (no password: trusted on the socket);
    ``role`` and ``name``."""

    admin: str
    owner: str
    role: str
    name: str

    def run(self, *statements: str, admin: bool = False) -> None:
        """Run ``statements`` as the owner (the tables they make are its own), or as the superuser."""
        with psycopg.connect(self.admin if admin else self.owner, autocommit=True) as connection:
            for statement in statements:
                connection.execute(statement.encode())

    def rows(self, query: str) -> list[tuple[object, ...]]:
        """``query``'s rows, read as the superuser."""
        with psycopg.connect(self.admin, autocommit=True) as connection:
            return connection.execute(query.encode()).fetchall()


def owned_database(postgres: PostgresServer, prefix: str = "shop") -> OwnedDatabase:
    """A fresh database and its owning login role on ``postgres``."""
    tag = uuid.uuid4().hex[:10]
    role, name = f"owner_{tag}", f"{prefix}_{tag}"
    with psycopg.connect(postgres.url, autocommit=True) as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN".encode())
        connection.execute(f"CREATE DATABASE {name} OWNER {role}".encode())
    admin = postgres.database_url(name)
    return OwnedDatabase(admin, admin.replace("postgresql://test@", f"postgresql://{role}@", 1), role, name)
