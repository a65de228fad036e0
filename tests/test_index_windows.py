"""Row expiry over a btree on the TTL column: key windows (rows.py, ranges.py).

Each window is [k1, k2) with k2 read as the key a step of expired rows on; its DELETE
re-checks the expiry. These tests hold the engine to what that promises: where a
stopped run's next run starts, how large a window is (by time, capped; under a rate
limit at delete_batch_size), and that a key with more rows than a window holds is
deleted in ctid windows (delete_batch_size rows at most while paced), with the windows
going on past it.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from helpers import StopAfter
from psycopg.types.json import Jsonb

from pg_ttl.expire import expire, ranges
from pg_ttl.expire.context import NullProgress
from tests.helpers import call_killed_after


class Sizes(NullProgress):
    def __init__(self) -> None:
        self.deleted: list[int] = []

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        self.deleted.append(deleted)


def _table(db: psycopg.Connection[Any], expired: int, sbs: int = 300, dbs: int = 70, rate: int = 0) -> None:
    """``expired`` rows one second apart in 2020, 100 live ones; key windows forced."""
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON w (v)")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-01' + g * interval '1 s', 'x' "
               "FROM generate_series(1, %s::int) g", (expired,))
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(%s::int, %s::int) g",
               (expired + 1, expired + 100))
    db.execute("ANALYZE w")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => %s,"
               " delete_batch_size => %s, delete_rate_limit => %s)", (sbs, dbs, rate))
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()


def _window_starts(monkeypatch: pytest.MonkeyPatch) -> list[ranges.WindowStart]:
    """Where each window the engine reads from now on starts, in order."""
    starts: list[ranges.WindowStart] = []
    original = ranges.window_end

    def recording(ctx: Any, start: ranges.WindowStart, step: int) -> str | None:
        starts.append(start)
        return original(ctx, start, step)

    monkeypatch.setattr(ranges, "window_end", recording)
    return starts


def test_a_stopped_run_resumes_at_the_window_its_checkpoint_ends(
        db: psycopg.Connection[Any], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _table(db, 3000)
    stop = threading.Event()
    [res] = expire(dsn, stop=stop, progress=StopAfter(stop, 3))
    assert res.status == "partial" and 0 < res.rows_deleted < 3000
    [cp] = db.execute("SELECT checkpoint FROM ttl.run_unit").fetchone()
    assert cp["strategy"] == "index" and cp["from"] is not None
    # every expired row below the checkpoint's key went; every one from it on is there
    below, above = db.execute("SELECT count(*) FILTER (WHERE v < %(k)s), count(*) FILTER (WHERE v >= %(k)s)"
                              " FROM w WHERE v < '2999-01-01'", {"k": cp["from"]}).fetchone()
    assert (below, above) == (0, 3000 - res.rows_deleted)
    db.commit()
    starts = _window_starts(monkeypatch)
    first = res.rows_deleted
    [res] = expire(dsn)
    # the next run's first window begins at the checkpoint's key, inclusive
    assert (starts[0].key, starts[0].inclusive) == (cp["from"], True)
    assert res.status == "ok" and res.rows_deleted == 3000 - first
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def test_windows_grow_by_time_at_most_fourfold(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 3000)
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 3000 and sum(sizes.deleted) == 3000
    # the first window: delete_batch_size rows; then larger (a 70-row DELETE takes far less
    # than 50 ms), each at most four times the last; select_batch_size (300) does not cap them
    assert sizes.deleted == [70, 280, 1120, 1530]


def test_windows_after_the_second_are_guessed_not_read(db: psycopg.Connection[Any], dsn: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a window's end costs an index entry a row: only the first two are read; the
    others' ends are guessed from the last window's keys (one second a row here, so the
    guesses hold exactly the rows a read would)."""
    _table(db, 3000)
    starts = _window_starts(monkeypatch)
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 3000
    assert sizes.deleted == [70, 280, 1120, 1530]
    assert len(starts) == 2 and starts[0].key is None
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def _burst(db: psycopg.Connection[Any]) -> None:
    """Table w: 1,000 expired rows one second apart, then 3,000 expired rows within one
    second whose DELETE takes 0.2 ms a row (a trigger; it counts the deletes it sees in a
    sequence, which a rollback does not take back), 100 live; a btree on v."""
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON w (v)")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-01' + g * interval '1 s', 'x' "
               "FROM generate_series(1, 1000) g")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-01' + interval '1001 s' + g * interval '100 us', 'burst' "
               "FROM generate_series(1001, 4000) g")
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(4001, 4100) g")
    db.execute("ANALYZE w")
    db.execute("CREATE SEQUENCE burst_deletes")
    db.execute("CREATE FUNCTION slow_burst() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
               " IF OLD.pad = 'burst' THEN PERFORM nextval('burst_deletes'), pg_sleep(0.0002); END IF;"
               " RETURN OLD; END $$")
    db.execute("CREATE TRIGGER slow_burst BEFORE DELETE ON w FOR EACH ROW EXECUTE FUNCTION slow_burst()")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', delete_batch_size => 70)")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()


def test_a_guessed_window_over_denser_keys_is_rolled_back_and_read(db: psycopg.Connection[Any], dsn: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The third window's end, guessed from 280 rows a second, takes in the burst: its DELETE
    runs past four times the 50 ms it should take and is rolled back (some burst rows were
    deleted twice, by the sequence); the windows are read from where it began, and every
    expired row goes once, counted once."""
    _burst(db)
    starts = _window_starts(monkeypatch)
    sizes = Sizes()
    started = time.monotonic()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 4000 and sum(sizes.deleted) == 4000
    assert time.monotonic() - started < 30
    [(seen,)] = db.execute("SELECT last_value FROM burst_deletes").fetchall()
    assert seen > 3000  # a window that had deleted some burst rows was rolled back
    third = db.execute("SELECT CAST(v AS text) FROM (VALUES (timestamptz '2020-01-01' + interval '351 s')) s(v)"
                       ).fetchone()[0]
    assert [s.key for s in starts[:3]] == [None, starts[1].key, third] and len(starts) > 3
    assert max(sizes.deleted) < 3650  # the window of rows 351 to 4000 never committed
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)
    assert db.execute("SELECT rows_deleted, status FROM ttl.run_unit").fetchall() == [(4000, "ok")]


def test_a_guessed_window_never_outlasts_the_sessions_statement_timeout(db: psycopg.Connection[Any],
                                                                        dsn: str) -> None:
    """With statement_timeout (100 ms) below the time a guessed window is allowed (200 ms at
    least), the guess does not lengthen it: the window that meets it is a timeout, as any
    statement's is."""
    _burst(db)
    db.execute("UPDATE ttl.settings SET value = '100ms' WHERE name = 'statement_timeout'")
    db.commit()
    [res] = expire(dsn)
    [unit] = res.units
    assert (unit.status, unit.error) == ("timeout", "statement_timeout (100ms) reached")
    assert res.status == "partial" and res.rows_deleted == 350  # the two windows read before it


def test_windows_whose_delete_is_slow_stay_small(db: psycopg.Connection[Any], dsn: str) -> None:
    """A window is sized toward 50 ms from what the last one took: 70 rows that take 70 ms
    (a trigger sleeps 1 ms a row) keep the next ones at delete_batch_size."""
    _table(db, 700)
    db.execute("CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS "
               "$$ BEGIN PERFORM pg_sleep(0.001); RETURN OLD; END $$")
    db.execute("CREATE TRIGGER slow BEFORE DELETE ON w FOR EACH ROW EXECUTE FUNCTION slow()")
    db.commit()
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 700
    assert sizes.deleted == [70] * 10


def test_under_a_rate_limit_windows_stay_at_delete_batch_size(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 1000, rate=20_000)
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 1000
    assert max(sizes.deleted) <= 70 and len(sizes.deleted) >= 1000 / 70


def _log_deletes(db: psycopg.Connection[Any]) -> None:
    """Table deletes: what each DELETE statement on w took, its rows and their keys, in order
    (a statement trigger with a transition table)."""
    db.execute("CREATE TABLE deletes (n bigint, lo timestamptz, hi timestamptz,"
               " at timestamptz DEFAULT clock_timestamp())")
    db.execute("CREATE FUNCTION log_deletes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
               " INSERT INTO deletes (n, lo, hi) SELECT count(*), min(v), max(v) FROM gone HAVING count(*) > 0;"
               " RETURN NULL; END $$")
    db.execute("CREATE TRIGGER log_deletes AFTER DELETE ON w REFERENCING OLD TABLE AS gone"
               " FOR EACH STATEMENT EXECUTE FUNCTION log_deletes()")


def _tied(db: psycopg.Connection[Any]) -> None:
    """Table w: 50 keys of one row, 500 rows of one key (2020-01-02), 50 keys of one row
    (all expired), 100 live; a btree on v."""
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON w (v)")
    # 50 keys of one row, 500 rows of one key, 50 keys of one row (all expired), 100 live
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-01' + g * interval '1 s', 'x' "
               "FROM generate_series(1, 50) g")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-02', 'x' FROM generate_series(51, 550) g")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-03' + g * interval '1 s', 'x' "
               "FROM generate_series(551, 600) g")
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(601, 700) g")
    db.execute("ANALYZE w")


def test_a_key_with_more_rows_than_a_window_goes_in_ctid_windows_and_the_windows_go_on(
        db: psycopg.Connection[Any], dsn: str) -> None:
    _tied(db)
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => 200,"
               " delete_batch_size => 40, delete_rate_limit => 1000000)")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 600
    assert max(sizes.deleted) <= 40  # paced: windows and the key's ctid windows alike
    assert db.execute("SELECT count(*), min(v) FROM w").fetchone()[0] == 100


def test_a_keys_ctid_windows_pass_a_row_the_application_holds(db: psycopg.Connection[Any], dsn: str,
                                                              connect: Any) -> None:
    """The key's ctid windows (the database's statements, ttl.key_window_sql) meet a row an
    application holds: its window is redone in the SKIP LOCKED form, never waiting past
    row_lock_timeout; that row stays for the next run, every other expired row goes."""
    _tied(db)
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => 200,"
               " delete_batch_size => 40, delete_rate_limit => 1000000)")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()
    app = connect(autocommit=False)
    app.execute("SELECT 1 FROM w WHERE id = 300 FOR UPDATE")  # inside the key of 500 rows
    started = time.monotonic()
    [res] = expire(dsn)
    assert time.monotonic() - started < 5
    app.rollback()
    assert (res.status, res.rows_deleted) == ("ok", 599), res
    assert db.execute("SELECT array_agg(id) FROM w WHERE v < '2999-01-01'").fetchone() == ([300],)
    [res] = expire(dsn)  # the next run: the row is free now
    assert res.rows_deleted == 1
    assert db.execute("SELECT count(*) FROM w WHERE v < '2999-01-01'").fetchone() == (0,)


# -- CALL ttl.run(): the same choice (ttl.row_strategy) and key windows (ttl.window_sql) --

def _sliced(db: psycopg.Connection[Any], name: str, share: float) -> None:
    """20,000 rows one minute apart in insertion order, a btree on v; ``share`` of them
    expired at the fixed cutoff 2020-01-02 + share * 20,000 minutes."""
    db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute(f"CREATE INDEX ON {name} (v)")
    db.execute(f"INSERT INTO {name} SELECT g, timestamptz '2020-01-01' + g * interval '1 minute', 'x' "
               "FROM generate_series(1, 20000) g")
    db.execute(f"VACUUM ANALYZE {name}")
    db.execute("SELECT ttl.enable(%s, expire_after => '1 day', column_name => 'v', delete_batch_size => 100)",
               (name,))


@pytest.mark.parametrize("share", [0.01, 0.5, 0.8])
def test_call_run_chooses_as_the_engine_does_and_deletes_in_key_windows(
        db: psycopg.Connection[Any], dsn: str, connect: Any, share: float) -> None:
    db.autocommit = True
    _sliced(db, "py", share)
    _sliced(db, "sq", share)
    cutoff = datetime(2020, 1, 2, tzinfo=UTC) + timedelta(minutes=int(20000 * share))
    [res] = expire(dsn, ["py"], cutoff=cutoff)
    connect().execute("CALL ttl.run('sq', %s)", (cutoff,))
    [(strategy, deleted, status, cp)] = db.execute(
        "SELECT u.strategy, u.rows_deleted, u.status, u.checkpoint FROM ttl.run_unit u"
        " JOIN ttl.run r USING (run_id) WHERE r.worker = 'ttl.run()'").fetchall()
    assert strategy == res.units[0].strategy == ("index" if share < 0.6 else "ctid")
    assert (deleted, status, cp) == (int(20000 * share), "ok", None)
    assert db.execute("SELECT min(id), count(*) FROM sq").fetchone() == (int(20000 * share) + 1,
                                                                        20000 - int(20000 * share))


def test_call_run_killed_mid_unit_is_resumed_by_the_engine_at_its_window(
        db: psycopg.Connection[Any], dsn: str, connect: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CALL killed between two key windows leaves the checkpoint pg-ttl run resumes from
    (the same format): its first window starts at that key, and it deletes the rest."""
    _table(db, 3000, dbs=50, rate=500)  # windows of 50 rows, 500 rows/s: about 6 s in all
    call_killed_after(db, connect(), "CALL ttl.run('w')", 500)
    [(first, cp)] = db.execute("SELECT rows_deleted, checkpoint FROM ttl.run_unit").fetchall()
    assert cp["strategy"] == "index" and cp["from"] is not None and 500 <= first < 3000
    # every expired row below the key went, none from it on
    assert db.execute("SELECT count(*) FILTER (WHERE v < %(k)s), count(*) FILTER (WHERE v >= %(k)s)"
                      " FROM w WHERE v < '2999-01-01'", {"k": cp["from"]}).fetchone() == (0, 3000 - first)
    db.execute("SELECT ttl.set_options('w', '{\"delete_rate_limit\": \"0\"}')")
    db.commit()
    starts = _window_starts(monkeypatch)
    [res] = expire(dsn)
    assert (starts[0].key, starts[0].inclusive) == (cp["from"], True)
    assert res.status == "ok" and res.rows_deleted == 3000 - first and res.units[0].strategy == "index"
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def test_call_run_killed_in_a_keys_ctid_windows_is_resumed_by_the_engine_after_its_row(
        db: psycopg.Connection[Any], dsn: str, connect: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CALL killed between two ctid windows of a key with more rows than a window leaves
    the checkpoint pg-ttl run resumes from (the key and the last window's ctid): its first
    ctid window starts after that ctid, and it deletes the rest."""
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON w (v)")
    db.execute("INSERT INTO w SELECT g, '2020-01-02', 'x' FROM generate_series(1, 3000) g")
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(3001, 3100) g")
    db.execute("ANALYZE w")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', delete_batch_size => 50,"
               " delete_rate_limit => 500)")  # windows of 50 slots, 500 rows/s: about 6 s in all
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()
    call_killed_after(db, connect(), "CALL ttl.run('w')", 500)
    [(first, cp)] = db.execute("SELECT rows_deleted, checkpoint FROM ttl.run_unit").fetchall()
    assert cp["strategy"] == "index" and cp["key"].startswith("2020-01-02") and 500 <= first < 3000
    # every row of the key up to the checkpoint's ctid went, none after it
    assert db.execute("SELECT count(*) FILTER (WHERE ctid <= %(c)s::tid), count(*) FILTER (WHERE ctid > %(c)s::tid)"
                      " FROM w WHERE v < '2999-01-01'", {"c": cp["ctid"]}).fetchone() == (0, 3000 - first)
    db.execute("SELECT ttl.set_options('w', '{\"delete_rate_limit\": \"0\"}')")
    db.commit()
    starts: list[str] = []
    original = ranges._tie_batches

    def recording(ctx: Any, key: str, start: str, *rest: Any) -> Any:
        starts.append(start)
        return original(ctx, key, start, *rest)

    monkeypatch.setattr(ranges, "_tie_batches", recording)
    [res] = expire(dsn)
    assert starts == [cp["ctid"]]
    assert res.status == "ok" and res.rows_deleted == 3000 - first and res.units[0].strategy == "index"
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def test_call_run_resumes_its_own_windows_at_the_checkpoint(db: psycopg.Connection[Any], connect: Any) -> None:
    _table(db, 1000, dbs=50)
    db.autocommit = True
    # as a killed run leaves it: the unit's checkpoint at key 500 (rows below it gone)
    key = db.execute("SELECT CAST(v AS text) FROM w WHERE id = 500").fetchone()[0]
    db.execute("DELETE FROM w WHERE id < 500")
    run = db.execute("INSERT INTO ttl.run (relid, table_name, worker, cutoff, status) VALUES"
                     " ('w'::regclass, 'w', 'ttl.run()', now(), 'interrupted') RETURNING run_id").fetchone()[0]
    db.execute("INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, strategy, status, checkpoint)"
               " VALUES (%s, 'w'::regclass, 'w', 'delete', 'index', 'interrupted', %s)",
               (run, Jsonb({"strategy": "index", "from": key})))
    connect().execute("CALL ttl.run('w')")
    [(resumed, deleted, status)] = db.execute(
        "SELECT resumed_from, rows_deleted, status FROM ttl.run_unit WHERE run_id > %s", (run,)).fetchall()
    assert resumed == {"strategy": "index", "from": key} and (deleted, status) == (501, "ok")
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def test_call_run_deletes_a_key_of_a_window_or_more_in_ctid_windows_and_goes_on(
        db: psycopg.Connection[Any], connect: Any) -> None:
    _tied(db)
    # paced: windows of delete_batch_size rows, so the key of 500 rows fills one
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => 200,"
               " delete_batch_size => 40, delete_rate_limit => 1000000)")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    _log_deletes(db)
    db.commit()
    connect().execute("CALL ttl.run('w')")
    assert db.execute("SELECT strategy, status, rows_deleted, checkpoint FROM ttl.run_unit").fetchall() == [
        ("index", "ok", 600, None)]
    log = db.execute("SELECT n, lo, hi FROM deletes ORDER BY at").fetchall()
    key = datetime(2020, 1, 2, tzinfo=UTC)
    # key windows of 40 rows up to the key of 500 rows, its rows in ctid windows of at most
    # 40 (paced: 40 tuple slots each), then key windows over the keys after it
    assert [n for n, _, _ in log[:2]] == [40, 10] and all(hi < key for _, _, hi in log[:2])
    tie = [n for n, lo, hi in log if lo == hi == key]
    assert sum(tie) == 500 and max(tie) <= 40 and log[2][1] == key
    after = log[2 + len(tie):]
    assert sum(n for n, _, _ in after) == 50 and all(lo > key for _, lo, _ in after) and max(after)[0] <= 40
    assert db.execute("SELECT count(*) FROM w WHERE v < '2999-01-01'").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def test_call_run_windows_pass_a_row_the_application_holds(db: psycopg.Connection[Any], connect: Any) -> None:
    _table(db, 1000, dbs=50)
    app = connect(autocommit=False)
    app.execute("SELECT 1 FROM w WHERE id = 321 FOR UPDATE")
    started = time.monotonic()
    connect().execute("CALL ttl.run('w')")
    assert time.monotonic() - started < 5  # never waited on the row beyond row_lock_timeout
    app.rollback()
    assert db.execute("SELECT strategy, status, rows_deleted FROM ttl.run_unit").fetchall() == [("index", "ok", 999)]
    assert db.execute("SELECT array_agg(id) FROM w WHERE v < '2999-01-01'").fetchone() == ([321],)


@pytest.mark.parametrize(("typ", "values", "unit"), [
    ("date", "date '2000-01-01' + g", None),
    ("timestamp", "timestamp '2000-01-01' + g * interval '1 min'", None),
    ("int8", "946684800 + g * 60", "seconds"),
    ("int4", "946684800 + g * 60", "seconds"),
    ("numeric", "946684800.5 + g * 60", "seconds"),
])
def test_guessed_windows_over_each_kind_of_ttl_column(db: psycopg.Connection[Any], dsn: str,
                                                      monkeypatch: pytest.MonkeyPatch, typ: str, values: str,
                                                      unit: str | None) -> None:
    """Dates, timestamps and numbers (epoch seconds) alike: windows guessed past the second,
    every expired row gone once, the live ones kept."""
    db.execute(f"CREATE TABLE w (id int PRIMARY KEY, v {typ} NOT NULL)")
    db.execute("CREATE INDEX ON w (v)")
    db.execute(f"INSERT INTO w SELECT g, {values} FROM generate_series(1, 3000) g")
    live = "date '2999-01-01'" if typ == "date" else "timestamp '2999-01-01'" if typ == "timestamp" else "32503680000"
    if typ == "int4":
        live = "2147483000"
    db.execute(f"INSERT INTO w SELECT g, {live} FROM generate_series(3001, 3100) g")
    db.execute("ANALYZE w")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', delete_batch_size => 70,"
               " unit => %s)", (unit,))
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()
    starts = _window_starts(monkeypatch)
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 3000 and sum(sizes.deleted) == 3000
    assert len(starts) == 2 and len(sizes.deleted) > 2
    assert db.execute("SELECT count(*), min(id) FROM w").fetchone() == (100, 3001)


def test_window_guess_gives_no_key_it_cannot_reach(db: psycopg.Connection[Any]) -> None:
    """NULL (read the end instead) when the guess is out of the type's range or no later
    than the window's first key; otherwise the first key plus the factor times the span."""
    def guess(expr: str) -> Any:
        return db.execute(f"SELECT ttl.window_guess({expr})").fetchone()[0]

    assert guess("5::int4, 1, 3, 2.5") == 10
    assert guess("5::int8, 1::int8, 3::int8, 0.001") == 6  # at least one past the first key
    assert guess("date '2020-01-01', date '2019-12-01', date '2019-12-02', 0.1") == datetime(2020, 1, 2).date()
    assert guess("2147483600::int4, 1, 3000, 100") is None
    assert guess("timestamptz '294270-01-01', timestamptz '2000-01-01', timestamptz '2100-01-01', 100") is None
    assert guess("timestamptz '2020-01-01', timestamptz '2020-01-01', timestamptz '2020-01-01', 100") is None
    assert guess("timestamptz 'infinity', timestamptz '2000-01-01', timestamptz '2000-01-02', 1") is None
    assert guess("timestamptz '2020-01-01', timestamptz '-infinity', timestamptz '2000-01-02', 1") is None


def test_call_run_and_the_engine_size_their_windows_by_one_rule(db: psycopg.Connection[Any], dsn: str,
                                                               connect: Any) -> None:
    """ttl.window_rows decides both: the same table gives the same windows, whether
    deleted by CALL ttl.run() (each DELETE's rows logged by a statement trigger) or by
    the engine (its progress)."""
    _table(db, 3000)
    _log_deletes(db)
    db.execute("CREATE TABLE w_copy AS SELECT * FROM w")
    db.commit()
    connect().execute("CALL ttl.run('w')")
    by_call = [n for (n,) in db.execute("SELECT n FROM deletes ORDER BY at").fetchall()]
    db.execute("INSERT INTO w SELECT * FROM w_copy WHERE v < '2999-01-01'")
    db.commit()
    sizes = Sizes()
    [res] = expire(dsn, progress=sizes)
    assert res.status == "ok" and res.rows_deleted == 3000
    assert by_call == sizes.deleted == [70, 280, 1120, 1530]


@pytest.mark.parametrize(("typ", "key", "unit"), [
    ("date", "date '2000-01-02'", None),
    ("timestamp", "timestamp '2000-01-02 10:00'", None),
    ("int8", "946684800", "seconds"),
    ("numeric", "946684800.5", "seconds"),
])
@pytest.mark.parametrize("runner", ["engine", "CALL ttl.run()"])
def test_a_key_of_many_rows_over_each_kind_of_ttl_column(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                        typ: str, key: str, unit: str | None, runner: str) -> None:
    """Dates, timestamps and numbers alike: 2,000 rows of one key between keys of one row go
    in the key's ctid windows, by pg-ttl run and CALL ttl.run() alike; every expired row
    gone, the live ones kept."""
    db.execute(f"CREATE TABLE w (id int PRIMARY KEY, v {typ} NOT NULL)")
    db.execute("CREATE INDEX ON w (v)")
    step = "g" if typ == "date" else "g * interval '1 s'" if typ == "timestamp" else "g"
    db.execute(f"INSERT INTO w SELECT g, {key} - {step} FROM generate_series(1, 100) g")
    db.execute(f"INSERT INTO w SELECT g, {key} FROM generate_series(101, 2100) g")
    db.execute(f"INSERT INTO w SELECT g, {key} + {step} FROM generate_series(2101, 2200) g")
    live = "date '2999-01-01'" if typ == "date" else "timestamp '2999-01-01'" if typ == "timestamp" else "32503680000"
    db.execute(f"INSERT INTO w SELECT g, {live} FROM generate_series(2201, 2300) g")
    db.execute("ANALYZE w")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', delete_batch_size => 50,"
               " delete_rate_limit => 1000000, unit => %s)", (unit,))
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    # each DELETE's rows, and whether they all had the key
    db.execute("CREATE TABLE deletes (n bigint, of_key boolean)")
    db.execute(f"CREATE FUNCTION log_deletes() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
               f" INSERT INTO deletes SELECT count(*), bool_and(v = {key}) FROM gone HAVING count(*) > 0;"
               " RETURN NULL; END $$")
    db.execute("CREATE TRIGGER log_deletes AFTER DELETE ON w REFERENCING OLD TABLE AS gone"
               " FOR EACH STATEMENT EXECUTE FUNCTION log_deletes()")
    db.commit()
    if runner == "engine":
        [res] = expire(dsn)
        assert (res.status, res.rows_deleted) == ("ok", 2200)
    else:
        connect().execute("CALL ttl.run('w')")
        assert db.execute("SELECT status, rows_deleted FROM ttl.run_unit").fetchall() == [("ok", 2200)]
    # (paced: the key's windows hold at most delete_batch_size rows, all of that one key)
    [(statements, largest, rows)] = db.execute("SELECT count(*), max(n), sum(n) FROM deletes WHERE of_key").fetchall()
    assert rows == 2000
    assert statements >= 2000 // 50 and largest <= 50
    assert db.execute("SELECT count(*), min(id) FROM w").fetchone() == (100, 2201)

