"""Column TTL: expired values become NULL (or DEFAULT), the row stays; per-value USING TTL."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import columns, expire

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.autocommit = True
    db.execute("CREATE TABLE pageviews (path text PRIMARY KEY, views int, note text, "
               "hits int NOT NULL DEFAULT 0, created_at timestamptz NOT NULL DEFAULT now())")
    return db


def rows(conn: Conn, cols: str = "path, views, note, hits") -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT {cols} FROM pageviews ORDER BY path").fetchall()


def null_now(conn: Conn, dsn: str, table: str = "pageviews") -> int:
    with psycopg.connect(dsn, autocommit=True) as worker:
        return columns.null_expired(worker, conn.execute("SELECT %s::regclass::oid", (table,)).fetchone()[0],
                                    conn.execute("SELECT %s::regclass::oid", (table,)).fetchone()[0], 2,
                                    worker.execute("SELECT now()").fetchone()[0])


def test_seed_column_ttl_value_null_row_stays(conn: Conn, dsn: str) -> None:
    """seed 004: a column TTL expires the value only; the row and its other columns stay."""
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 second', 'write')")
    assert conn.execute("SELECT relative_to, tracking_column FROM ttl.column_policies").fetchone() == (
        "write", "ttl_cell_views")
    conn.execute("INSERT INTO pageviews (path, views, note) VALUES ('/a', 10, 'keep'), ('/b', 20, 'keep')")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('1 hour')")  # per-value TTL on /b's views
        conn.execute("UPDATE pageviews SET views = 21 WHERE path = '/b'")
    assert null_now(conn, dsn) == 0  # nothing due yet
    time.sleep(1.1)
    assert null_now(conn, dsn) == 1
    assert rows(conn) == [("/a", None, "keep", 0), ("/b", 21, "keep", 0)]
    # the expired value is no longer tracked: no TTL, no write time
    assert conn.execute("SELECT ttl.ttl(p, 'views'), ttl.write_time(p, 'views') FROM pageviews p "
                        "WHERE path = '/a'").fetchone() == (None, None)
    left = conn.execute("SELECT ttl.ttl(p, 'views') FROM pageviews p WHERE path = '/b'").fetchone()
    assert left is not None and 3590 <= left[0] <= 3600


def test_seed_update_using_ttl_expires_only_that_value(conn: Conn, dsn: str) -> None:
    """UPDATE pageviews USING TTL n SET views = 10: views reads NULL later; row and row TTL stay."""
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day')")
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '30 days', 'write')")
    conn.execute("INSERT INTO pageviews (path, views, note) VALUES ('/a', 1, 'x')")
    with conn.transaction():
        # what pg_ttl.rewrite makes of UPDATE pageviews USING TTL 1 SET views = 10
        conn.execute("SELECT ttl.using_ttl('1 second')")
        conn.execute("UPDATE pageviews SET views = 10 WHERE path = '/a'")
        row = conn.execute("SELECT ttl.ttl(p, 'views'), ttl.ttl(p) FROM pageviews p").fetchone()
        assert row == (1, 86400)  # the value got the USING TTL, the row kept the table TTL
    time.sleep(1.1)
    (result,) = expire(dsn, ["pageviews"])
    assert result.status == "ok" and result.rows_deleted == 0
    assert rows(conn) == [("/a", None, "x", 0)]
    assert conn.execute("SELECT values_nulled FROM ttl.run_unit").fetchone() == (1,)


def test_row_base_counts_from_ttl_column(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '30 days', column_name => 'created_at')")
    conn.execute("SELECT ttl.enable_column('pageviews', 'note', '1 day')")  # default: the row's base
    assert conn.execute("SELECT relative_to, tracking_column FROM ttl.column_policies").fetchone() == ("row", None)
    conn.execute("INSERT INTO pageviews (path, views, note, created_at) VALUES "
                 "('/old', 1, 'n', now() - interval '2 days'), ('/new', 2, 'n', now() - interval '23 hours'), "
                 "('/none', 3, NULL, now() - interval '5 days')")
    row = conn.execute("SELECT ttl.ttl(p, 'note'), ttl.write_time(p, 'note') = created_at FROM pageviews p "
                       "WHERE path = '/new'").fetchone()
    assert row is not None and 3590 <= row[0] <= 3600 and row[1] is True
    (result,) = expire(dsn, ["pageviews"])
    assert result.rows_deleted == 0
    assert rows(conn, "path, note") == [("/new", "n"), ("/none", None), ("/old", None)]
    # the already-NULL value was not touched
    assert conn.execute("SELECT values_nulled FROM ttl.run_unit").fetchone() == (1,)


def test_not_null_column_becomes_its_default(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT ttl.enable_column('pageviews', 'hits', '1 hour', 'write')")
    conn.execute("INSERT INTO pageviews (path, hits) VALUES ('/a', 5), ('/b', 6), ('/c', 7)")
    # explicit timestamps: /a and /b were written two hours ago
    conn.execute("UPDATE pageviews SET ttl_cell_hits = tstzrange(now() - interval '2 hours', "
                 "now() - interval '1 hour') WHERE path IN ('/a', '/b')")
    assert null_now(conn, dsn) == 2
    assert rows(conn, "path, hits") == [("/a", 0), ("/b", 0), ("/c", 7)]
    assert null_now(conn, dsn) == 0  # done: not picked again


def test_not_null_without_default_refused(conn: Conn) -> None:
    conn.execute("ALTER TABLE pageviews ADD COLUMN must int NOT NULL DEFAULT 1")
    conn.execute("ALTER TABLE pageviews ALTER COLUMN must DROP DEFAULT")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="NOT NULL without a default"):
        conn.execute("SELECT ttl.enable_column('pageviews', 'must', '1 day', 'write')")
    assert "ttl_cell_must" not in [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'pageviews'::regclass").fetchall()]


def test_rewritten_value_is_kept_and_rows_not_due_untouched(conn: Conn, dsn: str) -> None:
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("INSERT INTO pageviews (path, views) SELECT '/' || g, g FROM generate_series(1, 5) g")
    conn.execute("UPDATE pageviews SET ttl_cell_views = tstzrange(now() - interval '2 hours', "
                 "now() - interval '1 hour') WHERE path IN ('/1', '/2', '/3')")
    # an UPDATE that writes the value restarts its TTL
    conn.execute("UPDATE pageviews SET views = 30 WHERE path = '/3'")
    xmins = dict(conn.execute("SELECT path, xmin::text FROM pageviews").fetchall())
    assert null_now(conn, dsn) == 2
    assert rows(conn, "path, views") == [("/1", None), ("/2", None), ("/3", 30), ("/4", 4), ("/5", 5)]
    after = dict(conn.execute("SELECT path, xmin::text FROM pageviews").fetchall())
    assert {p for p in after if after[p] != xmins[p]} == {"/1", "/2"}


def test_locked_rows_are_skipped(conn: Conn, dsn: str, connect: Any) -> None:
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("INSERT INTO pageviews (path, views) VALUES ('/a', 1), ('/b', 2)")
    conn.execute("UPDATE pageviews SET ttl_cell_views = tstzrange(now() - interval '2 hours', "
                 "now() - interval '1 hour')")
    app = connect(autocommit=False)
    app.execute("SELECT * FROM pageviews WHERE path = '/a' FOR UPDATE")
    assert null_now(conn, dsn) == 1
    app.rollback()
    assert null_now(conn, dsn) == 1
    assert rows(conn, "path, views") == [("/a", None), ("/b", None)]


def test_partitioned_table_is_nulled_partition_by_partition(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE hits (id int, day date NOT NULL, v int) PARTITION BY RANGE (day)")
    conn.execute("CREATE TABLE hits_a PARTITION OF hits FOR VALUES FROM ('2000-01-01') TO ('2050-01-01')")
    conn.execute("CREATE TABLE hits_b PARTITION OF hits FOR VALUES FROM ('2050-01-01') TO ('2100-01-01')")
    conn.execute("SELECT ttl.enable_column('hits', 'v', '1 hour')")  # no table TTL: value write time
    conn.execute("INSERT INTO hits SELECT g, CASE WHEN g % 2 = 0 THEN date '2001-01-01' ELSE date '2060-01-01' END, g "
                 "FROM generate_series(1, 10) g")
    conn.execute("UPDATE hits SET ttl_cell_v = tstzrange(now() - interval '2 hours', now() - interval '1 hour') "
                 "WHERE id <= 6")
    with psycopg.connect(dsn, autocommit=True) as worker:
        results = columns.expire_column_only(worker, None, worker.execute("SELECT now()").fetchone()[0],
                                             batch_size=2)
    assert [r.table for r in results] == ["hits"] and results[0].status == "ok"
    units = conn.execute("SELECT unit_name, values_nulled FROM ttl.run_unit ORDER BY 1").fetchall()
    assert units == [("hits_a", 3), ("hits_b", 3)]
    assert conn.execute("SELECT array_agg(id ORDER BY id) FROM hits WHERE v IS NULL").fetchone() == (
        [1, 2, 3, 4, 5, 6],)


def test_disable_column_removes_tracking(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("SELECT ttl.disable_column('pageviews', 'views')")
    names = [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'pageviews'::regclass AND attnum > 0 "
        "AND NOT attisdropped").fetchall()]
    assert names == ["path", "views", "note", "hits", "created_at"]
    assert conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pageviews'::regclass").fetchone() == (0,)


def test_row_base_needs_a_table_base(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="relative_to = row needs a table TTL"):
        conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'row')")


def test_column_only_plain_table_through_the_engine(conn: Conn, dsn: str) -> None:
    """A table with column TTLs and no table TTL: expire() nulls its values (the worker's path)."""
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("INSERT INTO pageviews (path, views) VALUES ('/a', 1), ('/b', 2)")
    conn.execute("UPDATE pageviews SET ttl_cell_views = tstzrange(now() - interval '2 hours', "
                 "now() - interval '1 hour') WHERE path = '/a'")
    results = expire(dsn)
    assert [(r.table, r.status) for r in results] == [("pageviews", "ok")]
    assert rows(conn, "path, views") == [("/a", None), ("/b", 2)]
    assert conn.execute("SELECT unit_name, values_nulled FROM ttl.run_unit").fetchall() == [("pageviews", 1)]


def test_uninstall_removes_tracking_of_column_only_tables(conn: Conn, dsn: str, cli: Any) -> None:
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("INSERT INTO pageviews (path, views) VALUES ('/a', 1)")
    result = cli("uninstall", "--dsn", dsn, "--yes")
    assert result.returncode == 0, result.stderr
    names = [r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'pageviews'::regclass "
                                        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum").fetchall()]
    assert names == ["path", "views", "note", "hits", "created_at"]
    assert rows(conn, "path, views") == [("/a", 1)]


def test_next_step_shrinks_after_a_long_batch_and_grows_back_to_the_batch_size() -> None:
    target = columns.BATCH_TARGET_SECONDS
    assert columns.next_step(100, 100, target * 4) == 25  # four times too long: a quarter of the blocks
    assert columns.next_step(1, 100, target * 50) == 1  # never less than one block
    assert columns.next_step(25, 100, target / 4) == 50  # quick: twice as many
    assert columns.next_step(80, 100, target / 4) == 100  # ... up to the batch size, never beyond
    assert columns.next_step(40, 100, target * 0.75) == 40  # about right: kept


def test_a_batch_too_long_for_its_transaction_is_split(conn: Conn, dsn: str) -> None:
    """select_batch_size covers the whole table, but one UPDATE of all its due values takes well
    over the target: the ranges shrink, and every due value is still nulled, once."""
    conn.execute("CREATE TABLE wide (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, payload text)")
    conn.execute("INSERT INTO wide SELECT g, now() - (g % 60) * interval '1 day' - interval '1 hour', "
                 "repeat('x', 60) FROM generate_series(1, 300000) g")
    conn.execute("ANALYZE wide")
    conn.execute("SELECT ttl.enable('wide', expire_after => '3650 days', column_name => 'created_at')")
    conn.execute("SELECT ttl.enable_column('wide', 'payload', '30 days', 'row')")
    due = conn.execute("SELECT count(*) FROM wide WHERE created_at + interval '30 days' <= now()").fetchone()[0]
    relid = conn.execute("SELECT 'wide'::regclass::oid").fetchone()[0]
    with psycopg.connect(dsn, autocommit=True) as engine:
        cutoff = engine.execute("SELECT now()").fetchone()[0]
        started = time.monotonic()
        batches = list(columns.null_batches(engine, relid, relid, 10_000_000, cutoff))
        took = time.monotonic() - started
    assert took > 2 * columns.BATCH_TARGET_SECONDS  # the premise: one batch would be too long
    assert len(batches) > 1 and sum(batches) == due
    assert conn.execute("SELECT count(*) FROM wide WHERE payload IS NULL").fetchone() == (due,)
