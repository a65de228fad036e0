"""Engine: expiry semantics of row deletion (every type and unit, NULL, the exact
boundary, re-check race, application row locks, timeouts, history, pause)."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire, oldest_expired, plan
from pg_ttl.expire import rows as rows_mod
from pg_ttl.expire.engine import EngineError

# A fixed cutoff in the past gives an exact boundary (the real one is now()).
C = datetime(2026, 3, 31, 0, 0, tzinfo=UTC)
EPOCH_DAY_BEFORE = int(datetime(2026, 3, 30, tzinfo=UTC).timestamp())  # C - 1 day, Unix seconds


def _ids(db: psycopg.Connection[Any], table: str = "t") -> list[int]:
    db.rollback()
    return [r[0] for r in db.execute(f"SELECT id FROM {table} ORDER BY id").fetchall()]


def _make(db: psycopg.Connection[Any], coltype: str, rows: list[tuple[int, Any]], enable: str,
          index: bool = False) -> None:
    db.execute(f"CREATE TABLE t (id int PRIMARY KEY, v {coltype})")
    if index:
        db.execute("CREATE INDEX ON t (v)")
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO t VALUES (%s, %s::{coltype})", rows)
    db.execute(enable)
    db.commit()


# (column type, unit, rows as (id, value): ids < 10 expire at C exactly or earlier, ids >= 10 stay)
CASES = {
    "timestamptz": ("timestamptz", None, [(1, "2026-03-30 00:00:00+00"), (2, "2026-03-29 23:59:59.999999+00"),
                                          (10, "2026-03-30 00:00:00.000001+00"), (11, None)]),
    # read as UTC whatever the session's TimeZone (the test database runs Asia/Kolkata)
    "timestamp": ("timestamp", None, [(1, "2026-03-30 00:00:00"), (2, "2026-01-01 00:00:00"),
                                      (10, "2026-03-30 00:00:00.000001"), (11, None)]),
    "date": ("date", None, [(1, "2026-03-30"), (2, "2020-01-01"), (10, "2026-03-31"), (11, None)]),
    "int seconds": ("integer", "seconds", [(1, EPOCH_DAY_BEFORE), (2, 0), (10, EPOCH_DAY_BEFORE + 1), (11, None)]),
    "bigint seconds": ("bigint", "seconds", [(1, EPOCH_DAY_BEFORE), (10, EPOCH_DAY_BEFORE + 1), (11, None)]),
    "bigint ms": ("bigint", "milliseconds", [(1, EPOCH_DAY_BEFORE * 1000), (10, EPOCH_DAY_BEFORE * 1000 + 1),
                                             (11, None)]),
    "bigint us": ("bigint", "microseconds", [(1, EPOCH_DAY_BEFORE * 10**6), (10, EPOCH_DAY_BEFORE * 10**6 + 1),
                                             (11, None)]),
    "bigint ns": ("bigint", "nanoseconds", [(1, EPOCH_DAY_BEFORE * 10**9), (2, EPOCH_DAY_BEFORE * 10**9 - 1),
                                            (10, EPOCH_DAY_BEFORE * 10**9 + 1), (11, None)]),
    "numeric seconds": ("numeric", "seconds", [(1, Decimal(EPOCH_DAY_BEFORE)),
                                               (2, Decimal(EPOCH_DAY_BEFORE) - Decimal("0.5")),
                                               (10, Decimal(EPOCH_DAY_BEFORE) + Decimal("0.000001")), (11, None)]),
    "numeric ns": ("numeric", "nanoseconds", [(1, Decimal(EPOCH_DAY_BEFORE * 10**9)),
                                              (10, Decimal(EPOCH_DAY_BEFORE * 10**9) + Decimal("0.5")), (11, None)]),
}


@pytest.mark.parametrize("index", [False, True], ids=["ctid", "index"])
@pytest.mark.parametrize("case", list(CASES))
def test_types_and_units_boundary_null(db: psycopg.Connection[Any], dsn: str, case: str, index: bool) -> None:
    coltype, unit, rows = CASES[case]
    db.execute(f"ALTER DATABASE {db.info.dbname} SET timezone = 'Asia/Kolkata'")
    unit_arg = f", unit => '{unit}'" if unit else ""
    _make(db, coltype, rows, f"SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v'{unit_arg})",
          index=index)
    [res] = expire(dsn, cutoff=C)
    assert res.status == "ok"
    assert res.units[0].strategy == ("index" if index else "ctid")
    expected = sorted(i for i, _ in rows if i >= 10)
    assert _ids(db) == expected
    assert res.rows_deleted == len(rows) - len(expected)


def test_month_interval_uses_calendar_months(db: psycopg.Connection[Any], dsn: str) -> None:
    # 2026-02-28 + 1 month = 03-28 <= C; 02-28 + 1 month + 1us > ... ; 03-01 + 1 month = 04-01 > C
    rows = [(1, "2026-02-28 00:00:00+00"), (2, "2026-03-01 00:00:00+00"), (3, "2026-02-28 23:59:59+00"),
            (4, "2026-03-02 00:00:00+00")]
    _make(db, "timestamptz", rows, "SELECT ttl.enable('t', expire_after => '1 month', column_name => 'v')", True)
    # C = 03-31: 02-28 and its evening expire (03-28); 03-01 + 1 month = 04-01 stays; so does 03-02
    expire(dsn, cutoff=C)
    assert _ids(db) == [2, 4]


def test_expression_policy_boundary_and_null(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, days int)")
    db.execute("""INSERT INTO t VALUES (1, '2026-03-30 00:00+00', 1), (2, '2026-03-21 00:00+00', 10),
                  (10, '2026-03-30 00:00:00.000001+00', 1), (11, '2026-03-22 00:00+00', 10),
                  (12, NULL, 1), (13, '2020-01-01', NULL)""")
    db.execute("SELECT ttl.enable('t', expiration_expression => 'v + days * interval ''1 day''')")
    db.commit()
    [res] = expire(dsn, cutoff=C)
    assert res.status == "ok"
    assert _ids(db) == [10, 11, 12, 13]


def test_cutoff_is_server_now_and_never_later(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz)")
    # expiry 1 s after the insert: not expired at the run's now() taken right after
    db.execute("INSERT INTO t VALUES (1, now() - interval '1 day' + interval '1 minute'),"
               " (2, now() - interval '2 days')")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")
    db.commit()
    [res] = expire(dsn)
    cutoff = db.execute("SELECT cutoff, cutoff <= now() FROM ttl.run").fetchone()
    assert cutoff is not None and cutoff[1]
    assert _ids(db) == [1] and res.rows_deleted == 1
    with pytest.raises(EngineError, match="later than the server clock"):
        expire(dsn, cutoff=datetime(2999, 1, 1, tzinfo=UTC))


def _big(db: psycopg.Connection[Any], n: int, index: bool, pk: bool = True) -> None:
    db.execute(f"CREATE TABLE t (id int {'PRIMARY KEY' if pk else ''}, v timestamptz, pad text)")
    if index:
        db.execute("CREATE INDEX ON t (v)")
    # odd ids expired (2020), even ids live (2030)
    db.execute("""INSERT INTO t SELECT g, CASE WHEN g %% 2 = 1 THEN timestamptz '2020-01-01' + g * interval '1 s'
                                                  ELSE timestamptz '2030-01-01' END, 'x'
                    FROM generate_series(1, %s) g""", (n,))
    db.execute("ANALYZE t")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v', select_batch_size => 300,"
               " delete_batch_size => 70)")
    if index:  # half the rows expired, interleaved: 'auto' would sweep ctid ranges
        db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()


@pytest.mark.parametrize("index", [False, True], ids=["ctid", "index"])
def test_batches_checkpoint_and_history(db: psycopg.Connection[Any], dsn: str, index: bool) -> None:
    _big(db, 3000, index)
    batches: list[tuple[int, int]] = []

    class Listener:
        def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
            pass

        def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
            batches.append((selected, deleted))

        def unit_finished(self, result: Any) -> None:
            pass

    [res] = expire(dsn, progress=Listener())
    assert res.rows_deleted == 1500 and res.rows_selected == 1500
    if index:
        # key windows: the first of delete_batch_size rows, then sized by time, at most fourfold a window
        assert [d for _, d in batches] == [70, 280, 1120, 30]
    else:
        # ranges hold delete_batch_size rows, a few more where a whole block ends one
        assert all(d <= 70 + 10 for _, d in batches) and len(batches) >= math.ceil(1500 / 80)
    assert sum(d for _, d in batches) == 1500
    assert db.execute("SELECT count(*), count(*) FILTER (WHERE id % 2 = 1) FROM t").fetchone() == (1500, 0)
    unit = db.execute("SELECT status, rows_deleted, strategy, checkpoint FROM ttl.run_unit").fetchone()
    assert unit == ("ok", 1500, "index" if index else "ctid", None)


@pytest.mark.parametrize("index", [False, True], ids=["ctid", "index"])
def test_recheck_keeps_row_updated_between_phases(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                  monkeypatch: pytest.MonkeyPatch, index: bool) -> None:
    _big(db, 200, index)
    other = connect()
    original = rows_mod._delete_plain
    done: list[bool] = []

    def between_phases(ctx: Any, chunk: Any) -> int:
        if not done:  # phase 1 took rows 1 and 3 into the first range; another session makes them live
            other.execute("UPDATE t SET v = '2030-06-01' WHERE id IN (1, 3)")
            done.append(True)
        return original(ctx, chunk)

    monkeypatch.setattr(rows_mod, "_delete_plain", between_phases)
    [res] = expire(dsn)
    assert done
    # rows are counted as selected as they are deleted
    assert res.rows_selected == 98 and res.rows_deleted == 98
    assert [i for i in _ids(db) if i % 2 == 1] == [1, 3]


@pytest.mark.parametrize(("order", "share", "setting", "expected"), [
    ("time", 0.01, "auto", "index"), ("time", 0.5, "auto", "index"), ("time", 0.7, "auto", "ctid"),
    ("random", 0.01, "auto", "index"), ("random", 0.15, "auto", "ctid"),
    ("time", 0.5, "index", "index"), ("time", 0.01, "ctid", "ctid"),
])
def test_strategy_follows_the_share_of_expired_rows(db: psycopg.Connection[Any], dsn: str, order: str,
                                                    share: float, setting: str, expected: str) -> None:
    # 20,000 rows one minute apart, in insertion order or shuffled; the cutoff expires `share` of them
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, pad text)")
    db.execute("CREATE INDEX ON t (v)")
    db.execute(f"""INSERT INTO t SELECT g, timestamptz '2020-01-01' + g * interval '1 minute', 'x'
                     FROM generate_series(1, 20000) g ORDER BY {'g' if order == 'time' else 'md5(g::text)'}""")
    db.execute("ANALYZE t")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")
    db.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_strategy'", (setting,))
    db.commit()
    cutoff = datetime(2020, 1, 2, tzinfo=UTC) + timedelta(minutes=int(20000 * share))  # row g expires at g
    [res] = expire(dsn, cutoff=cutoff)
    assert res.status == "ok" and res.units[0].strategy == expected
    assert res.rows_deleted == int(20000 * share) and len(_ids(db)) == 20000 - res.rows_deleted


def test_row_strategy_setting_is_checked(db: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("UPDATE ttl.settings SET value = 'seqscan' WHERE name = 'row_strategy'")


@pytest.mark.parametrize("index", [False, True], ids=["ctid", "index"])
def test_row_locked_by_application_is_skipped_then_removed(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                           index: bool) -> None:
    _big(db, 2000, index)
    app = connect(autocommit=False)
    app.execute("SELECT * FROM t WHERE id = 501 FOR UPDATE")  # held until the end of the first run
    started = time.monotonic()
    [res] = expire(dsn)
    elapsed = time.monotonic() - started
    assert res.status == "ok"
    assert res.rows_deleted == 999
    assert elapsed < 2.0  # waits at most row_lock_timeout (50 ms) once, never on the application
    assert [i for i in _ids(db) if i % 2 == 1] == [501]
    app.rollback()
    [res] = expire(dsn)
    assert res.rows_deleted == 1
    assert [i for i in _ids(db) if i % 2 == 1] == []


def test_locked_row_updated_to_live_by_its_holder_survives(db: psycopg.Connection[Any], dsn: str,
                                                           connect: Any) -> None:
    _big(db, 100, True)
    app = connect(autocommit=False)
    app.execute("UPDATE t SET v = '2031-01-01' WHERE id = 7")  # not committed yet: row locked, still expired
    [res] = expire(dsn)
    app.commit()
    assert res.rows_deleted == 49
    assert [i for i in _ids(db) if i % 2 == 1] == [7]
    [res] = expire(dsn)
    assert res.rows_deleted == 0


def test_table_lock_times_out_unit_without_failing_run(db: psycopg.Connection[Any], dsn: str,
                                                       connect: Any) -> None:
    _big(db, 100, False)
    db.execute("CREATE TABLE t2 (id int PRIMARY KEY, v timestamptz)")
    db.execute("INSERT INTO t2 VALUES (1, '2020-01-01')")
    db.execute("SELECT ttl.enable('t2', expire_after => '1 day', column_name => 'v')")
    db.execute("UPDATE ttl.settings SET value = '200ms' WHERE name = 'lock_timeout'")
    db.commit()
    app = connect(autocommit=False)
    app.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
    started = time.monotonic()
    results = {r.table: r for r in expire(dsn)}
    assert time.monotonic() - started < 2.0
    app.rollback()
    assert results["t"].status == "partial"
    assert results["t"].units[0].status == "timeout" and "lock_timeout" in (results["t"].units[0].error or "")
    assert results["t2"].status == "ok" and results["t2"].rows_deleted == 1
    assert db.execute("SELECT u.status, u.error IS NOT NULL FROM ttl.run_unit u JOIN ttl.run r USING (run_id)"
                      " WHERE r.table_name = 't'").fetchone() == ("timeout", True)


def test_statement_timeout_is_set_and_recorded(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz)")
    db.execute("INSERT INTO t SELECT g, '2020-01-01' FROM generate_series(1, 10) g")
    # an expression that sleeps makes every statement slower than the 100 ms statement_timeout
    # (declared STABLE: volatile expressions are refused)
    db.execute("CREATE FUNCTION slow(ts timestamptz) RETURNS timestamptz LANGUAGE sql STABLE"
               " AS $$ SELECT ts + (pg_sleep(0.05) IS NULL)::int * interval '0' $$")
    db.execute("SELECT ttl.enable('t', expiration_expression => 'slow(v)')")
    db.execute("UPDATE ttl.settings SET value = '100ms' WHERE name = 'statement_timeout'")
    db.commit()
    [res] = expire(dsn)
    assert res.units[0].status == "timeout" and "statement_timeout" in (res.units[0].error or "")
    assert res.status == "partial"
    assert len(_ids(db)) == 10


def test_paused_policy_is_skipped_with_reason(db: psycopg.Connection[Any], dsn: str) -> None:
    _big(db, 10, False)
    db.execute("SELECT ttl.pause('t')")
    db.commit()
    [res] = expire(dsn)
    assert res.status == "paused" and res.rows_deleted == 0
    assert len(_ids(db)) == 10
    run = db.execute("SELECT status, error, finished_at IS NOT NULL FROM ttl.run").fetchone()
    assert run is not None and run[0] == "paused" and "paused" in run[1] and run[2]


@pytest.mark.slow
def test_rate_limit_waits_between_transactions(db: psycopg.Connection[Any], dsn: str) -> None:
    _big(db, 400, False)
    db.execute("SELECT ttl.set_options('t', '{\"delete_rate_limit\": \"200\", \"delete_batch_size\": \"50\"}')")
    db.commit()
    started = time.monotonic()
    [res] = expire(dsn)
    elapsed = time.monotonic() - started
    assert res.rows_deleted == 200
    # 200 rows at 200 rows/s: the limiter sleeps after each batch until 1 s has passed
    assert 0.9 <= elapsed < 2.0


@pytest.mark.slow
def test_select_rate_limit_holds_for_ctid_ranges(db: psycopg.Connection[Any], dsn: str) -> None:
    _big(db, 400, False)  # no TTL index: ctid ranges, whose rows are selected by the delete itself
    db.execute("SELECT ttl.set_options('t', '{\"select_rate_limit\": \"200\", \"delete_batch_size\": \"50\"}')")
    db.commit()
    started = time.monotonic()
    [res] = expire(dsn)
    elapsed = time.monotonic() - started
    assert res.units[0].strategy == "ctid" and res.rows_selected == res.rows_deleted == 200
    assert 0.9 <= elapsed < 2.0  # 200 rows at 200 rows/s


@pytest.mark.slow
@pytest.mark.parametrize("option", ["delete_rate_limit", "select_rate_limit"])
def test_call_run_honours_rate_limits(db: psycopg.Connection[Any], option: str) -> None:
    """CALL ttl.run() keeps the same limits as the Python engine, waiting between transactions."""
    _big(db, 400, False)
    db.execute("SELECT ttl.set_options('t', %s)", (json.dumps({option: "200", "delete_batch_size": "50"}),))
    db.commit()
    db.autocommit = True
    started = time.monotonic()
    db.execute("CALL ttl.run('t')")
    elapsed = time.monotonic() - started
    assert db.execute("SELECT rows_deleted, status FROM ttl.run").fetchone() == (200, "ok")
    assert len(_ids(db)) == 200
    assert 0.9 <= elapsed < 2.0  # 200 rows at 200 rows/s


def test_call_run_counts_exactly_on_a_sparse_table(db: psycopg.Connection[Any]) -> None:
    """Ranges grow where expired rows are sparse; the counters committed with the
    deletes still equal the rows gone, and a finished unit keeps no checkpoint."""
    db.execute("CREATE TABLE t (id int, v timestamptz, pad text)")
    # one expired row in 50, spread over the table
    db.execute("INSERT INTO t SELECT g, CASE WHEN g % 50 = 0 THEN timestamptz '2020-01-01' ELSE '2999-01-01' END,"
               " repeat('x', 100) FROM generate_series(1, 50000) g")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v', delete_batch_size => 100,"
               " select_batch_size => 5000)")
    db.execute("ANALYZE t")
    db.commit()
    db.autocommit = True
    db.execute("CALL ttl.run('t')")
    assert db.execute("SELECT rows_deleted, status FROM ttl.run").fetchone() == (1000, "ok")
    assert db.execute("SELECT count(*) FROM t").fetchone() == (49000,)
    assert db.execute("SELECT rows_deleted, checkpoint FROM ttl.run_unit").fetchone() == (1000, None)


def test_stop_event_finishes_batch_and_resumes(db: psycopg.Connection[Any], dsn: str) -> None:
    import threading

    _big(db, 2000, False)
    stop = threading.Event()

    class StopAfterTwo:
        n = 0

        def unit_started(self, *a: Any) -> None:
            pass

        def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
            self.n += 1
            if self.n == 2:
                stop.set()

        def unit_finished(self, result: Any) -> None:
            pass

    [res] = expire(dsn, stop=stop, progress=StopAfterTwo())
    assert res.status == "partial" and 0 < res.rows_deleted < 1000
    first = res.rows_deleted
    cp = db.execute("SELECT checkpoint FROM ttl.run_unit").fetchone()
    assert cp is not None and cp[0]["strategy"] == "ctid" and cp[0]["from"] != "(0,0)"
    [res] = expire(dsn)
    assert res.status == "ok" and res.rows_deleted == 1000 - first
    assert db.execute("SELECT sum(rows_deleted) FROM ttl.run_unit").fetchone() == (1000,)


def test_plan_changes_nothing_and_oldest_expired(db: psycopg.Connection[Any], dsn: str) -> None:
    _big(db, 1000, True)
    relid = db.execute("SELECT 't'::regclass::oid").fetchone()
    assert relid is not None
    [p] = plan(db, "t")
    assert (p.unit, p.action, p.rows, p.total_rows) == ("t", "delete", 500, 1000)
    assert p.oldest_expiry == datetime(2020, 1, 2, 0, 0, 1, tzinfo=UTC)
    assert p.bytes_reclaimed > 0
    assert oldest_expired(db, relid[0]) == datetime(2020, 1, 2, 0, 0, 1, tzinfo=UTC)
    db.commit()
    assert len(_ids(db)) == 1000 and db.execute("SELECT count(*) FROM ttl.run").fetchone() == (0,)
    expire(dsn)
    assert oldest_expired(db, relid[0]) is None


def test_history_retention_keeps_latest_run_per_table(db: psycopg.Connection[Any], dsn: str) -> None:
    _big(db, 10, False)
    expire(dsn)
    expire(dsn)
    db.execute("UPDATE ttl.run SET started_at = started_at - interval '40 days'")
    db.commit()
    expire(dsn)
    # the two old runs: the older goes, the run before the newest is ... also old: only the newest stays old-proof
    rows = db.execute("SELECT count(*) FROM ttl.run").fetchone()
    assert rows == (1,)
    last = db.execute("SELECT table_name, status, rows_deleted FROM ttl.last_run").fetchall()
    assert last == [("t", "ok", 0)]


def test_unknown_or_untracked_table_is_a_clear_error(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE plain (id int)")
    db.commit()
    with pytest.raises(EngineError, match='"nope" does not exist'):
        expire(dsn, ["nope"])
    with pytest.raises(EngineError, match='"plain" has no TTL policy'):
        expire(dsn, ["plain"])


def test_sql_procedure_runs_one_pass(db: psycopg.Connection[Any], connect: Any) -> None:
    """CALL ttl.run() (psql, pg_cron): deletes in committed ctid ranges, skips locked rows and paused
    tables, records the run, and gives the session its settings back."""
    _big(db, 2000, False)
    db.execute("CREATE TABLE t2 (id int PRIMARY KEY, v timestamptz)")
    db.execute("INSERT INTO t2 VALUES (1, '2020-01-01')")
    db.execute("SELECT ttl.enable('t2', expire_after => '1 day', column_name => 'v')")
    db.execute("SELECT ttl.pause('t2')")
    db.commit()
    app = connect(autocommit=False)
    app.execute("SELECT * FROM t WHERE id = 501 FOR UPDATE")
    psql = connect()  # CALL with COMMITs inside: not in a transaction block
    before = psql.execute("SELECT current_setting('search_path'), current_setting('TimeZone')").fetchone()
    started = time.monotonic()
    psql.execute("CALL ttl.run()")
    assert time.monotonic() - started < 2.0  # never waited on the application's row lock
    assert psql.execute("SELECT current_setting('search_path'), current_setting('TimeZone')").fetchone() == before
    app.rollback()
    assert [i for i in _ids(db) if i % 2 == 1] == [501] and len(_ids(db)) == 1001
    assert _ids(db, "t2") == [1]
    last = {r[0]: r[1:] for r in db.execute(
        "SELECT table_name, status, rows_deleted, worker FROM ttl.last_run").fetchall()}
    assert last == {"t": ("ok", 999, "ttl.run()"), "t2": ("paused", 0, "ttl.run()")}
    assert db.execute("SELECT unit_name, strategy, status, checkpoint FROM ttl.run_unit").fetchall() == [
        ("t", "ctid", "ok", None)]
    psql.execute("CALL ttl.run('t')")
    assert [i for i in _ids(db) if i % 2 == 1] == []


def test_block_range_delete_statement_is_the_databases(db: psycopg.Connection[Any], connect: Any) -> None:
    """ttl.delete_rows_sql: the DELETE that pg-ttl run, the worker and CALL ttl.run() execute for a
    block range; its bounds are $1/$2, expiry is re-checked, the SKIP LOCKED form passes a held row,
    and a cutoff later than now() is refused (rows would expire early)."""
    _make(db, "timestamptz", [(i, "2020-01-01" if i % 2 else "2100-01-01") for i in range(1, 11)],
          "SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")
    plain, skip = db.execute("SELECT ttl.delete_rows_sql('t', 't', now()), "
                             "ttl.delete_rows_sql('t', 't', now(), skip_locked => true)").fetchone() or (None, None)
    assert "$1" in plain and "$2" in plain and "SKIP LOCKED" in skip and "SKIP LOCKED" not in plain
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="later than now"):
        db.execute("SELECT ttl.delete_rows_sql('t', 't', now() + interval '1 second')")
    db.rollback()
    app = connect(autocommit=False)
    app.execute("SELECT * FROM t WHERE id = 3 FOR UPDATE")
    cur = psycopg.RawCursor(db).execute(skip, ("(0,0)", "(1,0)"))  # block 0 holds all ten rows
    assert cur.rowcount == 4  # 1, 5, 7, 9: expired and not held
    db.commit()
    assert _ids(db) == [2, 3, 4, 6, 8, 10]
    app.rollback()
    assert psycopg.RawCursor(db).execute(plain, ("(1,0)", "(2,0)")).rowcount == 0  # an empty range
    assert psycopg.RawCursor(db).execute(plain, ("(0,0)", "(1,0)")).rowcount == 1
    db.commit()
    assert _ids(db) == [2, 4, 6, 8, 10]


def test_call_run_records_a_locked_table_as_timed_out_and_goes_on(db: psycopg.Connection[Any],
                                                                   connect: Any) -> None:
    """CALL ttl.run(): a table an application holds locked past lock_timeout is that unit's
    timeout (the server's message kept), the run is partial, and the next table is done."""
    for name in ("t1", "t2"):
        db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v timestamptz)")
        db.execute(f"INSERT INTO {name} SELECT g, '2020-01-01' FROM generate_series(1, 10) g")
        db.execute("SELECT ttl.enable(%s, expire_after => '1 day', column_name => 'v')", (name,))
    db.execute("UPDATE ttl.settings SET value = '100ms' WHERE name = 'lock_timeout'")
    db.commit()
    app = connect(autocommit=False)
    app.execute("LOCK TABLE t1 IN ACCESS EXCLUSIVE MODE")
    try:
        connect().execute("CALL ttl.run()")
    finally:
        app.rollback()
    units = {r[0]: r[1:] for r in db.execute("SELECT unit_name, status, error, rows_deleted FROM ttl.run_unit")}
    assert units["t1"][0] == "timeout" and "lock timeout" in units["t1"][1] and units["t1"][2] == 0
    assert units["t2"] == ("ok", None, 10)
    assert dict(db.execute("SELECT table_name, status FROM ttl.last_run").fetchall()) == {"t1": "partial", "t2": "ok"}
    assert _ids(db, "t1") == list(range(1, 11)) and _ids(db, "t2") == []
