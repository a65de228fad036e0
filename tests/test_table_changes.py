"""Changes to users' tables are made by the SQL API, explicitly; the triggers on
the catalog only validate (and refuse a direct write that would need the
table to change instead of leaving it out of step)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.execute("CREATE TABLE rows_t (id int PRIMARY KEY, v text)")  # per-row TTL
    db.execute("CREATE TABLE plain (id int PRIMARY KEY, at timestamptz, v text)")
    db.commit()
    db.autocommit = True
    return db


def expiry_default(conn: Conn, table: str) -> str:
    row = conn.execute(
        "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a"
        " ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = %s::regclass"
        " AND a.attname = 'ttl_expires_at'", (table,)).fetchone()
    assert row is not None
    return str(row[0])


def columns(conn: Conn, table: str) -> list[str]:
    return [str(r[0]) for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
        " ORDER BY attnum", (table,)).fetchall()]


def test_the_catalog_triggers_are_validation_only(conn: Conn) -> None:
    triggers = conn.execute(
        "SELECT tgrelid::regclass::text, tgname, tgfoid::regproc::text FROM pg_trigger"
        " WHERE tgrelid IN ('ttl.policy'::regclass, 'ttl.column_policy'::regclass) ORDER BY 1, 2").fetchall()
    assert triggers == [
        ("ttl.column_policy", "validate", "ttl._validate_column_policy"),
        ("ttl.column_policy", "validate_delete", "ttl._validate_column_policy_delete"),
        ("ttl.policy", "validate", "ttl._validate_policy"),
        ("ttl.policy", "validate_delete", "ttl._validate_policy_delete"),
    ]


def test_the_api_changes_the_table_and_a_direct_write_that_would_is_refused(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('rows_t', expire_after => '1 day')")
    assert {"ttl_expires_at", "ttl_written_at"} <= set(columns(conn, "rows_t"))
    assert "'1 day'" in expiry_default(conn, "rows_t")

    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
        conn.execute("UPDATE ttl.policy SET expire_after = '2 days' WHERE relid = 'rows_t'::regclass")
    assert "also changes the table" in str(info.value)
    assert "ttl.set_options" in (info.value.diag.message_hint or "")
    assert "'1 day'" in expiry_default(conn, "rows_t")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("DELETE FROM ttl.policy WHERE relid = 'rows_t'::regclass")
    assert conn.execute("SELECT count(*) FROM ttl.policy WHERE relid = 'rows_t'::regclass").fetchone() == (1,)

    conn.execute("SELECT ttl.set_option('rows_t', 'expire_after', '2 days')")
    assert "'2 days'" in expiry_default(conn, "rows_t")
    conn.execute("SELECT ttl.disable('rows_t')")
    assert columns(conn, "rows_t") == ["id", "v"]


def test_a_direct_insert_that_needs_added_columns_is_refused(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("INSERT INTO ttl.policy (relid, expire_after) VALUES ('rows_t'::regclass, '1 day')")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("INSERT INTO ttl.policy (relid, ttl_attnum, expire_after, strict_visibility)"
                     " VALUES ('plain'::regclass, 2, '1 day', true)")
    assert columns(conn, "rows_t") == ["id", "v"]
    assert conn.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_direct_writes_that_leave_the_table_alone_work_and_lock_it_only_to_read(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('rows_t', expire_after => '1 day')")
    conn.execute("SELECT ttl.set_option('rows_t', 'strict', 'true')")
    conn.execute("INSERT INTO ttl.policy (relid, ttl_attnum, expire_after) VALUES ('plain'::regclass, 2, '1 day')")
    conn.autocommit = False
    conn.execute("UPDATE ttl.policy SET delete_batch_size = 7, paused = true")
    # Validation parses the expiry expression against the table (ACCESS SHARE); nothing more.
    locked = conn.execute(
        "SELECT DISTINCT mode FROM pg_locks WHERE pid = pg_backend_pid()"
        " AND relation IN ('rows_t'::regclass, 'plain'::regclass)").fetchall()
    assert set(locked) <= {("AccessShareLock",)}
    conn.commit()
    assert conn.execute("SELECT array_agg(delete_batch_size) FROM ttl.policy").fetchone() == ([7, 7],)


def test_column_ttl_counted_from_writes_goes_through_the_api(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable_column('plain', 'v', '1 hour', 'write')")
    assert "ttl_cell_v" in columns(conn, "plain")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("DELETE FROM ttl.column_policy WHERE relid = 'plain'::regclass")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        conn.execute("INSERT INTO ttl.column_policy (relid, attnum, atttypid, expire_after, relative_to)"
                     " VALUES ('rows_t'::regclass, 2, 0, '1 hour', 'write')")
    conn.execute("SELECT ttl.enable_column('plain', 'v', '2 hours')")  # keeps its base and tracking column
    assert conn.execute("SELECT relative_to FROM ttl.column_policy").fetchone() == ("write",)
    conn.execute("SELECT ttl.disable_column('plain', 'v')")
    assert columns(conn, "plain") == ["id", "at", "v"]


def test_enabling_per_row_ttl_says_what_it_adds_to_the_table(conn: Conn) -> None:
    notices: list[tuple[str, str]] = []  # read inside the handler: the diagnostic is freed after it
    conn.add_notice_handler(lambda d: notices.append((d.message_primary or "", d.message_hint or "")))
    conn.execute("SELECT ttl.enable('rows_t', expire_after => '1 day')")
    assert any("added columns ttl_expires_at" in m and "ttl_written_at" in m and "trigger" in m and "ttl_column" in h
               for m, h in notices), notices
    notices.clear()
    conn.execute("SELECT ttl.enable('plain', expire_after => '1 day', column_name => 'at')")
    assert not any("added columns" in m for m, _ in notices)
