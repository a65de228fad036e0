"""Engine, row deletion under hostile data ("Trust" items 9, 12, 16): many rows sharing one
expiry value, a row moved to another partition while the engine waits on it, and names
holding '%', quotes and non-ASCII letters on every path."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer


def _log_deletes(db: psycopg.Connection[Any], table: sql.Composable) -> None:
    """Record the rows each DELETE statement on ``table`` removes, with their lowest and
    highest v: a statement-level trigger with a transition table sees one statement's
    rows, whatever the engine does."""
    db.execute("CREATE TABLE public.delete_log (seq serial PRIMARY KEY, n int8, lo timestamptz, hi timestamptz)")
    db.execute("CREATE FUNCTION public.log_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
               " INSERT INTO public.delete_log (n, lo, hi) SELECT count(*), min(v), max(v) FROM gone; RETURN NULL;"
               " END $$")
    db.execute(sql.SQL("CREATE TRIGGER log_delete AFTER DELETE ON {} REFERENCING OLD TABLE AS gone"
                       " FOR EACH STATEMENT EXECUTE FUNCTION public.log_delete()").format(table))


def _statements(db: psycopg.Connection[Any]) -> list[tuple[int, Any, Any]]:
    """(rows, lowest v, highest v) of each DELETE that removed rows, in order."""
    db.rollback()
    return [(int(n), lo, hi) for n, lo, hi in
            db.execute("SELECT n, lo, hi FROM public.delete_log WHERE n > 0 ORDER BY seq").fetchall()]


# -- item 12: ties ----------------------------------------------------------------

# A heap block's tuple slots (8 kB blocks): a ctid window of a key spans slots, so its rows
# follow the last window's by a block's rows at most either side.
SLOTS = 292


def test_rows_sharing_one_expiry_go_in_short_deletes_that_grow_as_key_windows_do(
        db: psycopg.Connection[Any], dsn: str) -> None:
    """A key with more rows than a window holds (300,000 rows stamped with one now()) goes in
    ctid windows, never in one DELETE: the first of about delete_batch_size rows, each next
    at most four times the rows the last one deleted (toward ~50 ms, as key windows grow),
    so that no statement is long whatever the data."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, pad text)")
    db.execute("CREATE INDEX ON t (v)")
    # 300,000 rows with one value (a bulk load stamped now()), five keys of 2,500 rows
    # interleaved, 1,000 distinct values and 1,000 live rows
    db.execute("INSERT INTO t SELECT g, '2020-01-01', 'x' FROM generate_series(1, 300000) g")
    db.execute("INSERT INTO t SELECT 300000 + g, timestamptz '2019-06-01' + (g % 5) * interval '1 day', 'x'"
               " FROM generate_series(1, 12500) g")
    db.execute("INSERT INTO t SELECT 312500 + g, timestamptz '2020-01-02' + g * interval '1 s', 'x'"
               " FROM generate_series(1, 1000) g")
    db.execute("INSERT INTO t SELECT 313500 + g, '2030-01-01', 'x' FROM generate_series(1, 1000) g")
    db.execute("ANALYZE t")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")  # batches 10,000 / 1,000
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    _log_deletes(db, sql.Identifier("t"))
    db.commit()
    [res] = expire(dsn)
    statements = _statements(db)
    assert sum(n for n, _, _ in statements) == 313_500
    assert res.status == "ok" and res.units[0].strategy == "index"
    assert res.rows_deleted == res.rows_selected == 313_500
    assert db.execute("SELECT count(*), min(id), max(id) FROM t").fetchone() == (1000, 313_501, 314_500)
    for day in range(5):
        key = datetime(2019, 6, 1 + day, tzinfo=UTC)
        sizes = [n for n, lo, hi in statements if lo == hi == key]
        assert sum(sizes) == 2500 and len(sizes) > 1, sizes  # every row of the key, in several statements
    tie = [n for n, lo, hi in statements if lo == hi == datetime(2020, 1, 1, tzinfo=UTC)]
    assert sum(tie) == 300_000
    # about delete_batch_size first (a range of slots at the table's density), then growing
    # at most fourfold a window, and past delete_batch_size: not in 1,000-row pieces
    assert tie[0] <= 1000 + SLOTS, tie
    assert all(b <= 4 * (a + SLOTS) + SLOTS for a, b in pairwise(tie)), tie
    assert len(tie) < 300_000 // 4000, tie
    # every row of the key went: the run left nothing expired, so the lag metric needs no query
    # (one would walk the entries of all 313,500 rows just deleted)
    assert not res.units[0].rows_may_remain and (res.oldest_measured, res.oldest_left) == (True, None)


@pytest.mark.parametrize("resumer", ["engine", "CALL ttl.run()"])
def test_stopped_run_in_a_tie_resumes_after_the_exact_row(db: psycopg.Connection[Any], dsn: str,
                                                          connect: Any, resumer: str) -> None:
    """pg-ttl run stopped in the middle of a key's ctid windows; the next run (pg-ttl run, or
    CALL ttl.run() taking the unit over) starts after the checkpoint's row: a row skipped
    before it (held by the application then) stays until a fresh run."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, pad text)")
    db.execute("CREATE INDEX ON t (v)")
    db.execute("INSERT INTO t SELECT g, '2020-01-01', 'x' FROM generate_series(1, 20000) g")
    db.execute("INSERT INTO t SELECT g, '2030-01-01', 'x' FROM generate_series(20001, 20100) g")
    db.execute("ANALYZE t")
    # (a rate limit keeps the key's ctid windows at delete_batch_size: 100 slots, 100 rows at most)
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v', select_batch_size => 2000,"
               " delete_batch_size => 100, delete_rate_limit => 1000000)")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()
    # An application holds row 150 (in the second range) during the first run: it is skipped.
    app = connect(autocommit=False)
    app.execute("SELECT * FROM t WHERE id = 150 FOR UPDATE")
    stop = threading.Event()

    class StopAfterThirty:
        n = 0

        def unit_started(self, *a: Any) -> None:
            pass

        def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
            self.n += 1
            if self.n == 30:
                stop.set()

        def unit_finished(self, result: Any) -> None:
            pass

    [res] = expire(dsn, stop=stop, progress=StopAfterThirty())
    app.rollback()
    assert res.status == "partial" and 1000 < res.rows_deleted < 19_000
    cp = db.execute("SELECT checkpoint FROM ttl.run_unit").fetchone()
    assert cp is not None and cp[0]["strategy"] == "index" and cp[0]["key"].startswith("2020-01-01")
    # every row up to the checkpoint's row is gone but the locked one; every row after it is there
    left = db.execute("SELECT count(*) FILTER (WHERE ctid <= %(c)s::tid), count(*) FILTER (WHERE ctid > %(c)s::tid)"
                      " FROM t WHERE v = '2020-01-01'", {"c": cp[0]["ctid"]}).fetchone()
    assert left == (1, 20_000 - res.rows_deleted - 1)
    first = res.rows_deleted
    db.commit()
    if resumer == "engine":
        [res] = expire(dsn)
        resumed = (res.status, res.rows_deleted)
    else:
        connect().execute("CALL ttl.run('t')")
        resumed = db.execute("SELECT status, rows_deleted FROM ttl.run_unit ORDER BY run_id DESC LIMIT 1").fetchone()
        db.commit()
    # resumed after the checkpoint's row: the rest went, the row skipped before it stays
    assert resumed == ("ok", 20_000 - first - 1)
    assert [r[0] for r in db.execute("SELECT id FROM t WHERE v = '2020-01-01'").fetchall()] == [150]
    db.commit()
    [res] = expire(dsn)  # a fresh run starts from the first key again
    assert res.rows_deleted == 1 and db.execute("SELECT count(*) FROM t").fetchone() == (100,)


# -- item 9: a row moved to another partition mid-delete --------------------------

def _wait_for_lock_wait(watch: psycopg.Connection[Any], deadline: float = 10.0) -> None:
    """Until the engine's DELETE waits on a row lock."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        row = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl engine'"
                            " AND datname = current_database() AND wait_event_type = 'Lock'"
                            # (a unit's last range is deleted and counted by one WITH statement)
                            " AND (query LIKE 'DELETE%' OR query LIKE 'WITH d AS (DELETE%')").fetchone()
        if row and row[0]:
            return
        time.sleep(0.01)
    raise AssertionError("the engine never waited on the application's row lock")


@pytest.mark.parametrize("strategy", ["ctid", "index"])
def test_row_moved_to_another_partition_while_waited_on_does_not_fail_the_unit(
        db: psycopg.Connection[Any], dsn: str, connect: Any, pg_local: LocalServer, strategy: str) -> None:
    db.execute("CREATE TABLE m (id int, region text, v timestamptz, PRIMARY KEY (id, region))"
               " PARTITION BY LIST (region)")
    db.execute("CREATE TABLE m_a PARTITION OF m FOR VALUES IN ('a')")
    db.execute("CREATE TABLE m_b PARTITION OF m FOR VALUES IN ('b')")
    db.execute("CREATE INDEX ON m (v)")
    db.execute("INSERT INTO m SELECT g, 'a', '2020-01-01'::timestamptz + g * interval '1 s'"
               " FROM generate_series(1, 200) g")
    db.execute("INSERT INTO m SELECT g, 'b', '2030-01-01' FROM generate_series(1001, 1010) g")
    db.execute("SELECT ttl.enable('m', expire_after => '1 day', column_name => 'v')")
    db.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_strategy'", (strategy,))
    # wait on the row long enough for the application to commit meanwhile
    db.execute("UPDATE ttl.settings SET value = '5s' WHERE name = 'row_lock_timeout'")
    db.commit()
    log_from = pg_local.logfile.stat().st_size
    # The application moves expired row 100 to m_b and makes it live, not committed yet.
    app = connect(autocommit=False)
    app.execute("UPDATE m SET region = 'b', v = '2030-06-01' WHERE id = 100")
    results: list[Any] = []
    engine = threading.Thread(target=lambda: results.extend(expire(dsn, ["m"])))
    engine.start()
    try:
        _wait_for_lock_wait(connect())
        app.commit()  # the engine's DELETE now finds the row moved: SQLSTATE 40001
    finally:
        engine.join(30)
    with pg_local.logfile.open("rb") as f:
        f.seek(log_from)
        log = f.read().decode(errors="replace")
    assert "already moved to another partition due to concurrent update" in log
    [res] = results
    units = {u.unit: u for u in res.units}
    assert res.status == "ok", (res.error, [(u.unit, u.status, u.error) for u in res.units])
    assert units["m_a"].status == "ok" and units["m_a"].rows_deleted == 199
    # nothing live went: the moved row and m_b's rows stay, m_a is empty
    rows = db.execute("SELECT tableoid::regclass::text, count(*), min(id) FROM m GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("m_b", 11, 100)]


# -- item 16: '%', quotes and non-ASCII in every name -----------------------------

TABLE = 'Événements "Q" 100%s'
COLUMN = "Créé À %b"


def _odd_table(db: psycopg.Connection[Any], schema: str = "public") -> sql.Identifier:
    """1,000 expired rows (ids 1..1000) and 100 live ones, TTL column with an index."""
    t = sql.Identifier(schema, TABLE)
    db.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, {} timestamptz, {} text)").format(
        t, sql.Identifier(COLUMN), sql.Identifier("note %s")))
    db.execute(sql.SQL("CREATE INDEX ON {} ({})").format(t, sql.Identifier(COLUMN)))
    db.execute(sql.SQL("INSERT INTO {} SELECT g, CASE WHEN g <= 1000 THEN timestamptz '2020-01-01'"
                       " + g * interval '1 s' ELSE '2030-01-01' END, 'n' FROM generate_series(1, 1100) g").format(t))
    db.execute(sql.SQL("ANALYZE {}").format(t))
    return t


@pytest.mark.parametrize("strategy", ["index", "ctid", "expression"])
def test_odd_names_plain_table_every_row_path(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                              strategy: str) -> None:
    t = _odd_table(db)
    if strategy == "expression":  # an expression with '%' in it as well (the modulo operator)
        expr = sql.SQL("{} + (id % 1) * interval '1 day'").format(sql.Identifier(COLUMN)).as_string(db)
        db.execute("SELECT ttl.enable(%s::regclass, expiration_expression => %s, delete_batch_size => 70)",
                   (t.as_string(db), expr))
    else:
        db.execute("SELECT ttl.enable(%s::regclass, expire_after => '1 day', column_name => %s,"
                   " delete_batch_size => 70)", (t.as_string(db), COLUMN))
        db.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_strategy'", (strategy,))
    db.commit()
    # a row held by an application sends its range down the SKIP LOCKED path
    app = connect(autocommit=False)
    app.execute(sql.SQL("SELECT * FROM {} WHERE id = 500 FOR UPDATE").format(t))
    [res] = expire(dsn)
    app.rollback()
    assert res.status == "ok", (res.error, [(u.status, u.error) for u in res.units])
    assert res.units[0].strategy == ("ctid" if strategy == "expression" else strategy)
    assert res.rows_deleted == 999
    ids = [r[0] for r in db.execute(sql.SQL("SELECT id FROM {} ORDER BY id").format(t)).fetchall()]
    assert ids == [500, *range(1001, 1101)]
    db.commit()
    [res] = expire(dsn)
    assert res.rows_deleted == 1
    assert db.execute(sql.SQL("SELECT count(*), min(id) FROM {}").format(t)).fetchone() == (100, 1001)


@pytest.mark.parametrize("action", ["drop", "detach"])
def test_odd_names_partitions_dropped_or_detached(db: psycopg.Connection[Any], dsn: str, action: str) -> None:
    archive = 'Archivé "x" %d'
    t = sql.Identifier(TABLE)
    old, new = sql.Identifier('Év "p" 2020 %s'), sql.Identifier('Év "p" 2030 %s')
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(archive)))
    db.execute(sql.SQL("CREATE TABLE {} (id int, {} timestamptz) PARTITION BY RANGE ({})").format(
        t, sql.Identifier(COLUMN), sql.Identifier(COLUMN)))
    db.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ('2020-01-01') TO ('2021-01-01')").format(
        old, t))
    db.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ('2021-01-01') TO ('2100-01-01')").format(
        new, t))
    db.execute(sql.SQL("CREATE INDEX ON {} ({})").format(t, sql.Identifier(COLUMN)))
    # the old partition: all expired; the other: 10 expired rows (2021) and 10 live ones (2090)
    db.execute(sql.SQL("INSERT INTO {} SELECT g, timestamptz '2020-02-01' + g * interval '1 h'"
                       " FROM generate_series(1, 50) g").format(t))
    db.execute(sql.SQL("INSERT INTO {} SELECT 100 + g, CASE WHEN g <= 10 THEN timestamptz '2021-02-01'"
                       " ELSE '2090-01-01' END FROM generate_series(1, 20) g").format(t))
    db.execute("SELECT ttl.enable(%s::regclass, expire_after => '1 day', column_name => %s,"
               " partition_action => %s, detach_schema => %s)",
               (t.as_string(db), COLUMN, action, archive if action == "detach" else None))
    db.commit()
    [res] = expire(dsn)
    assert res.status == "ok", (res.error, [(u.unit, u.status, u.error) for u in res.units])
    by_action = {u.action: u for u in res.units}
    assert by_action[action].status == "ok" and by_action["delete"].rows_deleted == 10
    assert (res.partitions_dropped, res.partitions_detached) == ((1, 0) if action == "drop" else (0, 1))
    tables = db.execute("SELECT n.nspname, c.relname, c.relispartition FROM pg_class c"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace"
                        " WHERE c.relname LIKE 'Év \"p\"%' AND c.relkind = 'r' ORDER BY 2").fetchall()
    kept = [("public", 'Év "p" 2030 %s', True)]
    assert tables == (kept if action == "drop" else [(archive, 'Év "p" 2020 %s', False), *kept])
    assert db.execute(sql.SQL("SELECT count(*), min(id) FROM {}").format(t)).fetchone() == (10, 111)


def test_odd_names_column_ttl_values_nulled(db: psycopg.Connection[Any], dsn: str) -> None:
    t = _odd_table(db)
    db.execute("SELECT ttl.enable(%s::regclass, expire_after => '1 day', column_name => %s)",
               (t.as_string(db), COLUMN))
    db.execute("SELECT ttl.enable_column(%s::regclass, 'note %%s', '1 hour', 'write')", (t.as_string(db),))
    # the values of the live rows 1001..1050 were written two hours ago: due; 1051..1100 are not
    db.execute(sql.SQL("UPDATE {} SET {} = tstzrange(now() - interval '2 hours', now() - interval '1 hour')"
                       " WHERE id BETWEEN 1001 AND 1050").format(t, sql.Identifier("ttl_cell_note %s")))
    db.commit()
    [res] = expire(dsn)
    assert res.status == "ok" and res.rows_deleted == 1000
    assert db.execute("SELECT values_nulled FROM ttl.run_unit").fetchone() == (50,)
    nulls = db.execute(sql.SQL("SELECT count(*) FILTER (WHERE {n} IS NULL), min(id) FILTER (WHERE {n} IS NULL),"
                               " max(id) FILTER (WHERE {n} IS NULL), count(*) FROM {t}").format(
        n=sql.Identifier("note %s"), t=t)).fetchone()
    assert nulls == (50, 1001, 1050, 100)


def test_cli_names_the_invalid_table_argument(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    t = _odd_table(db)
    db.execute("SELECT ttl.enable(%s::regclass, expire_after => '1 day', column_name => %s)",
               (t.as_string(db), COLUMN))
    db.execute("CREATE TABLE plain (id int)")
    db.commit()
    res = cli("run", "--once", "--quiet", "ev; DROP TABLE plain", "--dsn", dsn)
    assert res.returncode != 0
    assert 'table argument "ev; DROP TABLE plain"' in res.stderr and "not a valid table name" in res.stderr
    assert db.execute("SELECT to_regclass('plain') IS NOT NULL").fetchone() == (True,)
    # the odd name itself, quoted as SQL quotes it, is a valid argument
    res = cli("run", "--once", "--json", t.as_string(db), "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    assert db.execute(sql.SQL("SELECT count(*) FROM {}").format(t)).fetchone() == (100,)
