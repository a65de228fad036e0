"""Event triggers keep the catalog true: drops, renames, retypes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.helpers import catalog_state


@pytest.fixture
def conn(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.autocommit = True
    db.execute("CREATE SCHEMA app")
    db.execute("CREATE TABLE app.events (id int PRIMARY KEY, created_at timestamptz, body text, n int)")
    db.execute("CREATE TABLE app.sessions (id int PRIMARY KEY, expire_at timestamptz)")
    db.execute("CREATE TABLE keep (id int PRIMARY KEY, created_at timestamptz, note text)")
    db.execute("SELECT ttl.enable('app.events', '30 days', 'created_at')")
    db.execute("SELECT ttl.enable_column('app.events', 'body', '7 days')")
    db.execute("SELECT ttl.enable('app.sessions', expiration_expression => 'expire_at + interval ''1 hour''')")
    db.execute("SELECT ttl.enable('keep', '1 day', 'created_at')")
    return db


def policy_tables(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute("SELECT table_name FROM ttl.policies ORDER BY 1").fetchall()]


def test_drop_table_removes_policy(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP TABLE app.events")
    assert policy_tables(conn) == ["app.sessions", "keep"]
    assert conn.execute("SELECT count(*) FROM ttl.column_policy").fetchone() == (0,)


def test_drop_schema_cascade_removes_policies(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP SCHEMA app CASCADE")
    assert policy_tables(conn) == ["keep"]
    assert conn.execute("SELECT count(*) FROM ttl.column_policy").fetchone() == (0,)


def test_drop_table_by_non_superuser_owner(conn: psycopg.Connection[Any], connect: Any) -> None:
    conn.execute("CREATE ROLE app_owner LOGIN")
    conn.execute("GRANT CREATE, USAGE ON SCHEMA public TO app_owner")
    other = connect(user="app_owner")
    other.execute("CREATE TABLE mine (id int, created_at timestamptz)")
    other.execute("SELECT ttl.enable('mine', '1 day', 'created_at')")
    other.execute("DROP TABLE mine")
    assert "mine" not in policy_tables(conn)
    other.close()
    conn.execute("DROP OWNED BY app_owner")
    conn.execute("DROP ROLE app_owner")


def test_rename_keeps_policy(conn: psycopg.Connection[Any]) -> None:
    conn.execute("ALTER TABLE app.events RENAME TO happenings")
    conn.execute("ALTER TABLE app.happenings RENAME COLUMN created_at TO born_at")
    conn.execute("ALTER TABLE app.happenings SET SCHEMA public")
    assert "happenings" in policy_tables(conn)
    row = conn.execute("SELECT ttl_column FROM ttl.policies WHERE table_name = 'happenings'").fetchone()
    assert row == ("born_at",)
    assert conn.execute("SELECT column_name FROM ttl.column_policies").fetchone() == ("body",)


@pytest.mark.parametrize(
    "ddl, expected",
    [
        ("ALTER TABLE app.events DROP COLUMN created_at", "cannot drop column app.events.created_at"),
        ("ALTER TABLE app.events DROP COLUMN body", "cannot drop column app.events.body"),
        ("ALTER TABLE app.events ALTER COLUMN created_at TYPE timestamp",
         'cannot change the type of column "created_at" of table app.events'),
        ("ALTER TABLE app.events ALTER COLUMN body TYPE varchar(10)",
         'cannot change the type of column "body" of table app.events'),
        ("ALTER TABLE app.sessions DROP COLUMN expire_at", 'breaks the "ttl_expiration_expression"'),
        ("ALTER TABLE app.sessions RENAME COLUMN expire_at TO ends_at", 'breaks the "ttl_expiration_expression"'),
        ("ALTER TABLE app.sessions ALTER COLUMN expire_at TYPE text", 'breaks the "ttl_expiration_expression"'),
    ],
)
def test_column_changes_refused(conn: psycopg.Connection[Any], ddl: str, expected: str) -> None:
    before = catalog_state(conn)
    columns_before = conn.execute(
        "SELECT attname, atttypid FROM pg_attribute WHERE attrelid IN ('app.events'::regclass, "
        "'app.sessions'::regclass) AND attnum > 0 AND NOT attisdropped ORDER BY 1").fetchall()
    with pytest.raises(psycopg.Error) as info:
        conn.execute(ddl)
    assert expected in str(info.value)
    assert "ttl.disable" in (info.value.diag.message_hint or "") or "Disable" in (info.value.diag.message_hint or "")
    assert catalog_state(conn) == before
    columns_after = conn.execute(
        "SELECT attname, atttypid FROM pg_attribute WHERE attrelid IN ('app.events'::regclass, "
        "'app.sessions'::regclass) AND attnum > 0 AND NOT attisdropped ORDER BY 1").fetchall()
    assert columns_after == columns_before


def test_unrelated_column_changes_allowed(conn: psycopg.Connection[Any]) -> None:
    conn.execute("ALTER TABLE app.events DROP COLUMN n")
    conn.execute("ALTER TABLE app.events ADD COLUMN extra int")
    conn.execute("ALTER TABLE keep ALTER COLUMN note TYPE varchar(100)")
    conn.execute("CREATE TABLE unrelated (a int); DROP TABLE unrelated")
    assert policy_tables(conn) == ["app.events", "app.sessions", "keep"]


def test_disable_then_drop_column_works(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT ttl.disable('app.events')")
    conn.execute("ALTER TABLE app.events DROP COLUMN created_at")
    assert "app.events" not in policy_tables(conn)
