"""Partition retention under what the application and crashes do meanwhile: a partition is
removed only while it is the one judged, still where it was judged, with the bound it was judged
by; a detach cut short is finished, one the application began is left to it; one partition
that cannot be judged in time does not stop the table."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire, partitions
from pg_ttl.expire.context import NullProgress
from tests.conftest import dsn_of
from tests.test_tiers_partitions import _exactly_once, _ids, _pev

C = datetime(2026, 3, 10, 0, 0, tzinfo=UTC)  # the run's cutoff in these tests


def _daily(db: psycopg.Connection[Any], action: str = "drop") -> None:
    """ev partitioned by day, 2026-03-05 .. 03-11, 10 rows per day at 12:00 (1-day TTL: at C,
    ev_05 .. ev_08 are expired whole, ev_09 .. ev_11 hold live rows)."""
    db.execute("CREATE TABLE ev (id int, ts timestamptz, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    for d in range(5, 12):
        db.execute(f"CREATE TABLE ev_{d:02d} PARTITION OF ev FOR VALUES FROM ('2026-03-{d:02d} 00:00+00')"
                   f" TO ('2026-03-{d + 1:02d} 00:00+00')")
    db.execute("""INSERT INTO ev SELECT d * 100 + g, timestamptz '2026-03-01 12:00+00' + d * interval '1 day'
                    FROM generate_series(4, 10) d, generate_series(1, 10) g""")
    db.execute("CREATE SCHEMA archive")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts', partition_action => %s,"
               " detach_schema => 'archive')", (action,))
    db.commit()


class BeforeUnit(NullProgress):
    """Runs ``action`` (in the application's own session) once, as the unit ``unit`` starts:
    after the pass listed and judged it, before it is removed."""

    def __init__(self, unit: str, action: Any) -> None:
        self.unit, self.action, self.done = unit, action, False

    def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
        if unit == self.unit and not self.done:
            self.done = True
            self.action()


def _app(db: psycopg.Connection[Any], *statements: str) -> Any:
    def run() -> None:
        with psycopg.connect(dsn_of(db), autocommit=True) as app:
            for s in statements:
                app.execute(s)  # type: ignore[arg-type]  # the tests' own constants
    return run


def _live_rows(db: psycopg.Connection[Any]) -> int:
    db.rollback()
    row = db.execute("SELECT count(*) FROM ev WHERE ts >= '2026-03-09'").fetchone()
    return int(row[0]) if row else -1


def test_a_partition_renamed_after_it_was_judged_is_not_confused_with_its_old_name(
        db: psycopg.Connection[Any]) -> None:
    _daily(db)
    # At this cutoff only ev_05 is expired. Once the pass judged it, the application renames
    # it and gives its name to ev_10, a partition of live rows.
    app = _app(db, "ALTER TABLE ev_05 RENAME TO ev_05_old", "ALTER TABLE ev_10 RENAME TO ev_05")
    [res] = expire(dsn_of(db), ["ev"], cutoff=datetime(2026, 3, 7, tzinfo=UTC), progress=BeforeUnit("ev_05", app))
    assert res.status == "ok", res
    assert _live_rows(db) == 30  # ev_10's rows, now under the name ev_05, all kept
    assert db.execute("SELECT to_regclass('ev_05_old') IS NULL").fetchone() == (True,)  # the one judged went


def test_a_partition_the_application_moved_to_another_table_is_not_dropped(db: psycopg.Connection[Any]) -> None:
    _daily(db)
    # ev_00, the default partition, is done first (row by row); meanwhile the application
    # moves ev_06 (judged expired with ev_05 .. ev_08) to a table of its own, without TTL.
    db.execute("CREATE TABLE ev_00 PARTITION OF ev DEFAULT")
    db.execute("INSERT INTO ev VALUES (1, '2020-01-01')")
    db.execute("CREATE TABLE keep (id int, ts timestamptz, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    db.commit()
    app = _app(db, "ALTER TABLE ev DETACH PARTITION ev_06",
               "ALTER TABLE keep ATTACH PARTITION ev_06 FOR VALUES FROM ('2026-03-06') TO ('2026-03-07')")
    [res] = expire(dsn_of(db), ["ev"], cutoff=C, progress=BeforeUnit("ev_00", app))
    [kept] = [u for u in res.units if u.unit == "ev_06"]
    assert kept.status == "skipped" and "attached elsewhere" in (kept.error or ""), kept
    assert db.execute("SELECT count(*) FROM keep").fetchone() == (10,)
    assert db.execute("SELECT count(*) FROM ev").fetchone() == (30,)  # ev_05, ev_07, ev_08 went


def test_detach_concurrently_detaches_the_partition_judged_not_the_one_now_under_its_name(
        db: psycopg.Connection[Any]) -> None:
    _daily(db, action="detach")
    app = _app(db, "ALTER TABLE ev_05 RENAME TO ev_05_old", "ALTER TABLE ev_10 RENAME TO ev_05")
    [res] = expire(dsn_of(db), ["ev"], cutoff=datetime(2026, 3, 7, tzinfo=UTC), progress=BeforeUnit("ev_05", app))
    assert res.status == "ok", res
    assert [u.strategy for u in res.units if u.action == "detach"] == ["concurrently"]
    assert _live_rows(db) == 30  # ev_10's rows, now under the name ev_05, still in ev
    assert db.execute("SELECT count(*) FROM archive.ev_05_old").fetchone() == (10,)  # the one judged, detached


def test_a_partition_exported_whole_is_dropped_only_under_the_name_it_has(db: psycopg.Connection[Any],
                                                                          tmp_path: Path) -> None:
    _pev(db, tmp_path)
    # pev_old goes whole to the tier. As its unit starts, the application renames it and
    # gives its name to pev_new (rows 61-70, none past the tier).
    app = _app(db, "ALTER TABLE pev_old RENAME TO pev_old_x", "ALTER TABLE pev_new RENAME TO pev_old")
    [archived, _deleted] = expire(dsn_of(db), ["pev"], progress=BeforeUnit("pev_old", app))
    [old] = [u for u in archived.units if u.unit == "pev_old"]
    assert (old.action, old.strategy, old.status, old.rows_deleted) == ("archive", "ctid", "ok", 40)
    db.rollback()
    assert _ids(db) == [*range(51, 71), 72]  # 61-70 kept; pev_old_x's rows moved batch by batch
    _exactly_once(db, tmp_path, [*range(1, 51), 71])


def test_rows_of_a_partition_detached_during_the_run_are_not_deleted(db: psycopg.Connection[Any]) -> None:
    _daily(db)
    # At this cutoff ev_09's rows (03-09 12:00) have expired, its bound not: a unit deleting
    # row by row. ev_00, the default partition, is done first; meanwhile the application
    # detaches ev_09 to keep it.
    db.execute("CREATE TABLE ev_00 PARTITION OF ev DEFAULT")
    db.commit()
    app = _app(db, "ALTER TABLE ev DETACH PARTITION ev_09")
    [res] = expire(dsn_of(db), ["ev"], cutoff=datetime(2026, 3, 10, 13, tzinfo=UTC), progress=BeforeUnit("ev_00", app))
    [kept] = [u for u in res.units if u.unit == "ev_09"]
    assert (kept.status, kept.rows_deleted) == ("skipped", 0), kept
    assert "no longer a partition" in (kept.error or "")
    assert db.execute("SELECT count(*) FROM ev_09").fetchone() == (10,)


def test_a_run_killed_between_detaching_and_moving_a_partition_is_finished_by_the_next(
        db: psycopg.Connection[Any], monkeypatch: Any) -> None:
    _daily(db, action="detach")
    real = partitions._timeouts

    def killed(ctx: Any) -> None:  # the transaction after the DETACH ... CONCURRENTLY: its session ends
        with psycopg.connect(dsn_of(db), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (ctx.conn.info.backend_pid,))
        real(ctx)

    monkeypatch.setattr(partitions, "_timeouts", killed)
    cutoff = datetime(2026, 3, 7, tzinfo=UTC)  # ev_05 only
    with pytest.raises(psycopg.OperationalError):
        expire(dsn_of(db), ["ev"], cutoff=cutoff)
    monkeypatch.setattr(partitions, "_timeouts", real)
    db.rollback()
    assert db.execute("SELECT count(*) FROM pg_inherits WHERE inhrelid = 'ev_05'::regclass").fetchone() == (0,)
    [res] = expire(dsn_of(db), ["ev"], cutoff=cutoff)
    assert res.status == "ok", res
    db.rollback()
    # moved where detached partitions go, its rows kept, and its unit recorded as done
    assert db.execute("SELECT count(*) FROM archive.ev_05").fetchone() == (10,)
    assert db.execute("SELECT to_regclass('public.ev_05')").fetchone() == (None,)
    assert res.partitions_detached == 1
    # once finished, it is the application's: moved back, it stays where it put it
    db.execute("ALTER TABLE archive.ev_05 SET SCHEMA public")
    db.commit()
    [res] = expire(dsn_of(db), ["ev"], cutoff=cutoff + timedelta(minutes=1))
    assert res.status == "ok" and res.partitions_detached == 0, res
    assert db.execute("SELECT count(*) FROM public.ev_05").fetchone() == (10,)


def test_a_live_partition_the_application_left_pending_detach_is_not_moved(db: psycopg.Connection[Any]) -> None:
    _daily(db, action="detach")
    # The application detaches ev_10 (live rows) CONCURRENTLY; the command is cancelled while it
    # waits for an older transaction, leaving the partition "detach pending".
    dsn = dsn_of(db)
    with psycopg.connect(dsn) as reader, psycopg.connect(dsn, autocommit=True) as detacher:
        reader.execute("SELECT count(*) FROM ev")  # an old snapshot the detach's second phase waits for
        detacher.execute("SET lock_timeout = '200ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            detacher.execute("ALTER TABLE ev DETACH PARTITION ev_10 CONCURRENTLY")
        reader.rollback()
    assert db.execute("SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = 'ev_10'::regclass").fetchone() \
        == (True,)
    db.rollback()
    [res] = expire(dsn, ["ev"], cutoff=C)
    assert res.partitions_detached == 4, res  # ev_05 .. ev_08
    db.rollback()
    # ev_10 is the application's to finish: not moved where detached partitions go (and are dropped)
    assert db.execute("SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                      " WHERE c.relname = 'ev_10'").fetchone() == ("public",)


def test_a_partition_too_big_to_scan_within_statement_timeout_does_not_stop_the_table(
        db: psycopg.Connection[Any]) -> None:
    """A per-row TTL table's partitions are judged by the writes they received; one with rows from
    before its writes were tracked is scanned once to know them. A scan that outlasts
    statement_timeout leaves that partition to be expired row by row: the others go on."""
    db.autocommit = True
    db.execute("UPDATE ttl.settings SET value = '1 second' WHERE name = 'partition_expiry_step'")
    db.execute("CREATE TABLE ev (day date, id int, v int, PRIMARY KEY (day, id)) PARTITION BY RANGE (day)")
    db.execute("CREATE TABLE ev_1 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2026-01-02')")
    # rows from before tracking began: its one scan (~170 ms here) outlasts a 50 ms statement_timeout
    db.execute("INSERT INTO ev SELECT '2026-01-01', g, g FROM generate_series(1, 2000000) g")  # before tracking
    # the insert's autovacuum and checkpoint would run beside the pass and could stall its small
    # statements past the timeout (a CI run: the table's lookup at the pass's start, 20 ms then)
    db.execute("VACUUM (ANALYZE) ev_1")
    db.execute("CHECKPOINT")
    db.execute("""SELECT ttl.set_options('ev', '{"expire_after": "1 second"}')""")
    db.execute("CREATE TABLE ev_2 PARTITION OF ev FOR VALUES FROM ('2026-01-02') TO ('2026-01-03')")
    db.execute("INSERT INTO ev VALUES ('2026-01-02', 1, 1)")
    time.sleep(2.2)  # 1 s TTL + 1 s rounding step + margin
    db.execute("UPDATE ttl.settings SET value = '50ms' WHERE name = 'statement_timeout'")
    [res] = expire(dsn_of(db), ["ev"])
    assert res.status != "failed", res
    # ev_2, judged by its writes, dropped whole; ev_1 expired row by row (as far as 50ms statements go)
    assert [(u.unit, u.action) for u in res.units] == [("ev_1", "delete"), ("ev_2", "drop")], res.units
    assert db.execute("SELECT to_regclass('ev_2')").fetchone() == (None,)
