"""``kernel-agent keys add/list/revoke``: the service keys in the database every replica shares.

A thin front end on ``server.keys``: a new key is printed once, on stdout, and kept nowhere (the
database holds its hash); ``list`` and ``revoke`` name keys by their id (``key-…``, the owner name the
service's logs and records use). The database is ``--database`` (or ``KERNEL_AGENT_DATABASE``), else
the embedded SQLite file under ``--data-dir``, as for ``serve``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from ..agent.settings import Table, option
from ..safe.terminal import one_line
from ..server.config import SERVE
from .edge import edge
from .options import table_options

if TYPE_CHECKING:  # the service's database is imported when a command uses it
    from ..server.keys import Keys

__all__ = ["KEYS", "active_keys", "keys"]

T = TypeVar("T")

# fmt: off
KEYS = Table(
    option(
        "keys", "data_dir", str, "kernel-agent-data",
        "The service's data dir (its embedded database, unless --database names another)", metavar="DIR",
    ),
    SERVE["database"],  # the service's own row: one flag, one variable, one help
    option("keys add", "name", str, "", "What the key is for (shown by `keys list`)", metavar="TEXT"),
)
# fmt: on
_where = table_options(KEYS["data_dir"], KEYS["database"])


def _on_keys(database: str | None, data_dir: str, work: Callable[[Keys], Awaitable[T]]) -> T:
    """``work(keys)`` on the database's keys (migrated first), then the engine disposed."""
    from ..server.database import database_url
    from ..server.keys import open_keys

    async def main() -> T:
        store, engine = await open_keys(database_url(database, data_dir))
        try:
            return await work(store)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def active_keys(database: str | None, data_dir: str) -> int:
    """How many active keys the service's database holds (for ``serve``'s start-up check)."""
    return _on_keys(database, data_dir, lambda keys: keys.active())


@click.group()
def keys() -> None:
    """Manage the service keys (hashes in the service's database; every replica sees the same)."""


@keys.command("add")
@table_options(KEYS["name"])
@_where
def keys_add(name: str, database: str | None, data_dir: str) -> None:
    """Make a new key and print it, this once: the database keeps only its hash."""
    with edge():
        record, key = _on_keys(database, data_dir, lambda store: store.add(name))
    click.echo(
        f"added {record.id}{f' ({name})' if name else ''}; clients send Authorization: Bearer KEY. "
        "The key is shown this once:",
        err=True,
    )
    click.echo(key)


@keys.command("list")
@_where
def keys_list(database: str | None, data_dir: str) -> None:
    """List the keys: id, state, when made, name (never the keys)."""
    with edge():
        records = _on_keys(database, data_dir, lambda store: store.list())
    for record in records:
        state = "active" if record.active else f"revoked {_when(record.revoked_at)}"
        click.echo(f"{record.id}  {state:<28}  {_when(record.created_at)}  {one_line(record.name)}".rstrip())


@keys.command("revoke")
@click.argument("key_id", metavar="KEY-ID")
@_where
def keys_revoke(key_id: str, database: str | None, data_dir: str) -> None:
    """Revoke a key by its id (from `keys list`): every replica refuses it from then on."""
    with edge():
        _on_keys(database, data_dir, lambda store: store.revoke(key_id))
    click.echo(f"revoked {one_line(key_id)}")


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp or 0)) + " UTC"
