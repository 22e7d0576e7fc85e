"""A real PostgreSQL for tests: Debian's server binaries, ``initdb`` in a temp dir, listening on a Unix
socket in that dir only (no TCP port: a port found free and closed again could be taken before the server,
or while it is down between ``stop()`` and ``start()``, binds it), as an unprivileged user when we are root
(PostgreSQL refuses to run as root).

Usage::

    with PostgresServer() as postgres:
        Store(data_dir, postgres.url)          # postgresql://test@/kernel_agent?host=/tmp/…/pg-test-…

``close()`` stops the server (fast shutdown) and removes its folder; ``stop()``/``start()`` take it
down and up again on the same data (what a lost database looks like to the service).

Every role is trusted on the socket except the members of ``PASSWORD_GROUP``, who must give their password
(SCRAM): a test that proves a password is really used makes its role ``IN ROLE password_users``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["PASSWORD_GROUP", "RUNNING", "PostgresServer", "postgres_binaries"]

PASSWORD_GROUP = "password_users"


RUNNING: list[PostgresServer] = []  # the servers this process started and has not closed (tests/leaks.py)


def postgres_binaries() -> Path:
    """The folder of ``initdb`` and ``postgres``: Debian's newest, else the PATH's. Raises RuntimeError."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError(
            "PostgreSQL's server binaries are not installed: `make test` installs them "
            "(Debian: apt-get install postgresql)"
        )
    return Path(initdb).parent


class PostgresServer:
    """One throwaway PostgreSQL cluster with a database ``kernel_agent`` that user ``test`` may use."""

    def connections(self, application_name: str, wait_s: float = 10.0) -> list[str]:
        """The open connections that gave ``application_name`` (``pid user@database``), once those closing
        have gone: a backend ends a moment after its client closed, so a non-empty answer is read again
        until it empties or ``wait_s`` passes. [] while the server is down."""
        import psycopg

        deadline = time.monotonic() + wait_s
        while True:
            if self.process is None or self.process.poll() is not None:
                return []
            with psycopg.connect(self.url, autocommit=True) as connection:
                rows = connection.execute(
                    "SELECT pid, usename, datname FROM pg_stat_activity WHERE application_name = %s AND pid <> "
                    "pg_backend_pid()",
                    (application_name,),
                ).fetchall()
            if not rows or time.monotonic() > deadline:
                return [f"{pid} {user}@{database}" for pid, user, database in rows]
            time.sleep(0.05)  # waiting for backends already told to end, not for a result to change

    def __init__(self) -> None:
        self.bin = postgres_binaries()
        self.folder = Path(tempfile.mkdtemp(prefix="pg-test-"))
        self.data = self.folder / "data"
        self.url = self.database_url("kernel_agent")
        self.process: subprocess.Popen[bytes] | None = None
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:  # PostgreSQL will not run as root: its own system user, else nobody
            for name in ("postgres", "nobody"):
                try:
                    account = pwd.getpwnam(name)
                except KeyError:
                    continue
                self._as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
                os.chown(self.folder, account.pw_uid, account.pw_gid)
                break

    def __enter__(self) -> PostgresServer:
        try:
            self._run("initdb", "-D", str(self.data), "-U", "test", "--auth=trust", "--no-sync", "-E", "UTF8")
            rules = self.data / "pg_hba.conf"  # first match wins: the group's line goes before the trust ones
            rules.write_text(f"local all +{PASSWORD_GROUP} scram-sha-256\n" + rules.read_text())
            self.start()
            self._run("createdb", "-h", str(self.folder), "-U", "test", "kernel_agent")
            self._run(
                "psql",
                "-h",
                str(self.folder),
                "-U",
                "test",
                "-d",
                "kernel_agent",
                "-qc",
                f"CREATE ROLE {PASSWORD_GROUP} NOLOGIN",
            )
        except BaseException:
            self.close()
            raise
        RUNNING.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [str(self.bin / tool), *args], capture_output=True, cwd=self.folder, timeout=120, **self._as
        )
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stderr.decode(errors='replace')[-2000:]}")

    def database(self, name: str) -> str:
        """Create another empty database ``name`` and return its URL."""
        self._run("createdb", "-h", str(self.folder), "-U", "test", name)
        return self.database_url(name)

    def database_url(self, name: str) -> str:
        """The URL of database ``name`` on this server (through its socket)."""
        return f"postgresql://test@/{name}?host={quote(str(self.folder), safe='')}"

    def start(self) -> None:
        """Start the server on its data and wait until it takes connections."""
        log = open(self.folder / "postgres.log", "ab")  # noqa: SIM115 - the server writes it until it stops
        with log:
            self.process = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-k",
                    str(self.folder),
                    "-c",
                    "listen_addresses=",
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ],
                stdout=log,
                stderr=log,
                cwd=self.folder,
                start_new_session=True,
                **self._as,
            )
        deadline = time.monotonic() + 60
        while subprocess.run([str(self.bin / "pg_isready"), "-h", str(self.folder), "-q"], timeout=30).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL did not start: " + (self.folder / "postgres.log").read_text()[-2000:])
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server (a fast shutdown: open connections are closed). Idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(30)

    def close(self) -> None:
        """Stop the server and remove its folder. Idempotent."""
        if self in RUNNING:
            RUNNING.remove(self)
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
