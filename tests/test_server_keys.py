"""Service keys in the database: only their hashes are kept; ``kernel-agent keys add/list/revoke`` manage
them (a new key printed once); the keys of a key file or the environment are imported at start (also
into a database made before keys were rows, whose records stay their owner's); two replicas on one
PostgreSQL accept a key added through the CLI and both refuse it once revoked. A key reaches no log."""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from postgres import PostgresServer
from replicas import KEY, Replica
from service_server import ServiceServer
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

import kernel_agent.server
from kernel_agent.cli import cli
from kernel_agent.errors import ConfigError
from kernel_agent.server.config import ServerConfig, owner_of
from kernel_agent.server.database import DATABASE_FILE, database_url
from kernel_agent.server.keys import Keys, open_keys
from kernel_agent.server.records import ThreadRecord
from kernel_agent.server.revocations import Revocations
from kernel_agent.server.service import Service

NO_MODEL = "http://127.0.0.1:9/v1"  # no request here reaches a model


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'keys.db'}"
    postgres: PostgresServer = request.getfixturevalue("postgres")
    return postgres.database(f"keys_{secrets.token_hex(6)}")


def rows_of(database: str) -> str:
    """Every row of every table of ``database``, as one text."""
    listing = (
        "SELECT name FROM sqlite_master WHERE type='table'"
        if database.startswith("sqlite")
        else "SELECT tablename FROM pg_tables WHERE schemaname='public'"
    )

    async def read() -> str:
        engine = create_async_engine(database_url(database, "/"))
        try:
            async with engine.connect() as connection:
                rows: list[Any] = []
                for (name,) in (await connection.execute(text(listing))).all():
                    rows += (await connection.execute(text(f'SELECT * FROM "{name}"'))).all()
                return "\n".join(str(row) for row in rows)
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_keys_are_added_listed_imported_and_revoked_and_only_their_hashes_are_kept(database: str) -> None:
    async def work() -> tuple[str, list[str], int]:
        keys, engine = await open_keys(database_url(database, "/"))
        try:
            record, key = await keys.add("alice's laptop")
            assert record.id == owner_of(key) and key.startswith("ka_") and len(key) > 40
            assert await keys.owner(key) == record.id and await keys.owner(key + "x") is None
            assert await keys.import_keys({"imported-secret-1", "imported-secret-2"}) == 2
            assert await keys.import_keys({"imported-secret-1"}) == 0  # each key once
            revoked = await keys.revoke(owner_of("imported-secret-1"))
            assert not revoked.active and await keys.owner("imported-secret-1") is None
            assert await keys.import_keys({"imported-secret-1"}) == 0  # a revoked key stays revoked
            assert await keys.owner("imported-secret-2") == owner_of("imported-secret-2")
            with pytest.raises(ConfigError, match="no key key-nope"):
                await keys.revoke("key-nope")
            listed = [f"{r.id} {r.name} {r.active}" for r in await keys.list()]
            return key, listed, await keys.active()
        finally:
            await engine.dispose()

    key, listed, active = asyncio.run(work())
    assert active == 2 and len(listed) == 3
    assert f"{owner_of(key)} alice's laptop True" in listed
    assert f"{owner_of('imported-secret-1')} imported False" in listed
    stored = rows_of(database)
    assert owner_of(key) in stored  # the rows are there, the keys are not
    assert key not in stored and "imported-secret" not in stored


def test_a_found_key_is_trusted_for_the_ttl_and_a_new_key_is_found_at_once(tmp_path: Path) -> None:
    url = database_url(f"sqlite:///{tmp_path / 'k.db'}", "/")

    async def work() -> None:
        elsewhere, engine = await open_keys(url)
        cached = Keys(engine, ttl=3600)
        try:
            record, key = await elsewhere.add()
            assert await cached.owner(key) == record.id  # added elsewhere: looked up, not refused
            await elsewhere.revoke(record.id)
            assert await cached.owner(key) == record.id  # trusted until the ttl runs out
            assert await Keys(engine, ttl=0).owner(key) is None
        finally:
            await engine.dispose()

    asyncio.run(work())


def test_the_keys_cli_prints_a_new_key_once_and_lists_and_revokes_by_id(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    added = CliRunner().invoke(cli, ["keys", "add", "--name", "ci", "--data-dir", data])
    assert added.exit_code == 0, added.output
    key = added.stdout.strip()
    assert key.startswith("ka_") and f"added {owner_of(key)} (ci)" in added.stderr
    listed = CliRunner().invoke(cli, ["keys", "list", "--data-dir", data])
    assert listed.exit_code == 0 and f"{owner_of(key)}  active" in listed.output and "ci" in listed.output
    assert key not in listed.output
    revoked = CliRunner().invoke(cli, ["keys", "revoke", owner_of(key), "--data-dir", data])
    assert revoked.exit_code == 0 and f"revoked {owner_of(key)}" in revoked.output
    assert "revoked 20" in CliRunner().invoke(cli, ["keys", "list", "--data-dir", data]).output
    unknown = CliRunner().invoke(cli, ["keys", "revoke", "key-0000", "--data-dir", data])
    assert unknown.exit_code == 2 and "no key key-0000" in unknown.output
    assert key not in rows_of(f"sqlite:///{tmp_path / 'data' / DATABASE_FILE}")


def test_a_database_from_before_keys_were_rows_imports_the_key_file_and_its_records_stay_their_owners(
    tmp_path: Path,
) -> None:
    from alembic import command
    from alembic.config import Config

    data = tmp_path / "data"
    data.mkdir()
    engine = create_engine(f"sqlite:///{data / DATABASE_FILE}")
    with engine.begin() as connection:  # the schema as the last release left it, with a thread in it
        config = Config()
        config.set_main_option("script_location", str(Path(kernel_agent.server.__file__).parent / "migrations"))
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
        thread = ThreadRecord(
            id="thread-old", owner=owner_of("old-secret-key"), task="t", created_at="1", updated_at="1"
        )
        connection.execute(
            text("INSERT INTO threads (id, owner, status, body) VALUES (:id, :owner, 'idle', :body)"),
            {"id": thread.id, "owner": thread.owner, "body": thread.model_dump_json()},
        )
        connection.execute(text("INSERT INTO meta (key, value) VALUES ('json_imported', '0')"))
    engine.dispose()

    with ServiceServer(data, NO_MODEL, keys={"old-secret-key"}) as server:
        seen = httpx.get(server.url + "/v1/threads", headers={"Authorization": "Bearer old-secret-key"}).json()
        assert [t["id"] for t in seen["threads"]] == ["thread-old"]
        assert httpx.get(server.url + "/v1/threads", headers={"Authorization": "Bearer other"}).status_code == 401
    with sqlite3.connect(data / DATABASE_FILE) as connection:
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [("0004",)]
    stored = rows_of(f"sqlite:///{data / DATABASE_FILE}")
    assert owner_of("old-secret-key") in stored and "old-secret-key" not in stored

    with ServiceServer(data, NO_MODEL, keys={"another-key"}) as server:  # no longer in the file: still a key
        assert (
            httpx.get(server.url + "/v1/threads", headers={"Authorization": "Bearer old-secret-key"}).status_code == 200
        )


def test_serve_starts_on_the_databases_keys_alone_and_refuses_with_none(tmp_path: Path) -> None:
    data = tmp_path / "data"
    refused = CliRunner().invoke(cli, ["serve", "--data-dir", str(data), "--model", "m"])
    assert refused.exit_code == 2 and "kernel-agent keys add" in refused.output

    async def start() -> str | None:
        async with Service(ServerConfig(data, auth=True, agent={"model": "m"})) as service:
            return await service.keys.owner(key)

    with pytest.raises(ConfigError, match="needs at least one key"):
        asyncio.run(start())
    added = CliRunner().invoke(cli, ["keys", "add", "--data-dir", str(data)])
    key = added.stdout.strip()
    assert asyncio.run(start()) == owner_of(key)  # no key file, no environment: the database's key


@pytest.mark.postgresql
def test_two_replicas_accept_a_key_added_through_the_cli_and_both_refuse_it_once_revoked(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    database = postgres.database("replica_keys")

    def keys_cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "kernel_agent.cli", "keys", *args, "--database", database],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done

    with (
        Replica(tmp_path / "data", NO_MODEL, database=database) as a,
        Replica(tmp_path / "data", NO_MODEL, database=database) as b,
    ):
        key = keys_cli("add", "--name", "bob").stdout.strip()
        as_bob = {"Authorization": f"Bearer {key}"}
        for replica in (a, b):
            assert httpx.get(replica.url + "/v1/threads", headers=as_bob).status_code == 200
        keys_cli("revoke", owner_of(key))
        for replica in (a, b):
            refused = httpx.get(replica.url + "/v1/threads", headers=as_bob)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
            assert key not in refused.text
            assert replica.client.get("/v1/threads").status_code == 200  # the imported key still works
    logs = "".join(path.read_text() for path in tmp_path.glob("replica-*.log"))
    assert "imported 1 service keys" in logs
    assert key not in logs and KEY not in logs
    assert key not in rows_of(database) and KEY not in rows_of(database)


def test_a_revoked_owners_stream_ends_revoked_even_when_the_runs_last_event_came_first(database: str) -> None:
    """Another replica cancelled the run of a revoked key before this one's watcher looked: the run's
    ``finished`` must not end this stream as if nothing happened; an active owner's ``finished`` stands."""

    async def work() -> tuple[list[str], list[str]]:
        keys, engine = await open_keys(database_url(database, "/"))
        try:
            _, kept = await keys.add("bob")
            _, gone = await keys.add("carol")
            await keys.revoke(owner_of(gone))
            revocations = Revocations(keys, open_runs=set, cancel_runs=lambda _owner: asyncio.sleep(0))

            async def run_events() -> AsyncIterator[dict[str, str]]:
                yield {"event": "round_started"}
                yield {"event": "finished"}

            def last(item: dict[str, str]) -> bool:
                return item["event"] == "finished"

            seen = {}
            for key in (kept, gone):
                stream = revocations.stream(owner_of(key), run_events(), {"event": "revoked"}, last)
                seen[key] = [item["event"] async for item in stream]
            return seen[kept], seen[gone]
        finally:
            await engine.dispose()

    kept, gone = asyncio.run(work())
    assert kept == ["round_started", "finished"]
    assert gone == ["round_started", "revoked"]
