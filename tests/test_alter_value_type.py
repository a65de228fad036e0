"""Changing the type of a CQL-style table's value column (ttl.alter_value_type).

Each value column carries a BEFORE UPDATE OF <column> trigger, and PostgreSQL refuses
ALTER COLUMN ... TYPE on a column a trigger is declared on. ttl.alter_value_type drops
that trigger, changes the type and makes the trigger again, keeping the values' TTLs,
with the caller's rights.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.fixture
def owner(db: Conn, dsn: str) -> Iterator[Conn]:
    """A session of carol, an ordinary role who owns the CQL-style table cq."""
    db.autocommit = True
    db.execute("CREATE ROLE carol LOGIN")
    db.execute("CREATE ROLE dave LOGIN")
    db.execute("GRANT CREATE, USAGE ON SCHEMA public TO carol")
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="carol"), autocommit=True)
    conn.execute("CREATE TABLE cq (id int PRIMARY KEY, v int, note text)")
    conn.execute("""SELECT ttl.set_options('cq', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    conn.execute("INSERT INTO cq VALUES (1, 1, 'a'), (2, 2, 'b')")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('1 hour')")
        conn.execute("UPDATE cq SET v = 10 WHERE id = 1")
    yield conn
    conn.close()
    db.execute("DROP OWNED BY carol CASCADE")
    db.execute("DROP ROLE carol")
    db.execute("DROP ROLE dave")


def _ttls(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT id, v::text, ttl.ttl(t, 'v'), ttl.write_time(t, 'v'), ttl.ttl(t) "
                        "FROM cq t ORDER BY id").fetchall()


def test_plain_alter_type_is_refused_by_postgresql(owner: Conn) -> None:
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="used in a trigger definition"):
        owner.execute("ALTER TABLE cq ALTER COLUMN v TYPE bigint")


def test_owner_changes_a_value_columns_type_and_the_ttls_stay(owner: Conn) -> None:
    before = _ttls(owner)
    assert before[0][2] is not None and before[0][2] <= 3600  # v of row 1: its own hour
    owner.execute("SELECT ttl.alter_value_type('cq', 'v', 'bigint')")
    owner.execute("SELECT ttl.alter_value_type('cq', 'note', 'varchar(20)', 'upper(note)')")
    types = owner.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
                          "WHERE attrelid = 'cq'::regclass AND attname IN ('v', 'note') ORDER BY attname").fetchall()
    assert types == [("note", "character varying(20)"), ("v", "bigint")]
    assert owner.execute("SELECT note FROM cq ORDER BY id").fetchall() == [("A",), ("B",)]
    after = _ttls(owner)
    # same values, same write times; TTLs only as much lower as the seconds that passed
    assert [(r[0], r[1], r[3]) for r in after] == [(r[0], r[1], r[3]) for r in before]
    for b, a in zip(before, after, strict=True):
        for i in (2, 4):
            assert (a[i] is None) == (b[i] is None) and (a[i] is None or 0 <= b[i] - a[i] <= 5)
    # the value's trigger is there again: an UPDATE of v with USING TTL gives v that TTL
    with owner.transaction():
        owner.execute("SELECT ttl.using_ttl('60 seconds')")
        owner.execute("UPDATE cq SET v = 20 WHERE id = 2")
    ttl = owner.execute("SELECT ttl.ttl(t, 'v') FROM cq t WHERE id = 2").fetchone()
    assert ttl is not None and 55 <= ttl[0] <= 60
    assert owner.execute("SELECT ttl._value_triggers_stale('cq'::regclass)").fetchone() == (False,)


def test_another_role_cannot(owner: Conn, dsn: str) -> None:
    owner.execute("GRANT SELECT, UPDATE ON cq TO dave")
    with (psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="dave"), autocommit=True) as dave,
          pytest.raises(psycopg.errors.InsufficientPrivilege)):
        dave.execute("SELECT ttl.alter_value_type('cq', 'v', 'bigint')")
    row = owner.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                        "WHERE attrelid = 'cq'::regclass AND attname = 'v'").fetchone()
    assert row == ("integer",)
    assert owner.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'cq'::regclass "
                         "AND tgname ~ '^ttl_value_[0-9]+$'").fetchone() == (2,)


@pytest.mark.parametrize(("call", "message"), [
    ("SELECT ttl.alter_value_type('cq', 'id', 'bigint')", "is not a value column"),
    ("SELECT ttl.alter_value_type('cq', 'nope', 'bigint')", r'column "nope" of table (public\.)?cq does not exist\n'),
    ("SELECT ttl.alter_value_type('cq', 'v', ' ')", "a type is needed"),
    ("SELECT ttl.alter_value_type('plain', 'v', 'bigint')", "is not CQL-style"),
])
def test_bad_input_is_refused_and_changes_nothing(owner: Conn, call: str, message: str) -> None:
    owner.execute("CREATE TABLE plain (id int PRIMARY KEY, v int)")
    with pytest.raises(psycopg.Error, match=message):
        owner.execute(call)
    assert owner.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'cq'::regclass "
                         "AND tgname ~ '^ttl_value_[0-9]+$'").fetchone() == (2,)


def test_a_failed_change_keeps_the_trigger(owner: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        owner.execute("SELECT ttl.alter_value_type('cq', 'note', 'int', 'note::int')")
    assert owner.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'cq'::regclass "
                         "AND tgname ~ '^ttl_value_[0-9]+$'").fetchone() == (2,)


def test_a_partitioned_and_a_strict_table(owner: Conn) -> None:
    """On a partitioned table the partitions' triggers follow; with strict visibility the
    ttl_live view (which depends on the column too) is made again with the new type."""
    owner.execute("CREATE TABLE pq (id int, d date, v int, PRIMARY KEY (id, d)) PARTITION BY RANGE (d)")
    owner.execute("CREATE TABLE pq_1 PARTITION OF pq FOR VALUES FROM ('2020-01-01') TO ('2030-01-01')")
    owner.execute("""SELECT ttl.set_options('pq', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    owner.execute("INSERT INTO pq VALUES (1, '2026-01-01', 1)")
    owner.execute("SELECT ttl.alter_value_type('pq', 'v', 'bigint')")
    with owner.transaction():
        owner.execute("SELECT ttl.using_ttl('60 seconds')")
        owner.execute("UPDATE pq SET v = 5")
    row = owner.execute("SELECT pg_typeof(v)::text, ttl.ttl(t, 'v') FROM pq_1 t").fetchone()
    assert row is not None and row[0] == "bigint" and 55 <= row[1] <= 60

    owner.execute("""SELECT ttl.set_option('cq', 'strict', 'true')""")
    owner.execute("SELECT ttl.alter_value_type('cq', 'v', 'numeric(12,2)')")
    shown = owner.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                          "WHERE attrelid = 'ttl_live.cq'::regclass AND attname = 'v'").fetchone()
    assert shown == ("numeric(12,2)",)
    assert owner.execute("SELECT id, v FROM ttl_live.cq ORDER BY id").fetchall() == [(1, 10), (2, 2)]
