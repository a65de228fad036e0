"""The semantic cases of the public CQL TTL test suites, ported to pg_ttl's CQL-style tables.

Sources (each test names its own in its docstring):

- Cassandra dtest ``ttl_test.py`` (``TestTTL``, ``TestDistributedTTL``);
- Cassandra unit tests ``cql3/validation/operations/TTLTest.java``,
  ``cql3/validation/entities/TTLTest.java`` and ``cql3/validation/entities/TimestampTest.java``;
- ScyllaDB ``test/cqlpy/test_ttl.py``;
- YugabyteDB ``java/yb-cql/src/test/java/org/yb/cql/TestTTLSemantics.java`` and ``TestTableTTL.java``.

The CQL table ``ttl_table (key int PRIMARY KEY, col1 int, col2 int, col3 int)`` of the
dtest is used throughout (YugabyteDB's ``c1, c2, c3`` are ``col1, col2, col3``; its
compound primary keys change nothing here). CQL statements go through
``pg_ttl.ddl.rewrite`` as a user's would; TTLs are whole seconds, scaled down to 1-4 s.

Time: the writes of one step run in one transaction, so they share the server's
``now()`` (``t0``) and every expiry is exact (``t0 + TTL``). Instead of sleeping
once per stage as the sources do, a test waits once until the server clock has
passed its last expiry, then runs the engine with explicit cutoffs between the
expiries (``cutoff=t0 + 1.5 s``, ...), in order: the table then holds what CQL
shows at that instant. Reads of not-yet-removed data go through strict
visibility as an unprivileged role (row security and ``ttl_live.ttl_table``).

Not ported: per-element TTLs of CQL collections (``test_collection_*_ttl``,
``testCollections``: PostgreSQL arrays and jsonb are one value), TTL overflow and
scrub tests (Cassandra storage limits), distributed replication and repair.
Where PostgreSQL cannot behave as CQL (UPDATE never creates a row; INSERT of an
existing key is a primary-key error, CQL's INSERT-overwrite is INSERT ... ON
CONFLICT DO UPDATE with the EXCLUDED marker columns), the test asserts
pg_ttl's documented behaviour and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from pg_ttl.ddl.rewrite import TtlDdlError, rewrite
from pg_ttl.expire import engine

Conn = psycopg.Connection[Any]
Row = tuple[Any, ...]
Reader = Callable[[str], list[Row]]

TABLE = "ttl_table"
READER = "cql_semantics_reader"
ALL = f"SELECT key, col1, col2, col3 FROM {TABLE} ORDER BY key"
LIVE = f"SELECT key, col1, col2, col3 FROM ttl_live.{TABLE} ORDER BY key"
# CQL's INSERT of an existing key overwrites its values and writes a new row marker.
OVERWRITE_ALL = ("ON CONFLICT (key) DO UPDATE SET col1 = EXCLUDED.col1, col2 = EXCLUDED.col2, col3 = EXCLUDED.col3, "
                 "ttl_expires_at = EXCLUDED.ttl_expires_at, ttl_written_at = EXCLUDED.ttl_written_at")
OVERWRITE_COL1 = ("ON CONFLICT (key) DO UPDATE SET col1 = EXCLUDED.col1, "
                  "ttl_expires_at = EXCLUDED.ttl_expires_at, ttl_written_at = EXCLUDED.ttl_written_at")


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def cql(conn: Conn, statement: str) -> None:
    """One CQL statement (USING TTL, default_time_to_live), as TTL DDL rewrites it."""
    conn.execute(rewrite(statement))


def prepare(db: Conn, default_time_to_live: int = 0) -> None:
    """The dtest's ``prepare``: a CQL table; 0 = no default TTL (as CQL without the option)."""
    cql(db, f"CREATE TABLE {TABLE} (key int PRIMARY KEY, col1 int, col2 int, col3 int) "
            f"WITH (default_time_to_live = {default_time_to_live})")
    db.commit()


def write(db: Conn, *statements: str) -> datetime:
    """CQL statements in one transaction; returns its ``now()``, the write time of all of them."""
    for statement in statements:
        cql(db, statement)
    now = one(db, "SELECT now()")
    db.commit()
    assert isinstance(now, datetime)
    return now


def one(conn: Conn, sql: str, params: tuple[Any, ...] | None = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def rows(db: Conn) -> list[Row]:
    """The table as stored (read by its owner: nothing hidden)."""
    found = db.execute(ALL).fetchall()
    db.commit()
    return found


def expiries(db: Conn, key: int) -> Row:
    """ttl.expires_at of the row and of col1..col3 (None: never, or no value)."""
    found: Row | None = db.execute(f"SELECT ttl.expires_at(p), ttl.expires_at(p, 'col1'), ttl.expires_at(p, 'col2'), "
                       f"ttl.expires_at(p, 'col3') FROM {TABLE} p WHERE key = %s", (key,)).fetchone()
    assert found is not None, f"no row {key}"
    return found


def ttls(db: Conn, key: int) -> Row:
    """CQL's ttl(col1), ttl(col2), ttl(col3): whole seconds left, None when none."""
    found: Row | None = db.execute(f"SELECT ttl.ttl(p, 'col1'), ttl.ttl(p, 'col2'), ttl.ttl(p, 'col3') FROM {TABLE} p "
                       f"WHERE key = %s", (key,)).fetchone()
    assert found is not None, f"no row {key}"
    db.commit()
    return found


def wait_until(db: Conn, instant: datetime) -> None:
    """Until the server's clock has passed ``instant``."""
    while True:
        left = one(db, "SELECT %s::timestamptz - clock_timestamp()", (instant,))
        db.commit()
        if left < timedelta(0):
            return
        time.sleep(left.total_seconds() + 0.02)


def expire(db: Conn, dsn: str, cutoff: datetime | None = None) -> tuple[int, int]:
    """One engine pass over the table (``cutoff``: the instant it expires at, default the
    server's now); returns (rows deleted, values nulled)."""
    db.commit()
    results = engine.expire(dsn, [TABLE], cutoff=cutoff)
    assert [r.status for r in results] == ["ok"], results
    return sum(r.rows_deleted for r in results), sum(r.values_nulled for r in results)


@pytest.fixture
def reader(db: Conn) -> Iterator[Reader]:
    """Strict visibility on ``ttl_table`` (call after ``prepare``) and a reading role
    subject to it: ``read(sql)`` runs a query as that role, at a fresh ``now()``."""
    db.execute(f"CREATE ROLE {READER}")
    db.commit()

    def read(sql: str) -> list[Row]:
        db.commit()
        db.execute(f"SET ROLE {READER}")
        try:
            found = db.execute(sql).fetchall()
        except BaseException:
            db.rollback()  # undoes SET ROLE too
            raise
        db.execute("RESET ROLE")
        db.commit()
        return found

    yield read
    db.rollback()
    db.execute("RESET ROLE")
    db.execute(f"DROP OWNED BY {READER}")
    db.execute(f"DROP ROLE {READER}")
    db.commit()


def make_strict(db: Conn) -> None:
    db.execute(f"SELECT ttl.set_option('{TABLE}', 'strict', 'true')")
    db.execute(f"GRANT SELECT ON {TABLE} TO {READER}")
    db.commit()


# ---------------------------------------------------------------- table default vs USING TTL


def test_default_ttl(db: Conn, dsn: str, reader: Reader) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_default_ttl; YugabyteDB TestTableTTL.testSimpleTableTTL.

    Rows inserted without USING TTL into a table with default_time_to_live expire
    with the default: hidden from readers once it passed, deleted by the engine.
    """
    prepare(db, default_time_to_live=1)
    make_strict(db)
    t0 = write(db, *(f"INSERT INTO ttl_table (key, col1) VALUES ({k}, {k})" for k in (1, 2, 3)))
    assert [expiries(db, k)[0] for k in (1, 2, 3)] == [t0 + s(1)] * 3
    assert reader(ALL) == [(1, 1, None, None), (2, 2, None, None), (3, 3, None, None)]
    wait_until(db, t0 + s(1))
    assert reader(ALL) == []  # before the engine ran
    assert reader(LIVE) == []
    assert expire(db, dsn) == (3, 0)
    assert rows(db) == []


def test_insert_ttl_has_priority_on_default_ttl(db: Conn, dsn: str, reader: Reader) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_insert_ttl_has_priority_on_defaut_ttl;
    ScyllaDB test_ttl.py test_basic_default_ttl; YugabyteDB TestTableTTL.testTableTTLOverride.

    USING TTL on INSERT replaces the table default for that row (a longer one
    here); a row without it gets the default and is invisible within the next
    second (ScyllaDB polls for that without any background process).
    """
    prepare(db, default_time_to_live=1)
    make_strict(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1) VALUES (1, 1) USING TTL 1000",
               "INSERT INTO ttl_table (key, col1) VALUES (2, 1)")
    assert expiries(db, 1)[:2] == (t0 + s(1000), t0 + s(1000))
    assert expiries(db, 2)[:2] == (t0 + s(1), t0 + s(1))
    start = time.monotonic()
    while (2, 1, None, None) in reader(ALL):
        assert time.monotonic() < start + 2, "the row with the default TTL of 1 s is still visible"
        time.sleep(0.1)
    assert reader(ALL) == [(1, 1, None, None)]
    assert ttls(db, 1)[0] in (999, 1000)
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == [(1, 1, None, None)]


def test_insert_ttl_works_without_default_ttl(db: Conn, dsn: str) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_insert_ttl_works_without_default_ttl;
    YugabyteDB TestTableTTL.testTableTTLZero.

    default_time_to_live = 0: USING TTL 1 expires its row, a row without USING TTL never expires.
    """
    prepare(db, default_time_to_live=0)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 3) USING TTL 1",
               "INSERT INTO ttl_table (key, col1, col2) VALUES (2, 2, 3)")
    assert expiries(db, 1)[:3] == (t0 + s(1), t0 + s(1), t0 + s(1))
    assert expiries(db, 2) == (None, None, None, None)
    wait_until(db, t0 + s(1))
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == [(2, 2, 3, None)]


def test_default_ttl_0_override(db: Conn) -> None:
    """ScyllaDB test_ttl.py test_default_ttl_0_override (Scylla issue #9842);
    YugabyteDB TestTableTTL.testTableTTLWithTTLZero.

    USING TTL 0 overrides the table default: the row and its values never
    expire, and ttl(v) is null right away (no sleep needed).
    """
    prepare(db, default_time_to_live=100)
    write(db, "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 3) USING TTL 0")
    assert ttls(db, 1) == (None, None, None)
    assert expiries(db, 1) == (None, None, None, None)


def test_default_ttl_unset_override(db: Conn) -> None:
    """ScyllaDB test_ttl.py test_default_ttl_unset_override; Cassandra
    cql3/validation/entities/TTLTest.java testNullTTL.

    An unset (NULL) TTL is no TTL at all: with a table default the default
    applies (ScyllaDB), without one the value never expires (Cassandra's
    ``USING TTL ?`` bound to null gives ttl(v) = null).
    """
    prepare(db, default_time_to_live=100)
    db.execute("SELECT ttl.using_ttl(NULL)")
    db.execute("INSERT INTO ttl_table (key, col1) VALUES (1, 1)")
    t0 = one(db, "SELECT now()")
    db.commit()
    assert expiries(db, 1)[:2] == (t0 + s(100), t0 + s(100))
    assert ttls(db, 1)[0] == 100

    cql(db, "ALTER TABLE ttl_table SET (default_time_to_live = 0)")
    db.execute("SELECT ttl.using_ttl(NULL)")
    db.execute("INSERT INTO ttl_table (key, col1) VALUES (2, 1)")
    db.commit()
    assert rows(db) == [(1, 1, None, None), (2, 1, None, None)]
    assert ttls(db, 2) == (None, None, None)


def test_negative_ttls_are_refused(db: Conn) -> None:
    """Cassandra cql3/validation/operations/TTLTest.java testTTLPerRequestLimit and
    testTTLDefaultLimit; YugabyteDB TestTableTTL.testValidInvalidTableTTL.

    A negative USING TTL (INSERT and UPDATE) or default_time_to_live is refused
    and writes nothing; a low one is accepted. (CQL's upper limit, 20 years, is
    a Cassandra storage limit that PostgreSQL does not have.)
    """
    with pytest.raises(TtlDdlError, match="default_time_to_live"):
        rewrite(f"CREATE TABLE {TABLE} (key int PRIMARY KEY, col1 int) WITH (default_time_to_live = -1)")
    prepare(db, default_time_to_live=5)
    with pytest.raises(TtlDdlError, match="USING TTL"):
        rewrite("INSERT INTO ttl_table (key, col1) VALUES (1, 1) USING TTL -1")
    with pytest.raises(TtlDdlError, match="USING TTL"):
        rewrite("UPDATE ttl_table USING TTL -1 SET col1 = 1 WHERE key = 2")
    with pytest.raises(TtlDdlError, match="default_time_to_live"):
        rewrite(f"ALTER TABLE {TABLE} SET (default_time_to_live = -1)")
    # the SQL the rewrite emits (and the plain SQL API) refuses them too
    for call in (f"ttl.using_ttl('-1 seconds'::interval, '{TABLE}'::regclass)",
                 f"ttl.using_ttl('-1 seconds'::interval, '{TABLE}'::regclass, '{{col1}}'::name[])",
                 "ttl.using_ttl('-1 seconds')"):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="negative"):
            db.execute(f"SELECT {call}")
        db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="negative"):
        db.execute("SELECT ttl.set_options(%s::regclass, %s::jsonb)",
                   (TABLE, '{"expire_after": "-1 seconds", "value_ttls": "true"}'))
    db.rollback()
    assert one(db, f"SELECT expire_after FROM ttl.policy WHERE relid = '{TABLE}'::regclass") == s(5)
    assert rows(db) == []
    t0 = write(db, "INSERT INTO ttl_table (key, col1) VALUES (1, 1) USING TTL 10")
    assert expiries(db, 1)[:2] == (t0 + s(10), t0 + s(10))


def test_default_ttl_can_be_removed(db: Conn) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_default_ttl_can_be_removed.

    ALTER TABLE ... default_time_to_live = 0 removes the default: a row
    inserted afterwards never expires.
    """
    prepare(db, default_time_to_live=1)
    cql(db, "ALTER TABLE ttl_table SET (default_time_to_live = 0)")
    db.commit()
    write(db, "INSERT INTO ttl_table (key, col1) VALUES (1, 1)")
    assert expiries(db, 1) == (None, None, None, None)
    assert ttls(db, 1) == (None, None, None)


def test_removing_default_ttl_does_not_affect_existing_rows(db: Conn) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_removing_default_ttl_does_not_affect_existing_rows.

    default_time_to_live applies when a row is written: changing it (to 10,
    then to 0) leaves the expiry of rows already written as it was.
    """
    prepare(db, default_time_to_live=1)
    cql(db, "ALTER TABLE ttl_table SET (default_time_to_live = 10)")
    db.commit()
    t0 = write(db, "INSERT INTO ttl_table (key, col1) VALUES (1, 1)",
               "INSERT INTO ttl_table (key, col1) VALUES (2, 1) USING TTL 15")
    cql(db, "ALTER TABLE ttl_table SET (default_time_to_live = 0)")
    db.commit()
    write(db, "INSERT INTO ttl_table (key, col1) VALUES (3, 1)")
    assert expiries(db, 1)[:2] == (t0 + s(10), t0 + s(10))
    assert expiries(db, 2)[:2] == (t0 + s(15), t0 + s(15))
    assert expiries(db, 3)[:2] == (None, None)


def test_altered_default_ttl_applies_to_later_writes_only(db: Conn) -> None:
    """YugabyteDB TestTableTTL.testColumnTTLAfterIncrease, testColumnTTLAfterDecrease,
    testTableTTLAfterAlter and testRowTTLAfterAlter, with Cassandra's semantics.

    YugabyteDB applies an altered table TTL to data already written; Cassandra
    (and pg_ttl, see TestTTL.test_removing_default_ttl_does_not_affect_existing_rows)
    only to later writes. So after ``default 5 s; INSERT; UPDATE USING TTL 60 SET
    col1; ALTER default 2 s`` col2 still expires at 5 s (YugabyteDB: 2 s) and col1
    at 60 s; an UPDATE or INSERT after the ALTER takes the new default.
    """
    prepare(db, default_time_to_live=5)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 3)",
               "UPDATE ttl_table USING TTL 60 SET col1 = 20 WHERE key = 1")
    cql(db, "ALTER TABLE ttl_table SET (default_time_to_live = 2)")
    db.commit()
    assert expiries(db, 1) == (t0 + s(60), t0 + s(60), t0 + s(5), None)
    t1 = write(db, "UPDATE ttl_table SET col3 = 30 WHERE key = 1",
               "INSERT INTO ttl_table (key, col1, col2) VALUES (4, 5, 6)")
    assert expiries(db, 1) == (t0 + s(60), t0 + s(60), t0 + s(5), t1 + s(2))
    assert expiries(db, 4)[:3] == (t1 + s(2), t1 + s(2), t1 + s(2))
    cql(db, "ALTER TABLE ttl_table SET (default_time_to_live = 50)")
    db.commit()
    assert expiries(db, 4)[:3] == (t1 + s(2), t1 + s(2), t1 + s(2))


# ---------------------------------------------------------------- UPDATE: values, not the row marker


def test_update_single_column_ttl(db: Conn, dsn: str, reader: Reader) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_update_single_column_ttl.

    UPDATE USING TTL sets the TTL of the value it writes only: when it passed,
    that value reads NULL (through ttl_live before the engine runs; ttl() is then
    0, pg_ttl's "expired, not yet removed") and the row stays with its other
    values; the engine then stores the NULL.
    """
    prepare(db)
    make_strict(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1)")
    t1 = write(db, "UPDATE ttl_table USING TTL 1 SET col1 = 42 WHERE key = 1")
    assert reader(LIVE) == [(1, 42, 1, 1)]
    assert expiries(db, 1) == (None, t1 + s(1), None, None)
    assert one(db, "SELECT ttl.write_time(p, 'col1') FROM ttl_table p") == t1
    assert one(db, "SELECT ttl.write_time(p, 'col2') FROM ttl_table p") == t0
    wait_until(db, t1 + s(1))
    assert reader(LIVE) == [(1, None, 1, 1)]
    assert reader(ALL) == [(1, 42, 1, 1)]  # the row is live; its expired value is in the table until the engine runs
    assert ttls(db, 1) == (0, None, None)
    assert expire(db, dsn) == (0, 1)
    assert rows(db) == [(1, None, 1, 1)]
    assert ttls(db, 1) == (None, None, None)
    assert one(db, "SELECT ttl_values FROM ttl_table") is None


def test_update_multiple_columns_ttl(db: Conn, dsn: str, reader: Reader) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_update_multiple_columns_ttl.

    UPDATE USING TTL of every value: all of them expire, the row (its marker
    written by the INSERT, without TTL) stays with NULLs.
    """
    prepare(db)
    make_strict(db)
    write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1)")
    t1 = write(db, "UPDATE ttl_table USING TTL 1 SET col1 = 42, col2 = 42, col3 = 42 WHERE key = 1")
    assert reader(LIVE) == [(1, 42, 42, 42)]
    wait_until(db, t1 + s(1))
    assert reader(LIVE) == [(1, None, None, None)]
    assert expire(db, dsn) == (0, 3)
    assert rows(db) == [(1, None, None, None)]
    assert expiries(db, 1) == (None, None, None, None)


def test_update_column_ttl_with_default_ttl(db: Conn, dsn: str) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_update_column_ttl_with_default_ttl.

    A value's USING TTL shorter than the table default: that value goes first
    (row ``[1, None, 1, 1]``), the row with the default.
    """
    prepare(db, default_time_to_live=2)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1)",
               "UPDATE ttl_table USING TTL 1 SET col1 = 42 WHERE key = 1")
    assert rows(db) == [(1, 42, 1, 1)]
    assert expiries(db, 1) == (t0 + s(2), t0 + s(1), t0 + s(2), t0 + s(2))
    wait_until(db, t0 + s(2))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 1)
    assert rows(db) == [(1, None, 1, 1)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_update_column_ttl_with_default_ttl2(db: Conn, dsn: str) -> None:
    """Cassandra dtest ttl_test.py TestTTL.update_column_ttl_with_default_ttl_test2.

    A value's USING TTL longer than the table default keeps the row alive after
    its marker expired: ``[1, 42, None, None]``, then nothing.
    """
    prepare(db, default_time_to_live=1)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1)",
               "UPDATE ttl_table USING TTL 2 SET col1 = 42 WHERE key = 1")
    assert expiries(db, 1) == (t0 + s(2), t0 + s(2), t0 + s(1), t0 + s(1))
    wait_until(db, t0 + s(2))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 2)
    assert rows(db) == [(1, 42, None, None)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_remove_column_ttl(db: Conn, dsn: str, reader: Reader) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_remove_column_ttl; YugabyteDB
    TestTTLSemantics.testRowSurvivesWithSingleColumn.

    After INSERT USING TTL 1, an UPDATE without TTL (no default) rewrites one
    value without TTL: that value outlives the row marker and keeps the row,
    ``[1, 42, None, None]``, for good.
    """
    prepare(db)
    make_strict(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1) USING TTL 1",
               "UPDATE ttl_table SET col1 = 42 WHERE key = 1")
    assert expiries(db, 1) == (None, None, t0 + s(1), t0 + s(1))
    wait_until(db, t0 + s(1))
    assert reader(ALL) == [(1, 42, 1, 1)]
    assert reader(LIVE) == [(1, 42, None, None)]
    assert expire(db, dsn) == (0, 2)
    assert rows(db) == [(1, 42, None, None)]
    assert ttls(db, 1) == (None, None, None)


def test_set_ttl_to_zero_to_default_ttl(db: Conn, dsn: str) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_set_ttl_to_zero_to_default_ttl (CASSANDRA-11207).

    UPDATE USING TTL 0 on a table with a default: the value never expires (and
    keeps its row); another value with USING TTL 2 expires, and its row with it.
    Cassandra before 3.6 fell back to the default for TTL 0
    (TestTTL.test_remove_column_ttl_with_default_ttl); pg_ttl does as 3.6+.
    """
    prepare(db, default_time_to_live=1)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1)",
               "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (2, 1, 1, 1)",
               "UPDATE ttl_table USING TTL 0 SET col1 = 42 WHERE key = 1",
               "UPDATE ttl_table USING TTL 2 SET col1 = 42 WHERE key = 2")
    assert expiries(db, 1) == (None, None, t0 + s(1), t0 + s(1))
    assert expiries(db, 2) == (t0 + s(2), t0 + s(2), t0 + s(1), t0 + s(1))
    wait_until(db, t0 + s(2))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 4)
    assert rows(db) == [(1, 42, None, None), (2, 42, None, None)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == [(1, 42, None, None)]


def test_delete_with_ttl_expired(db: Conn, dsn: str) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_delete_with_ttl_expired (CASSANDRA-6363).

    A value that expired does not keep a conditional DELETE (CQL ``DELETE ...
    IF usr = 'abc'``: here ``WHERE ... AND usr = 'abc'``) from deleting its row,
    before and after the engine removed the value.
    """
    cql(db, "CREATE TABLE session (id text PRIMARY KEY, usr text, valid int) WITH (default_time_to_live = 0)")
    db.commit()
    t0 = write(db, "INSERT INTO session (id, usr) VALUES ('abc', 'abc'), ('def', 'def')",
               "UPDATE session USING TTL 1 SET valid = 1 WHERE id IN ('abc', 'def')")
    wait_until(db, t0 + s(1))
    assert db.execute("DELETE FROM session WHERE id = 'abc' AND usr = 'abc'").rowcount == 1
    db.commit()
    results = engine.expire(dsn, ["session"])
    assert [(r.status, r.rows_deleted, r.values_nulled) for r in results] == [("ok", 0, 1)]
    assert db.execute("SELECT id, usr, valid FROM session").fetchall() == [("def", "def", None)]
    assert db.execute("DELETE FROM session WHERE id = 'def' AND usr = 'def'").rowcount == 1
    db.commit()
    assert one(db, "SELECT count(*) FROM session") == 0


# ---------------------------------------------------------------- YugabyteDB: TTL semantics


def test_update_as_upsert(db: Conn) -> None:
    """YugabyteDB TestTTLSemantics.testUpdateAsUpsert -- PostgreSQL differs, pg_ttl's behaviour asserted.

    In CQL an UPDATE of a missing key creates the row (values only, no marker).
    A PostgreSQL UPDATE never creates a row: it updates nothing. The CQL upsert
    is ``INSERT ... USING TTL 5 ON CONFLICT (key) DO UPDATE``, which writes a
    marker too; it expires with its values (all at 5 s), as the CQL row does.
    """
    prepare(db)
    cql(db, "UPDATE ttl_table USING TTL 5 SET col1 = 1, col2 = 2, col3 = 3 WHERE key = 1")
    assert one(db, "SELECT count(*) FROM ttl_table") == 0
    db.commit()
    t0 = write(db, f"INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 2, 3) USING TTL 5 {OVERWRITE_ALL}")
    assert rows(db) == [(1, 1, 2, 3)]
    assert expiries(db, 1) == (t0 + s(5),) * 4


def test_row_ttl_with_updates(db: Conn, dsn: str, reader: Reader) -> None:
    """YugabyteDB TestTTLSemantics.testRowTTLWithUpdates.

    INSERT USING TTL 2, then UPDATE USING TTL 1 of every value: the values go at
    1 s while the primary key lives on (the marker), the row at 2 s.
    """
    prepare(db)
    make_strict(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 2, 3) USING TTL 2",
               "UPDATE ttl_table USING TTL 1 SET col1 = 100, col2 = 200, col3 = 300 WHERE key = 1")
    assert expiries(db, 1) == (t0 + s(2), t0 + s(1), t0 + s(1), t0 + s(1))
    wait_until(db, t0 + s(2))
    assert reader(LIVE) == []
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 3)
    assert rows(db) == [(1, None, None, None)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_update_row_ttl(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTTLSemantics.testUpdateRowTTL.

    INSERT USING TTL 1, then UPDATEs raising each value's TTL (2, 3, 4 s): the
    whole row outlives the marker; the values go one by one; then the row.
    """
    prepare(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 2, 3) USING TTL 1",
               "UPDATE ttl_table USING TTL 2 SET col1 = 100 WHERE key = 1",
               "UPDATE ttl_table USING TTL 3 SET col2 = 200 WHERE key = 1",
               "UPDATE ttl_table USING TTL 4 SET col3 = 300 WHERE key = 1")
    assert expiries(db, 1) == (t0 + s(4), t0 + s(2), t0 + s(3), t0 + s(4))
    wait_until(db, t0 + s(4))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 0)
    assert rows(db) == [(1, 100, 200, 300)]
    assert expire(db, dsn, cutoff=t0 + s(2.5)) == (0, 1)
    assert rows(db) == [(1, None, 200, 300)]
    assert expire(db, dsn, cutoff=t0 + s(3.5)) == (0, 1)
    assert rows(db) == [(1, None, None, 300)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_decrease_row_ttl(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTTLSemantics.testDecreaseRowTTL.

    UPDATE USING TTL shortens the values' TTL only: after 1 s every value is
    gone but the primary key survives (the marker keeps its 60 s).
    """
    prepare(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 2, 3) USING TTL 60",
               "UPDATE ttl_table USING TTL 1 SET col1 = 100, col2 = 200, col3 = 300 WHERE key = 1")
    wait_until(db, t0 + s(1))
    assert expire(db, dsn) == (0, 3)
    assert rows(db) == [(1, None, None, None)]
    assert expiries(db, 1) == (t0 + s(60), None, None, None)


def test_ttl_with_overwrites(db: Conn, dsn: str, reader: Reader) -> None:
    """YugabyteDB TestTTLSemantics.testTTLWithOverwrites -- PostgreSQL differs, pg_ttl's behaviour asserted.

    CQL's second INSERT of a key overwrites the row, with its own TTL. In
    PostgreSQL that INSERT is a primary-key error; the overwrite is INSERT ...
    ON CONFLICT DO UPDATE setting the values and the EXCLUDED marker columns.
    The row then expires with the new, shorter TTL (1 s instead of 100 s).
    """
    prepare(db)
    make_strict(db)
    write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 2, 3) USING TTL 100")
    with pytest.raises(psycopg.errors.UniqueViolation):
        cql(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 100, 200, 300) USING TTL 1")
    db.rollback()
    t1 = write(db, f"INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 100, 200, 300) USING TTL 1 "
                   f"{OVERWRITE_ALL}")
    assert rows(db) == [(1, 100, 200, 300)]
    assert expiries(db, 1) == (t1 + s(1),) * 4
    assert one(db, "SELECT ttl.write_time(p) FROM ttl_table p") == t1
    wait_until(db, t1 + s(1))
    assert reader(ALL) == []
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_overwrite_keeps_ttl_of_values_it_does_not_write(db: Conn) -> None:
    """YugabyteDB TestTTLSemantics.testTTLWithOverwrites, overwriting some values only.

    In CQL an INSERT writes the marker and the cells it lists; a cell it does not
    list keeps its own write time and TTL. With the overwrite recipe (INSERT ...
    ON CONFLICT DO UPDATE SET col1, ttl_expires_at, ttl_written_at), col2 and
    col3, written by the first INSERT, must keep their TTL and write time: a
    shorter new TTL must not take them away early (key 1), a longer one must not
    keep them past their own TTL (key 2).
    """
    prepare(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 2, 3) USING TTL 1000",
               "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (2, 1, 2, 3) USING TTL 2")
    t1 = write(db, f"INSERT INTO ttl_table (key, col1) VALUES (1, 10) USING TTL 2 {OVERWRITE_COL1}",
               f"INSERT INTO ttl_table (key, col1) VALUES (2, 10) USING TTL 1000 {OVERWRITE_COL1}")
    assert rows(db) == [(1, 10, 2, 3), (2, 10, 2, 3)]
    # col2 (and col3): expiry and write time of the first INSERT
    col2 = db.execute("SELECT key, ttl.expires_at(p, 'col2'), ttl.write_time(p, 'col2') "
                      "FROM ttl_table p ORDER BY key").fetchall()
    assert col2 == [(1, t0 + s(1000), t0), (2, t0 + s(2), t0)]
    assert expiries(db, 1) == (t0 + s(1000), t1 + s(2), t0 + s(1000), t0 + s(1000))
    assert expiries(db, 2) == (t1 + s(1000), t1 + s(1000), t0 + s(2), t0 + s(2))
    written = db.execute("SELECT ttl.write_time(p), ttl.write_time(p, 'col1') FROM ttl_table p ORDER BY key").fetchall()
    assert written == [(t1, t1), (t1, t1)]


def test_insert_update_with_null(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTTLSemantics.testInsertUpdateWithNull -- partly PostgreSQL-specific.

    INSERT of NULL values creates the row (the marker): the primary key with
    NULLs, no TTL on any value. An UPDATE of a missing key creates nothing (as
    CQL when setting NULLs; CQL's UPDATE of values would create a row,
    PostgreSQL's never does). Setting every value of an INSERTed row to NULL
    (CQL's DELETE of the values) removes their TTLs; the marker still keeps the
    row, as in CQL for a row created by INSERT.
    """
    prepare(db, default_time_to_live=0)
    write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, NULL, NULL, NULL)")
    assert rows(db) == [(1, None, None, None)]
    assert ttls(db, 1) == (None, None, None)
    assert db.execute("UPDATE ttl_table SET col1 = NULL, col2 = NULL, col3 = NULL WHERE key = 100").rowcount == 0
    assert db.execute("UPDATE ttl_table SET col1 = 100, col2 = 200, col3 = 300 WHERE key = 10").rowcount == 0
    db.commit()
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (10, 1, 2, 3) USING TTL 100",
               "UPDATE ttl_table USING TTL 50 SET col1 = 100, col2 = 200, col3 = 300 WHERE key = 10")
    assert expiries(db, 10) == (t0 + s(100), t0 + s(50), t0 + s(50), t0 + s(50))
    write(db, "UPDATE ttl_table USING TTL 50 SET col1 = NULL, col2 = NULL, col3 = NULL WHERE key = 10")
    assert rows(db) == [(1, None, None, None), (10, None, None, None)]
    assert expiries(db, 10) == (t0 + s(100), None, None, None)
    assert ttls(db, 10) == (None, None, None)
    assert one(db, "SELECT ttl_values FROM ttl_table WHERE key = 10") is None
    assert one(db, "SELECT ttl.write_time(p, 'col1') FROM ttl_table p WHERE key = 10") is None
    assert expire(db, dsn) == (0, 0)
    assert [r[0] for r in rows(db)] == [1, 10]


def test_with_deletes(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTTLSemantics.testWithDeletes (CQL overwrites as INSERT ... ON CONFLICT DO UPDATE).

    A row deleted and inserted again starts afresh; after an overwrite with
    TTL 1 and an UPDATE USING TTL 2 of col1, col1 and the key survive at 1 s,
    nothing at 2 s.
    """
    prepare(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 10, 20, 30) USING TTL 100",
               "DELETE FROM ttl_table WHERE key = 1",
               "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 100, 200, 300) USING TTL 2",
               f"INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1000, 2000, 3000) USING TTL 1 "
               f"{OVERWRITE_ALL}",
               "UPDATE ttl_table USING TTL 2 SET col1 = 1001 WHERE key = 1")
    assert rows(db) == [(1, 1001, 2000, 3000)]
    assert expiries(db, 1) == (t0 + s(2), t0 + s(2), t0 + s(1), t0 + s(1))
    wait_until(db, t0 + s(2))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 2)
    assert rows(db) == [(1, 1001, None, None)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_liveness_column_expiry(db: Conn, dsn: str, reader: Reader) -> None:
    """YugabyteDB TestTTLSemantics.testLivenessColumnExpiry.

    INSERT USING TTL 1, then UPDATE of every value without TTL: once the marker
    expired the row still exists with all its values; setting them all to NULL
    then leaves nothing alive, and the row is gone (hidden at once, deleted by
    the engine).
    """
    prepare(db)
    make_strict(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 10, 20, 30) USING TTL 1",
               "UPDATE ttl_table SET col1 = 100, col2 = 200, col3 = 300 WHERE key = 1")
    wait_until(db, t0 + s(1))
    assert reader(LIVE) == [(1, 100, 200, 300)]
    assert reader("SELECT key FROM ttl_table") == [(1,)]
    assert expire(db, dsn) == (0, 0)
    write(db, "UPDATE ttl_table SET col1 = NULL, col2 = NULL, col3 = NULL WHERE key = 1")
    assert reader(ALL) == []
    assert reader(LIVE) == []
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_null_columns(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTTLSemantics.testNullColumns.

    UPDATE USING TTL 1 of col1 in one row: that value alone reads NULL after
    1 s; the same column of another row is untouched.
    """
    prepare(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 10, 20, 30)",
               "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (2, 100, 200, 300)",
               "UPDATE ttl_table USING TTL 1 SET col1 = 100 WHERE key = 1")
    wait_until(db, t0 + s(1))
    assert expire(db, dsn) == (0, 1)
    assert rows(db) == [(1, None, 20, 30), (2, 100, 200, 300)]


# ---------------------------------------------------------------- YugabyteDB: table TTL


def test_table_ttl_and_column_ttl(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTableTTL.testTableTTLAndColumnTTL.

    Table default 2 s: a row INSERTed USING TTL 1 goes at 1 s, one without at 2 s.
    """
    prepare(db, default_time_to_live=2)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 3) USING TTL 1",
               "INSERT INTO ttl_table (key, col1, col2) VALUES (2, 2, 3)")
    wait_until(db, t0 + s(2))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (1, 0)
    assert rows(db) == [(2, 2, 3, None)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_table_ttl_with_deletes(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTableTTL.testTableTTLWithDeletes.

    INSERT USING TTL 1, DELETE, INSERT again without TTL: the new row has the
    table default (2 s) and nothing of the deleted row's TTL.
    """
    prepare(db, default_time_to_live=2)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 3) USING TTL 1",
               "DELETE FROM ttl_table WHERE key = 1",
               "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 4)")
    wait_until(db, t0 + s(2))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 0)
    assert rows(db) == [(1, 2, 4, None)]
    assert expire(db, dsn) == (1, 0)
    assert rows(db) == []


def test_table_ttl_with_overwrites(db: Conn, dsn: str, reader: Reader) -> None:
    """YugabyteDB TestTableTTL.testTableTTLWithOverwrites -- overwrite as INSERT ... ON CONFLICT DO UPDATE.

    Table default 2 s: a row overwritten 1 s after its INSERT gets a new marker
    and does not expire at the first INSERT's 2 s.
    """
    prepare(db, default_time_to_live=2)
    make_strict(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 3)")
    wait_until(db, t0 + s(1))
    t1 = write(db, f"INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 4) {OVERWRITE_ALL}")
    assert expiries(db, 1)[:3] == (t1 + s(2), t1 + s(2), t1 + s(2))
    wait_until(db, t0 + s(2))
    assert reader(ALL) == [(1, 2, 4, None)]
    assert expire(db, dsn) == (0, 0)
    assert rows(db) == [(1, 2, 4, None)]


def test_table_ttl_with_single_column_survival(db: Conn, dsn: str) -> None:
    """YugabyteDB TestTableTTL.testTableTTLWithSingleColumnSurvival.

    Table default 1 s; UPDATE USING TTL 60 of col1: after 1 s the key and col1
    survive, the other values are gone.
    """
    prepare(db, default_time_to_live=1)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2) VALUES (1, 2, 3)",
               "UPDATE ttl_table USING TTL 60 SET col1 = 20 WHERE key = 1")
    wait_until(db, t0 + s(1))
    assert expire(db, dsn) == (0, 1)
    assert rows(db) == [(1, 20, None, None)]
    assert expiries(db, 1) == (t0 + s(60), t0 + s(60), None, None)


# ---------------------------------------------------------------- columns added and dropped


def test_added_column_has_a_ttl_per_value(db: Conn, dsn: str, reader: Reader) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_collection_list_ttl (and _set_, _map_), for a scalar column.

    The dtest adds a column with ALTER TABLE ... ADD to a table with a default
    TTL, then writes it with and without USING TTL. (Its per-element TTLs of
    collections do not apply: a PostgreSQL value is one value.) The added
    column's values have their own TTL like the others': the one updated with
    USING TTL 1 goes at 1 s, its row with the default at 2 s, a row written
    USING TTL 0 stays. Strict readers see the added column through
    ``ttl_live.ttl_table`` ("same columns").
    """
    prepare(db, default_time_to_live=2)
    make_strict(db)
    cql(db, "ALTER TABLE ttl_table ADD COLUMN mycol int")
    db.commit()
    t0 = write(db, "INSERT INTO ttl_table (key, col1, mycol) VALUES (1, 1, 5)",
               "UPDATE ttl_table USING TTL 1 SET mycol = 42 WHERE key = 1",
               "INSERT INTO ttl_table (key, col1, mycol) VALUES (2, 2, 7) USING TTL 0")
    query = "SELECT key, col1, mycol, ttl.expires_at(p, 'mycol') FROM ttl_table p ORDER BY key"
    assert db.execute(query).fetchall() == [(1, 1, 42, t0 + s(1)), (2, 2, 7, None)]
    db.commit()
    wait_until(db, t0 + s(2))
    assert expire(db, dsn, cutoff=t0 + s(1.5)) == (0, 1)
    assert db.execute(query).fetchall() == [(1, 1, None, None), (2, 2, 7, None)]
    assert expire(db, dsn) == (1, 0)
    db.commit()
    assert reader(f"SELECT key, col1, mycol FROM ttl_live.{TABLE} ORDER BY key") == [(2, 2, 7)]


def test_dropped_column_does_not_keep_its_row_alive(db: Conn, dsn: str) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_remove_column_ttl, then ALTER TABLE ... DROP of that column.

    (No public CQL TTL test drops a column; this extends the dtest's case.) A
    row lives while its marker or any value lives: in the dtest only col1,
    rewritten without TTL, keeps the row after its INSERT's TTL. Once col1 is
    dropped (CQL drops its cells with it) nothing keeps the row: it expires
    with the marker and the engine deletes it.
    """
    prepare(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1) USING TTL 1",
               "UPDATE ttl_table SET col1 = 42 WHERE key = 1")
    assert expiries(db, 1)[0] is None  # col1 never expires, nor its row
    db.commit()
    db.execute("ALTER TABLE ttl_table DROP COLUMN col1 CASCADE")  # CASCADE: the value trigger depends on it
    db.commit()
    assert one(db, "SELECT ttl.expires_at(p) FROM ttl_table p") == t0 + s(1)
    db.commit()
    wait_until(db, t0 + s(1))
    assert expire(db, dsn) == (1, 0)
    assert one(db, "SELECT count(*) FROM ttl_table") == 0


def test_strict_view_survives_dropping_a_column(db: Conn, reader: Reader) -> None:
    """Cassandra dtest ttl_test.py TestTTL.test_update_single_column_ttl, read strictly after ALTER TABLE ... DROP.

    (No public CQL TTL test drops a column.) Expired values read NULL through
    ``ttl_live.ttl_table``; dropping another column (with the CASCADE the value
    trigger requires) must leave that view in place with the remaining columns,
    not remove it (readers with ``ttl_live`` first in their search path would
    then read the table itself, expired values included).
    """
    prepare(db)
    make_strict(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1, col2, col3) VALUES (1, 1, 1, 1)",
               "UPDATE ttl_table USING TTL 1 SET col1 = 42 WHERE key = 1")
    db.execute("ALTER TABLE ttl_table DROP COLUMN col3 CASCADE")
    db.commit()
    wait_until(db, t0 + s(1))
    assert reader(f"SELECT key, col1, col2 FROM ttl_live.{TABLE}") == [(1, None, 1)]


def test_drop_table(db: Conn) -> None:
    """ScyllaDB test/cqlpy util.py new_test_table, which every test of test_ttl.py uses: it ends with DROP TABLE.

    A CQL-style table is dropped by a plain DROP TABLE, its TTL with it. PostgreSQL
    differs once the table is strict: its ``ttl_live`` view depends on it, so DROP
    TABLE needs CASCADE, as PostgreSQL's error says (documented); with it, the
    TTL and the view go.
    """
    prepare(db, default_time_to_live=1)
    db.commit()
    db.execute(f"DROP TABLE {TABLE}")
    db.commit()
    assert one(db, "SELECT count(*) FROM ttl.policy") == 0
    prepare(db, default_time_to_live=1)
    db.execute(f"SELECT ttl.set_option('{TABLE}', 'strict', 'true')")
    db.commit()
    with pytest.raises(psycopg.errors.DependentObjectsStillExist, match=f"view ttl_live.{TABLE} depends on table"):
        db.execute(f"DROP TABLE {TABLE}")
    db.rollback()
    db.execute(f"DROP TABLE {TABLE} CASCADE")
    db.commit()
    assert one(db, "SELECT count(*) FROM ttl.policy") == 0
    assert one(db, f"SELECT to_regclass('ttl_live.{TABLE}')") is None


# ---------------------------------------------------------------- ttl() and writetime()


def test_timestamp_ttl(db: Conn) -> None:
    """Cassandra cql3/validation/entities/TimestampTest.java testTimestampTTL
    (from cql_tests.py TestCQL.timestamp_and_ttl_test).

    writetime(c) is set with or without TTL; ttl(c) is null without TTL and set
    with USING TTL 400; writetime and ttl of a value never written are null; an
    UPDATE gives its value its own write time. CQL refuses writetime(k) of a
    primary-key column; pg_ttl answers NULL (a key column has no TTL of its own).
    """
    prepare(db)
    t0 = write(db, "INSERT INTO ttl_table (key, col1) VALUES (1, 1)",
               "INSERT INTO ttl_table (key, col1) VALUES (2, 1) USING TTL 400")
    found = db.execute("SELECT key, col1, ttl.write_time(p, 'col1'), ttl.ttl(p, 'col1'), ttl.write_time(p, 'col2'), "
                       "ttl.ttl(p, 'col2') FROM ttl_table p ORDER BY key").fetchall()
    assert found == [(1, 1, t0, None, None, None), (2, 1, t0, 400, None, None)]
    db.commit()
    t1 = write(db, "UPDATE ttl_table SET col2 = 5 WHERE key = 1")
    assert t1 > t0
    found = db.execute("SELECT ttl.write_time(p), ttl.write_time(p, 'col1'), ttl.write_time(p, 'col2'), "
                       "ttl.ttl(p, 'col2') FROM ttl_table p WHERE key = 1").fetchall()
    assert found == [(t0, t0, t1, None)]
    assert db.execute("SELECT ttl.write_time(p, 'key'), ttl.ttl(p, 'key') FROM ttl_table p "
                      "ORDER BY key").fetchall() == [(None, None), (None, None)]


def test_ttl_is_the_same_for_every_session(db: Conn, connect: Any) -> None:
    """Cassandra dtest ttl_test.py TestDistributedTTL.test_ttl_is_replicated.

    ttl(col1) is computed from the stored expiry: two sessions read the same
    (within the second between their reads), the table default.
    """
    prepare(db, default_time_to_live=5)
    write(db, "INSERT INTO ttl_table (key, col1) VALUES (1, 1)")
    assert rows(db) == [(1, 1, None, None)]
    other: Conn = connect()
    query = "SELECT ttl.ttl(p, 'col1') FROM ttl_table p WHERE key = 1"
    first, second = one(db, query), one(other, query)
    db.commit()
    assert first in (4, 5) and second in (4, 5)
    assert abs(first - second) <= 1
