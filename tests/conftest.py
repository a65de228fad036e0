"""Test harness: one real PostgreSQL server per session, started by the tests.

As root the server runs as an unprivileged OS user (pg_ttl.localserver does
that). pytest-postgresql builds a template database with pg_ttl installed
once; every test gets a fresh database cloned from it.

Set PGTTL_PG_BINDIR to test another server build (e.g. the pgserver wheel's
PostgreSQL 16).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_postgresql import factories

from pg_ttl import install
from pg_ttl.localserver import LocalServer

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ServerInfo:
    """What pytest-postgresql's ``depends_on`` needs from a base fixture."""

    host: str
    port: int
    user: str
    password: str | None = None
    options: str = ""
    maintenance_dbname: str = "postgres"
    template_dbname: str | None = None


@pytest.fixture(scope="session")
def pg_local() -> Iterator[LocalServer]:
    """The session's PostgreSQL server (tests may restart it)."""
    server = LocalServer(settings={"max_connections": "200", "max_prepared_transactions": "10"})
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def pg_server(pg_local: LocalServer) -> ServerInfo:
    return ServerInfo(host="127.0.0.1", port=pg_local.port, user=pg_local.superuser)


def _load_pg_ttl(host: str, port: int, user: str, dbname: str, password: str | None = None, **_: Any) -> None:
    install.upgrade(psycopg.conninfo.make_conninfo(host=host, port=port, user=user, dbname=dbname))


pgttl_proc = factories.postgresql_noproc(depends_on="pg_server", dbname="pgttl", load=[_load_pg_ttl])
plain_proc = factories.postgresql_noproc(depends_on="pg_server", dbname="plain")

# A connection (autocommit off) to a fresh database with pg_ttl installed.
db = factories.postgresql("pgttl_proc")
# A connection to a fresh database without pg_ttl.
plain_db = factories.postgresql("plain_proc")


def dsn_of(conn: psycopg.Connection[Any]) -> str:
    info = conn.info
    return psycopg.conninfo.make_conninfo(host=info.host, port=info.port, user=info.user, dbname=info.dbname)


@pytest.fixture
def dsn(db: psycopg.Connection[Any]) -> str:
    """DSN of the ``db`` fixture's database."""
    db.commit()
    return dsn_of(db)


@pytest.fixture
def plain_dsn(plain_db: psycopg.Connection[Any]) -> str:
    plain_db.commit()
    return dsn_of(plain_db)


@pytest.fixture
def connect(dsn: str) -> Iterator[Any]:
    """Open extra autocommit connections to the test database; all closed afterwards."""
    opened: list[psycopg.Connection[Any]] = []

    def _connect(**kwargs: Any) -> psycopg.Connection[Any]:
        conn = psycopg.connect(dsn, autocommit=kwargs.pop("autocommit", True), **kwargs)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: dict[str, str] | None = None, input: str | None = None,
            timeout: float = 120) -> CliResult:
    """Run ``pg-ttl`` as a real subprocess (as a user would)."""
    full_env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "pg_ttl", *args], capture_output=True, text=True,
                          env=full_env, input=input, timeout=timeout)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli() -> Any:
    return run_cli
