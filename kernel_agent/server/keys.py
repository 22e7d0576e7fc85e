"""Service keys in the database: only their hashes, added, listed, revoked and checked there.

Owns the ``keys`` table (``migrations/versions/0004_keys.py``) and every read and write of it. A key is
never stored, logged or returned after it is made: a row holds the key's SHA-256 (a key is a long random
string, so a fast hash is enough to find it and useless to reverse), its id (``key-`` and the first 16 hex
digits of that hash: the owner name the service has always given the key, so records kept before keys
were rows stay their owner's), a name and when it was made or revoked.

Replicas on one database see the same keys: on a shared database (PostgreSQL) ``owner`` asks the
database on every request, so a key added or revoked anywhere counts at once everywhere; on the embedded
SQLite file a key found is trusted for ``ttl`` seconds (a revoke by ``kernel-agent keys`` reaches a
running server within that), a key not found is looked up at once. Keys from ``--keys-file`` or the
environment are imported at start, each the first time it is seen; a key revoked stays revoked. What a
revoked key has open (streams, runs) is ended by ``revocations.py``, which asks ``revoked``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..errors import ConfigError, ServiceError
from .config import key_hash, owner_of
from .database import engine_for, migrate, tables

__all__ = ["SQLITE_TTL_S", "KeyRecord", "Keys", "open_keys"]

KEY_PREFIX = "ka_"  # marks a key kernel-agent made (secret scanners can match it)
SQLITE_TTL_S = 5.0  # how long the embedded database's server trusts a key it found


@dataclass(frozen=True)
class KeyRecord:
    """A key as the database knows it: never the key itself."""

    id: str
    name: str
    created_at: float
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class Keys:
    """The keys table on ``engine``. ``ttl``: seconds a found key is trusted without asking again
    (0 on a database other replicas share)."""

    def __init__(self, engine: AsyncEngine, ttl: float = 0.0) -> None:
        self.engine = engine
        self.ttl = ttl
        self._trusted: dict[str, tuple[str, float]] = {}  # hash -> (id, when found)

    async def add(self, name: str = "") -> tuple[KeyRecord, str]:
        """Make a new key; return its record and the key, which is shown this once and kept nowhere."""
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        record = KeyRecord(id=owner_of(key), name=name, created_at=time.time())
        async with self.engine.begin() as connection:
            await connection.execute(
                tables["keys"]
                .insert()
                .values(id=record.id, hash=key_hash(key), name=name, created_at=record.created_at)
            )
        return record, key

    async def import_keys(self, keys: Iterable[str], name: str = "imported") -> int:
        """Add each of ``keys`` the table has never had (a revoked one stays revoked); return how many."""
        rows = [{"id": owner_of(k), "hash": key_hash(k), "name": name, "created_at": time.time()} for k in set(keys)]
        if not rows:
            return 0
        async with self.engine.begin() as connection:
            dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
            statement = dialect.insert(tables["keys"]).on_conflict_do_nothing(index_elements=["id"])
            added = 0
            for row in rows:
                added += (await connection.execute(statement.values(**row))).rowcount or 0
        return added

    async def list(self) -> list[KeyRecord]:
        """Every key, active and revoked, oldest first."""
        table = tables["keys"]
        columns = (table.c.id, table.c.name, table.c.created_at, table.c.revoked_at)
        async with self.engine.connect() as connection:
            rows = (await connection.execute(select(*columns).order_by(table.c.created_at, table.c.id))).all()
        return [KeyRecord(*row) for row in rows]

    async def active(self) -> int:
        """How many keys may be used."""
        table = tables["keys"]
        async with self.engine.connect() as connection:
            found = await connection.execute(
                select(func.count()).select_from(table).where(table.c.revoked_at.is_(None))
            )
        return int(found.scalar_one())

    async def revoke(self, key: str) -> KeyRecord:
        """Revoke the key with id ``key`` (as ``list`` shows it). Raises ``ConfigError`` for an unknown id."""
        table = tables["keys"]
        async with self.engine.begin() as connection:
            await connection.execute(
                update(table).where(table.c.id == key, table.c.revoked_at.is_(None)).values(revoked_at=time.time())
            )
        found = [record for record in await self.list() if record.id == key]
        if not found:
            raise ConfigError(f"no key {key}: `kernel-agent keys list` shows the ids")
        self._trusted = {h: v for h, v in self._trusted.items() if v[0] != key}
        return found[0]

    async def revoked(self) -> set[str]:
        """The ids of the revoked keys, as the database has them now (revoked by any process); none of them
        is trusted here any more."""
        table = tables["keys"]
        async with self.engine.connect() as connection:
            rows = await connection.execute(select(table.c.id).where(table.c.revoked_at.isnot(None)))
            found = {str(key_id) for key_id in rows.scalars()}
        self._trusted = {h: v for h, v in self._trusted.items() if v[0] not in found}
        return found

    async def owner(self, key: str) -> str | None:
        """The owner of ``key`` when it is an active key, else None. Raises ``ServiceError`` 503 when
        the database does not answer (a key must not pass unchecked, nor be refused as bad)."""
        digest = key_hash(key)
        trusted = self._trusted.get(digest)
        if trusted is not None and time.monotonic() - trusted[1] < self.ttl:
            return trusted[0]
        table = tables["keys"]
        try:
            async with self.engine.connect() as connection:
                found = (
                    await connection.execute(
                        select(table.c.id).where(table.c.hash == digest, table.c.revoked_at.is_(None))
                    )
                ).scalar()
        except (SQLAlchemyError, OSError) as exc:
            raise ServiceError(
                f"cannot check the key: the database does not answer ({type(exc).__name__})", status=503
            ) from None
        if found is None:
            self._trusted.pop(digest, None)
            return None
        if self.ttl > 0:
            self._trusted[digest] = (found, time.monotonic())
        return str(found)


async def open_keys(url: URL) -> tuple[Keys, AsyncEngine]:
    """The keys of the database at ``url``, migrated first (for ``kernel-agent keys``); dispose the
    engine when done. Raises ``ConfigError`` when the database cannot be reached or migrated."""
    await migrate(url)
    engine = engine_for(url)
    return Keys(engine), engine
