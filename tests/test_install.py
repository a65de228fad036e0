"""Install lifecycle through the CLI: install, upgrade, uninstall, version, connection errors."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pg_ttl import install
from tests.conftest import CliResult


def one_line_error(result: CliResult) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def ttl_objects(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {
        "schema": conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'ttl'").fetchone(),
        "event_triggers": conn.execute(
            "SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'pg_ttl%'").fetchone(),
    }


def test_install_into_plain_database(plain_dsn: str, cli: Any) -> None:
    with psycopg.connect(plain_dsn, autocommit=True) as conn:
        # a user's own alembic version table must be untouched
        conn.execute("CREATE TABLE public.alembic_version (version_num varchar(32) PRIMARY KEY)")
        conn.execute("INSERT INTO public.alembic_version VALUES ('user_rev_42')")
        conn.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz)")
    result = cli("install", "--dsn", plain_dsn)
    assert result.returncode == 0, result.stderr
    assert "installed" in result.stdout
    with psycopg.connect(plain_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT version_num FROM ttl.alembic_version").fetchall() == [
            (install.head_revision(),)]
        assert conn.execute("SELECT version_num FROM public.alembic_version").fetchall() == [("user_rev_42",)]
        assert ttl_objects(conn) == {"schema": (1,), "event_triggers": (3,)}
        conn.execute("SELECT ttl.enable('events', '1 day', 'created_at')")


def test_install_twice_says_so(dsn: str, cli: Any) -> None:
    result = cli("install", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert "already installed" in result.stdout


def test_upgrade_is_idempotent(dsn: str, cli: Any, db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz)")
    db.execute("SELECT ttl.enable('events', '1 day', 'created_at')")
    db.commit()
    before = db.execute("SELECT * FROM ttl.policy").fetchall()
    db.commit()
    for _ in range(2):
        result = cli("upgrade", "--dsn", dsn)
        assert result.returncode == 0, result.stderr
        assert f"already at revision {install.head_revision()}" in result.stdout
    assert db.execute("SELECT * FROM ttl.policy").fetchall() == before


def test_upgrade_does_not_queue_forever(dsn: str, db: psycopg.Connection[Any]) -> None:
    db.execute("LOCK TABLE ttl.policy IN ACCESS SHARE MODE")  # a long reader of the catalog
    with pytest.raises(Exception, match="lock timeout"):
        install.upgrade(dsn, lock_timeout_ms=300)
    db.rollback()
    assert install.upgrade(dsn).after == install.head_revision()


def test_upgrade_refuses_when_not_installed(plain_dsn: str, cli: Any) -> None:
    assert "not installed" in one_line_error(cli("upgrade", "--dsn", plain_dsn))


def test_uninstall_needs_confirmation(dsn: str, cli: Any, db: psycopg.Connection[Any]) -> None:
    line = one_line_error(cli("uninstall", "--dsn", dsn, input=""))
    assert "--yes" in line
    assert ttl_objects(db) == {"schema": (1,), "event_triggers": (3,)}


def test_uninstall_keeps_user_data(dsn: str, cli: Any, db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz, body text)")
    db.execute("INSERT INTO events SELECT g, now() - g * interval '1 day', 'x' FROM generate_series(1, 100) g")
    db.execute("SELECT ttl.enable('events', '1 day', 'created_at')")
    db.execute("SELECT ttl.enable_column('events', 'body', '1 day')")
    db.commit()
    result = cli("uninstall", "--dsn", dsn, "--yes")
    assert result.returncode == 0, result.stderr
    assert "1 TTL policy removed" in result.stdout
    assert ttl_objects(db) == {"schema": (0,), "event_triggers": (0,)}
    assert db.execute("SELECT count(*), count(body) FROM events").fetchone() == (100, 100)
    # DDL on the former TTL column works again (no event trigger left behind)
    db.execute("ALTER TABLE events DROP COLUMN created_at")
    db.commit()
    # and it can be installed again
    assert cli("install", "--dsn", dsn).returncode == 0
    assert cli("uninstall", "--dsn", dsn, "-y").returncode == 0
    assert "not installed" in cli("uninstall", "--dsn", dsn, "-y").stdout


def test_version(dsn: str, plain_dsn: str, cli: Any) -> None:
    result = cli("version", "--dsn", dsn)
    assert result.returncode == 0
    assert f"schema revision {install.head_revision()}" in result.stdout
    assert "not installed" in cli("version", "--dsn", plain_dsn).stdout


def test_connection_from_environment(dsn: str, cli: Any) -> None:
    assert cli("version", env={"PGTTL_DSN": dsn}).returncode == 0
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    env = {"PGHOST": str(params["host"]), "PGPORT": str(params["port"]), "PGUSER": str(params["user"]),
           "PGDATABASE": str(params["dbname"])}
    result = cli("list", env=env)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("bad_dsn, fragment, code", [
    ("host=127.0.0.1 port=1 connect_timeout=3", "cannot connect to PostgreSQL", 2),
    ("postgresql://nobody@127.0.0.1:1/x", "cannot connect to PostgreSQL", 2),
    ("this is = not a dsn", "invalid --dsn", 2),
])
def test_connection_errors_are_one_line(cli: Any, bad_dsn: str, fragment: str, code: int) -> None:
    for command in (["install"], ["version"], ["list"], ["uninstall", "--yes"]):
        result = cli(*command, "--dsn", bad_dsn, env={"COLUMNS": "40"})  # stays one line when narrow
        assert fragment in one_line_error(result)
        assert result.returncode == code


def test_unknown_database_is_one_line(dsn: str, cli: Any) -> None:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = "no_such_db"
    result = cli("install", "--dsn", psycopg.conninfo.make_conninfo(**params))
    assert 'database "no_such_db" does not exist' in one_line_error(result)


def test_install_without_privilege_is_one_line(plain_db: psycopg.Connection[Any], plain_dsn: str, cli: Any) -> None:
    plain_db.autocommit = True
    plain_db.execute("CREATE ROLE weakling LOGIN")
    try:
        plain_db.execute(f"GRANT CREATE ON DATABASE {plain_db.info.dbname} TO weakling")
        params = psycopg.conninfo.conninfo_to_dict(plain_dsn)
        params["user"] = "weakling"
        result = cli("install", "--dsn", psycopg.conninfo.make_conninfo(**params))
        assert result.returncode == 3
        assert "permission denied" in one_line_error(result)
        # nothing half-installed
        assert plain_db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'ttl'").fetchone() == (0,)
    finally:
        plain_db.execute("DROP OWNED BY weakling")
        plain_db.execute("DROP ROLE weakling")


def test_print_sql_needs_no_database(cli: Any) -> None:
    result = cli("install", "--print-sql", env={"PGHOST": "/nonexistent"})
    assert result.returncode == 0
    assert "CREATE TABLE ttl.policy" in result.stdout
    assert "CREATE EVENT TRIGGER pg_ttl_sql_drop" in result.stdout
    assert result.stdout.rstrip().endswith("COMMIT;")


def test_help_explains(cli: Any) -> None:
    result = cli("--help")
    assert result.returncode == 0
    for command in ("install", "upgrade", "uninstall", "version", "list", "describe", "demo"):
        assert command in result.stdout
    assert "PGTTL_DSN" in result.stdout
