"""Engine: partition-wise expiry (drop / detach whole range partitions, row by row elsewhere)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire, plan

C = datetime(2026, 3, 10, 0, 0, tzinfo=UTC)  # the run's cutoff in these tests


def _tables(db: psycopg.Connection[Any]) -> set[str]:
    db.rollback()
    return {r[0] for r in db.execute(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relkind IN ('r', 'p') AND n.nspname IN ('public', 'archive')").fetchall()}


def _daily(db: psycopg.Connection[Any], default: bool = True) -> None:
    """ev partitioned by day, 2026-03-05 .. 03-11, 10 rows per day at 12:00, + default partition."""
    db.execute("CREATE TABLE ev (id int, ts timestamptz, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    for d in range(5, 12):
        db.execute(f"CREATE TABLE ev_{d:02d} PARTITION OF ev FOR VALUES FROM ('2026-03-{d:02d} 00:00+00')"
                   f" TO ('2026-03-{d + 1:02d} 00:00+00')")
    if default:
        db.execute("CREATE TABLE ev_default PARTITION OF ev DEFAULT")
    db.execute("""INSERT INTO ev SELECT d * 100 + g, timestamptz '2026-03-01 12:00+00' + d * interval '1 day'
                    FROM generate_series(4, 10) d, generate_series(1, 10) g""")


def test_expired_range_partitions_dropped_others_row_by_row(db: psycopg.Connection[Any], dsn: str) -> None:
    _daily(db)
    # default partition: an old row (expired) and a live one
    db.execute("INSERT INTO ev VALUES (1, '2020-01-01'), (2, '2030-01-01')")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts')")
    db.commit()
    # cutoff 03-10 00:00, expire_after 1 day: a partition whose upper bound is <= 03-09 00:00 goes whole:
    # ev_05 .. ev_07 (upper 03-06 .. 03-08) and ev_08 (upper 03-09, exactly at the cutoff).
    # ev_09 (rows at 03-09 12:00 expire 03-10 12:00) stays; ev_10, ev_11 stay; default: row 1 goes.
    # plan (cutoff: the real now(), months after these days) would drop every daily partition
    plans = {p.unit: p for p in plan(db, "ev")}
    db.commit()
    assert {u for u, p in plans.items() if p.action == "drop"} == {f"ev_{d:02d}" for d in range(5, 12)}
    assert (plans["ev_05"].rows, plans["ev_05"].bytes_reclaimed > 0) == (10, True)
    assert (plans["ev_default"].action, plans["ev_default"].rows, plans["ev_default"].total_rows) == ("delete", 1, 2)
    [res] = expire(dsn, cutoff=C)
    assert res.status == "ok", res
    assert res.partitions_dropped == 4
    by_unit = {u.unit: u for u in res.units}
    assert by_unit["ev_05"].action == "drop" and by_unit["ev_08"].action == "drop"
    assert by_unit["ev_09"].action == "delete" and by_unit["ev_09"].rows_deleted == 0
    assert by_unit["ev_default"].action == "delete" and by_unit["ev_default"].rows_deleted == 1
    assert _tables(db) == {"public.ev", "public.ev_09", "public.ev_10", "public.ev_11", "public.ev_default"}
    assert db.execute("SELECT count(*) FROM ev").fetchone() == (31,)
    run = db.execute("SELECT partitions_dropped, status FROM ttl.run").fetchone()
    assert run == (4, "ok")


def test_partition_with_unexpired_rows_near_boundary_goes_row_by_row(db: psycopg.Connection[Any],
                                                                     dsn: str) -> None:
    _daily(db, default=False)
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts')")
    db.commit()
    # one microsecond earlier: ev_08's bound (03-09 00:00) + 1 day is after the cutoff, so not dropped;
    # but its rows (03-08 12:00) are all expired: deleted row by row, partition kept
    [res] = expire(dsn, cutoff=datetime(2026, 3, 9, 23, 59, 59, 999999, tzinfo=UTC))
    by_unit = {u.unit: u for u in res.units}
    assert by_unit["ev_07"].action == "drop"
    assert by_unit["ev_08"].action == "delete" and by_unit["ev_08"].rows_deleted == 10
    assert "public.ev_08" in _tables(db)


def test_multi_level_drops_whole_subtree_and_hash_goes_row_by_row(db: psycopg.Connection[Any], dsn: str) -> None:
    # root: RANGE by month on ts; each month: HASH by id (2 leaves)
    db.execute("CREATE TABLE m (id int, ts timestamp, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    for month in ("01", "02", "03"):
        nxt = f"{int(month) + 1:02d}"
        db.execute(f"CREATE TABLE m_{month} PARTITION OF m FOR VALUES FROM ('2026-{month}-01') TO ('2026-{nxt}-01')"
                   " PARTITION BY HASH (id)")
        for r in (0, 1):
            db.execute(f"CREATE TABLE m_{month}_{r} PARTITION OF m_{month} FOR VALUES WITH (MODULUS 2, REMAINDER {r})")
    db.execute("""INSERT INTO m SELECT g, timestamp '2026-01-01' + g * interval '1 hour'
                    FROM generate_series(0, 24 * 68) g""")  # 2026-01-01 .. 2026-03-10
    db.execute("SELECT ttl.enable('m', expire_after => '7 days', column_name => 'ts')")
    db.commit()
    before = db.execute("SELECT count(*) FILTER (WHERE ts + interval '7 days' > '2026-03-10'), count(*) FROM m"
                        ).fetchone()
    assert before is not None
    db.commit()  # an open transaction that read m would hold its partitions (DROP then times out)
    # cutoff 03-10: m_01 (upper 02-01) goes whole with both hash leaves; m_02 (upper 03-01 + 7 days = 03-08)
    # too; m_03 (upper 04-01) row by row in each hash leaf
    [res] = expire(dsn, cutoff=C)
    assert res.status == "ok", res
    actions = sorted((u.unit, u.action) for u in res.units)
    assert actions == [("m_01", "drop"), ("m_02", "drop"), ("m_03_0", "delete"), ("m_03_1", "delete")]
    assert _tables(db) == {"public.m", "public.m_03", "public.m_03_0", "public.m_03_1"}
    assert db.execute("SELECT count(*) FROM m").fetchone() == (before[0],)
    assert res.rows_deleted > 0 and sum(u.rows_deleted for u in res.units if u.action == "delete") == res.rows_deleted


def test_list_then_range_levels_and_expression_policies(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE l (id int, region text, ts date) PARTITION BY LIST (region)")
    db.execute("CREATE TABLE l_eu PARTITION OF l FOR VALUES IN ('eu') PARTITION BY RANGE (ts)")
    db.execute("CREATE TABLE l_eu_old PARTITION OF l_eu FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')")
    db.execute("CREATE TABLE l_eu_new PARTITION OF l_eu FOR VALUES FROM ('2026-02-01') TO ('2026-04-01')")
    db.execute("CREATE TABLE l_us PARTITION OF l FOR VALUES IN ('us')")
    db.execute("""INSERT INTO l VALUES (1, 'eu', '2026-01-15'), (2, 'eu', '2026-03-10'), (3, 'us', '2026-01-15'),
                                       (4, 'us', '2026-03-10'), (5, 'us', NULL), (6, 'us', '2026-03-09')""")
    db.execute("SELECT ttl.enable('l', expire_after => '1 day', column_name => 'ts')")
    db.commit()
    [res] = expire(dsn, cutoff=C)
    assert sorted((u.unit, u.action) for u in res.units) == [
        ("l_eu_new", "delete"), ("l_eu_old", "drop"), ("l_us", "delete")]
    assert [r[0] for r in db.execute("SELECT id FROM l ORDER BY id").fetchall()] == [2, 4, 5]
    # an expression that grows with ts (date + 1 day, as timestamptz): l_eu_old's bound 02-01 + 1 day has expired
    db.execute("CREATE TABLE l_eu_old PARTITION OF l_eu FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')")
    db.execute("INSERT INTO l VALUES (7, 'eu', '2026-01-20')")
    db.execute("SELECT ttl.disable('l')")
    db.execute("SELECT ttl.enable('l', expiration_expression => '(ts + 1)::timestamptz')")
    db.commit()
    [res] = expire(dsn, cutoff=C)
    assert sorted((u.unit, u.action) for u in res.units) == [
        ("l_eu_new", "delete"), ("l_eu_old", "drop"), ("l_us", "delete")]
    # one that also depends on another column is not provably expired at the bound: row by row
    db.execute("CREATE TABLE l_eu_old PARTITION OF l_eu FOR VALUES FROM ('2026-01-01') TO ('2026-02-01')")
    db.execute("INSERT INTO l VALUES (1, 'eu', '2026-01-15'), (9, 'eu', '2026-01-21')")  # + 10 d, + 90 d
    db.execute("SELECT ttl.disable('l')")
    db.execute("SELECT ttl.enable('l', expiration_expression => '(ts + id * 10)::timestamptz')")
    db.commit()
    [res] = expire(dsn, cutoff=C)
    assert {u.action for u in res.units} == {"delete"}
    assert [r[0] for r in db.execute("SELECT id FROM l ORDER BY id").fetchall()] == [2, 4, 5, 9]


@pytest.mark.parametrize(("expression", "dropped"), [
    ("ts + interval '1 day'", {"ev_05", "ev_06", "ev_07", "ev_08"}),    # as column ts + expire_after 1 day
    ("interval '12 hours' + ts + interval '12 hours'", {"ev_05", "ev_06", "ev_07", "ev_08"}),
    ("date_trunc('day', ts) + interval '1 day'", set()),                # a function: not provable, row by row
    ("ts - interval '1 day' + interval '2 days'", {"ev_05", "ev_06", "ev_07", "ev_08"}),
    ("ts + interval '36 hours'", {"ev_05", "ev_06", "ev_07"}),          # ev_08: 03-09 + 36 h > cutoff
])
def test_expression_monotone_in_the_partition_key_drops_whole_partitions(
        db: psycopg.Connection[Any], dsn: str, expression: str, dropped: set[str]) -> None:
    _daily(db, default=False)
    db.execute("SELECT ttl.enable('ev', expiration_expression => %s)", (expression,))
    db.commit()
    expired = db.execute(f"SELECT count(*) FROM ev WHERE ({expression}) <= %s", (C,)).fetchone()
    db.commit()
    [res] = expire(dsn, cutoff=C)
    assert res.status == "ok", res
    assert {u.unit for u in res.units if u.action == "drop"} == dropped
    assert db.execute(f"SELECT count(*) FROM ev WHERE ({expression}) <= %s", (C,)).fetchone() == (0,)
    assert res.rows_deleted + 10 * len(dropped) == expired[0]


@pytest.mark.parametrize(("expression", "day"), [
    ("ts + interval '1 month'", "2024-03-30"),                     # Mar 31 + 1 month clamps to Apr 30
    ("ts + '1 year'::interval - interval '1 hour'", "2024-02-28"),  # Feb 29 + 1 year clamps to Feb 28
])
def test_month_arithmetic_never_drops_a_partition_holding_a_live_row(
        db: psycopg.Connection[Any], dsn: str, expression: str, day: str) -> None:
    """Months clamp at month ends: Mar 30 23:00 + 1 month (Apr 30 23:00) is later than the
    bound Mar 31 00:00 + 1 month (Apr 30 00:00). A partition is dropped only once its
    last possible row has expired."""
    db.execute("CREATE TABLE ev (id int, ts timestamptz) PARTITION BY RANGE (ts)")
    db.execute("SELECT set_config('TimeZone', 'UTC', false)")
    db.execute(f"CREATE TABLE ev_day PARTITION OF ev FOR VALUES FROM ('{day}') TO (date '{day}' + 1)")
    db.execute(f"CREATE TABLE ev_before PARTITION OF ev FOR VALUES FROM (date '{day}' - 1) TO ('{day}')")
    db.execute(f"INSERT INTO ev VALUES (1, '{day} 01:00'), (2, '{day} 23:00'), (3, date '{day}' - 1)")
    db.execute("SELECT ttl.enable('ev', expiration_expression => %s)", (expression,))
    db.commit()
    at_bound = db.execute(f"SELECT ({expression}) FROM (SELECT (date '{day}' + 1)::timestamptz AS ts) t").fetchone()
    live = db.execute(f"SELECT ({expression}) FROM ev WHERE id = 2").fetchone()
    assert at_bound and live and live[0] > at_bound[0]
    cutoff = at_bound[0] + (live[0] - at_bound[0]) / 2  # the bound has expired, row 2 has not
    db.commit()
    [res] = expire(dsn, cutoff=cutoff)
    assert res.status == "ok", res
    assert {u.unit: u.action for u in res.units}["ev_day"] == "delete"
    assert [r[0] for r in db.execute("SELECT id FROM ev ORDER BY id").fetchall()] == [2]
    # a day after the bound's own expiry the partition goes whole
    db.commit()
    [res] = expire(dsn, cutoff=at_bound[0] + timedelta(days=1))
    assert {u.unit: u.action for u in res.units}["ev_day"] == "drop"
    assert db.execute("SELECT count(*) FROM ev").fetchone() == (0,)


def test_monotone_column_forms() -> None:
    from pg_ttl.expire.units import monotone_column

    grows = ["ts", "ts + interval '30 days'", "(ts + 1)::timestamptz", "interval '1 day' + ts",
             "ts - '1 day'::interval", "ts + interval '1 day' * 3", "CAST(ts AS timestamp) + interval '1 h'"]
    assert [monotone_column(e) for e in grows] == ["ts"] * len(grows)
    unknown = ["'2030-01-01'::timestamptz - ts", "ts + id * interval '1 day'", "greatest(ts, now())",
               "ts::text::timestamptz", "-ts", "ts + (SELECT interval '1 day')", "t.ts", "ts + now() - now()",
               "not sql at all (", "ts; DROP TABLE x", "ts, ts"]
    assert [monotone_column(e) for e in unknown] == [None] * len(unknown)


def test_detach_concurrently_moves_partition_to_schema(db: psycopg.Connection[Any], dsn: str) -> None:
    _daily(db, default=False)
    db.execute("CREATE SCHEMA archive")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts', partition_action => 'detach',"
               " detach_schema => 'archive')")
    db.commit()
    [res] = expire(dsn, cutoff=C)
    assert res.status == "ok" and res.partitions_detached == 4
    assert {u.strategy for u in res.units if u.action == "detach"} == {"concurrently"}
    assert {"archive.ev_05", "archive.ev_08", "public.ev_09"} <= _tables(db)
    assert "public.ev_05" not in _tables(db)
    assert db.execute("SELECT count(*) FROM archive.ev_05").fetchone() == (10,)  # rows kept, table detached
    assert db.execute("SELECT count(*) FROM pg_inherits WHERE inhrelid = 'archive.ev_05'::regclass").fetchone() == (0,)


def test_detach_with_default_partition_falls_back_to_plain_detach(db: psycopg.Connection[Any], dsn: str) -> None:
    _daily(db, default=True)
    db.execute("CREATE SCHEMA archive")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts', partition_action => 'detach',"
               " detach_schema => 'archive')")
    db.commit()
    [res] = expire(dsn, cutoff=C)
    assert res.status == "ok" and res.partitions_detached == 4
    assert {u.strategy for u in res.units if u.action == "detach"} == {"plain"}
    assert "archive.ev_06" in _tables(db)


def test_interrupted_detach_concurrently_is_finalized(db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    _daily(db, default=False)
    db.execute("CREATE SCHEMA archive")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts', partition_action => 'detach',"
               " detach_schema => 'archive')")
    db.commit()
    reader = connect(autocommit=False)
    reader.execute("SELECT count(*) FROM ev")  # an old snapshot the detach's second phase waits for
    detacher = connect()
    pid = detacher.info.backend_pid
    failure: list[BaseException] = []

    def detach() -> None:
        try:
            detacher.execute("ALTER TABLE ev DETACH PARTITION ev_05 CONCURRENTLY")
        except psycopg.Error as exc:
            failure.append(exc)

    thread = threading.Thread(target=detach)
    thread.start()
    admin = connect()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not admin.execute(
            "SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = 'ev_05'::regclass").fetchone()[0]:
        time.sleep(0.02)
    admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
    thread.join(5)
    reader.rollback()
    assert failure, "the detach should have been cancelled in its second phase"
    [res] = expire(dsn, cutoff=C)
    by_unit = {u.unit: u for u in res.units}
    assert by_unit["ev_05"].action == "detach" and by_unit["ev_05"].strategy == "finalize"
    assert by_unit["ev_05"].status == "ok"
    assert "archive.ev_05" in _tables(db)


@pytest.mark.parametrize("action", ["drop"])
def test_busy_partition_lock_times_out_and_is_retried(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                      action: str) -> None:
    _daily(db, default=False)
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts')")
    db.execute("UPDATE ttl.settings SET value = '100ms' WHERE name = 'lock_timeout'")
    db.commit()
    app = connect(autocommit=False)
    app.execute("SELECT count(*) FROM ev_06")  # holds ACCESS SHARE: DROP must wait, and times out
    [res] = expire(dsn, cutoff=C)
    app.rollback()
    by_unit = {u.unit: u for u in res.units}
    assert by_unit["ev_06"].status == "timeout" and res.status == "partial"
    assert res.partitions_dropped == 3
    [res] = expire(dsn, cutoff=C)
    assert res.partitions_dropped == 1 and "public.ev_06" not in _tables(db)


def test_partitions_nothing_in_which_expired_are_not_visited(db: psycopg.Connection[Any], dsn: str) -> None:
    _daily(db, default=False)
    db.execute("INSERT INTO ev VALUES (1, '2026-03-10 00:00+00')")  # ev_10's first instant
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts')")
    db.commit()
    [res] = expire(dsn, cutoff=C)
    units = {u.unit: u.action for u in res.units}
    # ev_10 [03-10, 03-11): its earliest possible row expires 03-11 00:00, after the cutoff; ev_11 later still
    assert units == {"ev_05": "drop", "ev_06": "drop", "ev_07": "drop", "ev_08": "drop", "ev_09": "delete"}
    recorded = {r[0] for r in db.execute("SELECT unit_name FROM ttl.run_unit").fetchall()}
    db.commit()
    assert recorded == set(units)
    # At exactly that instant ev_10 is visited, and its row at the bound goes.
    [res] = expire(dsn, cutoff=C + timedelta(days=1))
    assert {u.unit for u in res.units} == {"ev_09", "ev_10"}
    assert db.execute("SELECT count(*) FROM ev WHERE id = 1").fetchone() == (0,)


def test_partitions_not_yet_expired_are_visited_for_column_ttls(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE pv (id int, ts timestamptz, note text, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    db.execute("CREATE TABLE pv_a PARTITION OF pv FOR VALUES FROM ('2026-03-01 00:00+00') TO ('2026-03-20 00:00+00')")
    db.execute("INSERT INTO pv VALUES (1, '2026-03-05 00:00+00', 'old note')")
    db.execute("SELECT ttl.enable('pv', expire_after => '30 days', column_name => 'ts')")
    db.execute("SELECT ttl.enable_column('pv', 'note', '1 day', 'row')")
    db.commit()
    [res] = expire(dsn, cutoff=C)  # no row expired, but the note did
    assert [u.unit for u in res.units] == ["pv_a"] and res.values_nulled == 1


def test_months_reach_across_a_lower_bound_off_midnight(db: psycopg.Connection[Any], dsn: str) -> None:
    """Month arithmetic clamps: a row at 03-31 00:00 + 1 month (04-30 00:00) expires before the
    bound 03-30 23:00 + 1 month (04-30 23:00): the partition is visited all the same."""
    db.execute("CREATE TABLE mo (id int, ts timestamptz, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    db.execute("CREATE TABLE mo_a PARTITION OF mo FOR VALUES FROM ('2026-03-30 23:00+00') TO ('2026-04-02 00:00+00')")
    db.execute("INSERT INTO mo VALUES (1, '2026-03-31 00:00+00'), (2, '2026-04-01 12:00+00')")
    db.execute("SELECT ttl.enable('mo', expire_after => '1 mon', column_name => 'ts')")
    db.commit()
    [res] = expire(dsn, cutoff=datetime(2026, 4, 30, 12, 0, tzinfo=UTC))
    assert [(u.unit, u.rows_deleted) for u in res.units] == [("mo_a", 1)]
    assert db.execute("SELECT id FROM mo").fetchall() == [(2,)]


def test_a_bound_out_of_range_for_the_arithmetic_leaves_the_others_judged(
        db: psycopg.Connection[Any], dsn: str) -> None:
    """Every bound of a table is judged by one query: one bound whose expiry is out of
    timestamptz's range (294276-12-31 + 1 day) has none (an upper bound: not dropped; a
    lower bound: visited), and the other bounds are still judged: the expired partitions are
    dropped, the live ones are not visited."""
    db.execute("CREATE TABLE far (id int, ts timestamptz, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    for name, lower, upper in (("far_a", "2026-01-01", "2026-01-02"), ("far_b", "2026-01-02", "2026-01-03"),
                               ("far_live", "2026-06-01", "2026-07-01"), ("far_end", "294200-01-01", "294276-12-31")):
        db.execute(f"CREATE TABLE {name} PARTITION OF far FOR VALUES FROM ('{lower} 00:00+00') TO ('{upper} 00:00+00')")
    db.execute("INSERT INTO far VALUES (1, '2026-01-01 12:00+00'), (2, '2026-01-02 12:00+00'), "
               "(3, '2026-06-02 00:00+00'), (4, '294201-01-01 00:00+00')")
    db.execute("SELECT ttl.enable('far', expire_after => '1 day', column_name => 'ts')")
    db.commit()
    with pytest.raises(psycopg.errors.DatetimeFieldOverflow):  # the arithmetic, as the bound's judge meets it
        db.execute("SELECT timestamptz '294276-12-31 00:00+00' + interval '1 day'")
    db.rollback()
    cutoff = C
    judged = dict(db.execute("SELECT b.bound, b.expired FROM ttl.bounds_expired('far'::regclass, %s, ARRAY["
                             "'2026-01-02 00:00:00+00', '294276-12-31 00:00:00+00', '2026-01-03 00:00:00+00']) b",
                             (cutoff,)).fetchall())
    unexpired = dict(db.execute("SELECT b.bound, b.unexpired FROM ttl.bounds_unexpired('far'::regclass, %s, "
                                "ARRAY['2026-06-01 00:00:00+00', '294276-12-31 00:00:00+00', "
                                "'2026-01-01 00:00:00+00']) b", (cutoff,)).fetchall())
    db.commit()
    assert unexpired == {"2026-06-01 00:00:00+00": True, "294276-12-31 00:00:00+00": False,
                         "2026-01-01 00:00:00+00": False}
    assert judged == {"2026-01-02 00:00:00+00": True, "294276-12-31 00:00:00+00": False,
                      "2026-01-03 00:00:00+00": True}
    [res] = expire(dsn, cutoff=cutoff)
    assert res.status == "ok", res
    by_unit = {u.unit: u.action for u in res.units}
    assert by_unit == {"far_a": "drop", "far_b": "drop"}, by_unit  # far_end's lower bound: nothing expired
    assert _tables(db) == {"public.far", "public.far_live", "public.far_end"}
    assert db.execute("SELECT id FROM far ORDER BY id").fetchall() == [(3,), (4,)]


def test_expired_partitions_go_in_batches_and_one_another_run_holds_is_left(
        db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    """40 expired daily partitions: dropped by DROP TABLE statements of at most DROP_BATCH
    partitions (each claimed and recorded on its own), except the one another session holds
    claimed, which is recorded as skipped and stays."""
    from pg_ttl.expire.partitions import DROP_BATCH

    db.execute("CREATE TABLE many (id int, ts timestamptz, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    for d in range(41):
        db.execute(f"CREATE TABLE many_{d:02d} PARTITION OF many FOR VALUES FROM "
                   f"(timestamptz '2026-01-01 00:00+00' + interval '{d} days') TO "
                   f"(timestamptz '2026-01-01 00:00+00' + interval '{d + 1} days')")
    db.execute("INSERT INTO many SELECT d * 10 + g, timestamptz '2026-01-01 12:00+00' + d * interval '1 day'"
               " FROM generate_series(0, 40) d, generate_series(1, 3) g")
    db.execute("SELECT ttl.enable('many', expire_after => '1 day', column_name => 'ts')")
    db.execute("CREATE TABLE drops (n int)")
    db.execute("CREATE FUNCTION count_drops() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN"
               " INSERT INTO drops SELECT count(*) FROM pg_event_trigger_dropped_objects()"
               "  WHERE object_type = 'table'; END $$")
    db.execute("CREATE EVENT TRIGGER count_drops ON sql_drop WHEN TAG IN ('DROP TABLE') EXECUTE FUNCTION count_drops()")
    db.commit()
    other = connect()  # another run's claim on many_07
    other.execute("SELECT pg_advisory_lock(ttl._claim_key('many_07'::regclass::oid))")
    cutoff = datetime(2026, 2, 11, tzinfo=UTC)  # many_00 .. many_39 expired whole, many_40 not
    [res] = expire(dsn, ["many"], cutoff=cutoff)
    units = {u.unit: u for u in res.units}
    assert res.partitions_dropped == 39
    assert units["many_07"].action == "skip" and "busy" in (units["many_07"].error or "")
    left = {r[0] for r in db.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                                     " WHERE i.inhparent = 'many'::regclass").fetchall()}
    assert left == {"many_07", "many_40"}
    sizes = [r[0] for r in db.execute("SELECT n FROM drops").fetchall()]
    assert sum(sizes) == 39 and max(sizes) <= DROP_BATCH and len(sizes) < 39, sizes
    recorded = {r[0]: (r[1], r[2]) for r in db.execute(
        "SELECT u.unit_name, u.action, u.status FROM ttl.run_unit u WHERE u.run_id = %s", (res.run_id,)).fetchall()}
    assert recorded["many_07"] == ("skip", "skipped")
    assert sum(r == ("drop", "ok") for r in recorded.values()) == 39
    db.commit()
    other.execute("SELECT pg_advisory_unlock(ttl._claim_key('many_07'::regclass::oid))")
    [res] = expire(dsn, ["many"], cutoff=cutoff)
    assert res.partitions_dropped == 1
