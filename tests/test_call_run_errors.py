"""CALL ttl.run() (sql/55_run_procedure.sql) when things go wrong: checkpoints that read
back the same whatever the caller's session settings, an error that fails one unit and not
the CALL, a cancel or the caller's statement_timeout that stops it cleanly, a checkpoint of
a TTL column the policy no longer has; and pg-ttl run's key windows over a descending index."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire
from tests.helpers import call_killed_after
from tests.worker_proc import wait_until


def _keys_in_early_january(db: psycopg.Connection[Any], rate: int) -> None:
    """Table w: 3000 expired rows five minutes apart from 2020-01-02 (every key is in
    2020-01-02 .. 2020-01-12), 100 live ones; a btree on v, key windows of 50 rows."""
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON w (v)")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-02 00:00+00' + g * interval '5 minutes', 'x'"
               " FROM generate_series(1, 3000) g")
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(3001, 3100) g")
    db.execute("ANALYZE w")
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => 300,"
               " delete_batch_size => 50, delete_rate_limit => %s)", (rate,))
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()


def _call_killed_mid_unit(db: psycopg.Connection[Any], connect: Any, datestyle: str) -> dict[str, Any]:
    """CALL ttl.run('w') in a session with ``datestyle``, killed between two key windows
    (as a restart or pg_terminate_backend does); returns the checkpoint it left."""
    caller = connect()
    caller.execute("SELECT set_config('DateStyle', %s, false)", (datestyle,))
    call_killed_after(db, caller, "CALL ttl.run('w')", 200)
    [(cp,)] = db.execute("SELECT checkpoint FROM ttl.run_unit").fetchall()
    db.execute("SELECT ttl.set_options('w', '{\"delete_rate_limit\": \"0\"}')")
    db.commit()
    assert cp["strategy"] == "index" and cp["from"] is not None
    return dict(cp)


def test_a_checkpoint_written_under_another_datestyle_is_read_back_by_the_next_call(
        db: psycopg.Connection[Any], connect: Any) -> None:
    """A key window's end is kept in the checkpoint as text: a CALL from a session with
    DateStyle 'SQL, DMY' (a European database's default) killed mid-unit, then a CALL from
    one with 'ISO, MDY' (pg_cron's, another psql's) resumes where the first stopped (read as
    1 May, '05/01/2020' would start past every expired row and leave them all)."""
    _keys_in_early_january(db, rate=500)
    cp = _call_killed_mid_unit(db, connect, "SQL, DMY")
    left = db.execute("SELECT count(*) FROM w WHERE v < '2999-01-01'").fetchone()[0]
    assert 0 < left < 3000
    resumer = connect()
    resumer.execute("SET DateStyle = 'ISO, MDY'")
    resumer.execute("CALL ttl.run('w')")
    [(status, deleted, resumed)] = db.execute(
        "SELECT status, rows_deleted, resumed_from FROM ttl.run_unit WHERE resumed_from IS NOT NULL").fetchall()
    assert resumed == cp
    assert (status, deleted) == ("ok", left)
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def test_a_checkpoint_written_under_another_datestyle_is_resumed_by_pg_ttl_run(
        db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    """The same checkpoint resumed by pg-ttl run (its session 'ISO, YMD'): not a key it cannot
    read (the unit would fail, keep it and fail again at every run)."""
    _keys_in_early_january(db, rate=500)
    _call_killed_mid_unit(db, connect, "SQL, DMY")
    left = db.execute("SELECT count(*) FROM w WHERE v < '2999-01-01'").fetchone()[0]
    db.commit()
    [res] = expire(dsn, ["w"])
    assert (res.status, res.rows_deleted, res.error) == ("ok", left, None)
    assert db.execute("SELECT count(*) FROM w").fetchone() == (100,)


def _one_key_of_many_rows(db: psycopg.Connection[Any], index: str) -> None:
    """Table w: 50 keys of one row, 5,000 rows of one key (2020-01-02: a bulk load in one
    transaction, whose now() they all got), 50 keys of one row, all expired; 100 live;
    a btree ``index`` on v; key windows forced."""
    db.execute("CREATE TABLE w (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute(f"CREATE INDEX ON w {index}")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-01' + g * interval '1 s', 'x'"
               " FROM generate_series(1, 50) g")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-02', 'x' FROM generate_series(51, 5050) g")
    db.execute("INSERT INTO w SELECT g, timestamptz '2020-01-03' + g * interval '1 s', 'x'"
               " FROM generate_series(5051, 5100) g")
    db.execute("INSERT INTO w SELECT g, '2999-01-01', 'x' FROM generate_series(5101, 5200) g")
    db.commit()
    db.autocommit = True
    db.execute("VACUUM ANALYZE w")
    db.autocommit = False
    db.execute("SELECT ttl.enable('w', expire_after => '1 day', column_name => 'v', select_batch_size => 200,"
               " delete_batch_size => 40)")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.commit()


def test_pg_ttl_run_deletes_every_row_of_a_key_of_many_rows_through_a_descending_index(
        db: psycopg.Connection[Any], dsn: str) -> None:
    """Key windows over a btree on (v DESC) (the usual index for "newest first"): a key of
    more rows than a window (5,000 rows of one bulk load's now()) is deleted in ctid windows
    between its first and last row, found whichever way the index is ordered."""
    _one_key_of_many_rows(db, "(v DESC)")
    [res] = expire(dsn, ["w"])
    left = db.execute("SELECT count(*) FROM w WHERE v < '2999-01-01'").fetchone()[0]
    assert (res.status, res.rows_deleted, left) == ("ok", 5100, 0)


def test_call_records_an_error_of_one_table_and_goes_on(db: psycopg.Connection[Any], connect: Any) -> None:
    """An expired row still referenced by a foreign key makes one table's DELETE fail: that
    unit is recorded failed and the CALL goes on (one bad row must not stop the nightly
    pass of every table), and the caller's session gets its own settings back."""
    ttl_table_sql = ("CREATE TABLE {0} (id int PRIMARY KEY, v timestamptz NOT NULL);"
                     "INSERT INTO {0} SELECT g, now() - interval '3 days' FROM generate_series(1, 20) g;"
                     "SELECT ttl.enable('{0}', expire_after => '1 day', column_name => 'v');")
    db.execute(ttl_table_sql.format("a_parent"))
    db.execute("CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES a_parent)")
    db.execute("INSERT INTO child VALUES (1, 7)")
    db.execute(ttl_table_sql.format("b_other"))
    db.commit()
    caller = connect()
    caller.execute("SET search_path = public; SET TimeZone = 'America/New_York'; SET lock_timeout = 0")
    escaped = None
    try:
        caller.execute("CALL ttl.run()")
    except psycopg.Error as exc:
        escaped = type(exc).__name__
    session = caller.execute("SELECT current_setting('search_path'), current_setting('TimeZone'),"
                             " current_setting('lock_timeout')").fetchone()
    runs = dict(db.execute("SELECT table_name, status FROM ttl.run").fetchall())
    db.commit()
    observed = {
        "escaped": escaped,
        "runs": runs,
        "b_other expired left": db.execute("SELECT count(*) FROM b_other").fetchone()[0],
        "session": session,
    }
    assert observed == {
        "escaped": None,
        "runs": {"a_parent": "failed", "b_other": "ok"},
        "b_other expired left": 0,
        "session": ("public", "America/New_York", "0"),
    }


def _slow_deletes(db: psycopg.Connection[Any], name: str, seconds: float, parts: int = 0) -> None:
    """Table ``name`` of 20 expired rows and 5 live ones (1-day TTL on v), whose every DELETE
    statement takes ``seconds`` (an AFTER DELETE trigger: a slow statement); with ``parts``,
    list-partitioned on id % parts, each partition's DELETE taking ``seconds`` (a row trigger:
    statement triggers of a partitioned table do not fire for its partitions' statements)."""
    if parts:
        db.execute(f"CREATE TABLE {name} (id int, v timestamptz NOT NULL) PARTITION BY LIST ((id % {parts}))")
        for i in range(parts):
            db.execute(f"CREATE TABLE {name}_{i} PARTITION OF {name} FOR VALUES IN ({i})")
    else:
        db.execute(f"CREATE TABLE {name} (id int, v timestamptz NOT NULL)")
    db.execute(f"INSERT INTO {name} SELECT g, now() - interval '3 days' FROM generate_series(1, 20) g")
    db.execute(f"INSERT INTO {name} SELECT g, now() FROM generate_series(21, 25) g")
    per = seconds * parts / 20 if parts else seconds
    db.execute(f"CREATE FUNCTION {name}_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
               f" PERFORM pg_sleep({per}); RETURN NULL; END $$")
    db.execute(f"CREATE TRIGGER slow AFTER DELETE ON {name} FOR EACH {'ROW' if parts else 'STATEMENT'}"
               f" EXECUTE FUNCTION {name}_slow()")
    db.execute(f"SELECT ttl.enable('{name}', expire_after => '1 day', column_name => 'v')")


def test_the_callers_statement_timeout_stops_the_call_at_the_unit_it_reached(
        db: psycopg.Connection[Any], connect: Any) -> None:
    """PostgreSQL times the CALL as one statement: the caller's statement_timeout ends it
    (ttl.settings' statement_timeout cannot apply inside it, docs/expiring.md). The unit it
    reached is recorded interrupted, with its checkpoint, the run partial, no later unit is
    started, the CALL raises query_canceled, and the session has its settings back."""
    _slow_deletes(db, "p", 1.0, parts=4)
    db.commit()
    caller = connect()
    caller.execute("SET statement_timeout = '600ms'; SET search_path = public")
    with pytest.raises(psycopg.errors.QueryCanceled):
        caller.execute("CALL ttl.run('p')")
    session = caller.execute("SELECT current_setting('search_path'), current_setting('statement_timeout')").fetchone()
    units = db.execute("SELECT status FROM ttl.run_unit WHERE action = 'delete'").fetchall()
    runs = db.execute("SELECT status FROM ttl.run").fetchall()
    assert (units, runs, session) == ([("interrupted",)], [("partial",)], ("public", "600ms"))


def test_call_can_be_cancelled(db: psycopg.Connection[Any], connect: Any) -> None:
    """A cancel (psql's Ctrl-C, pg_cancel_backend, pg_cron's cancel of a job) stops the CALL
    at the unit it reached: that unit is the only one worked on, and the CALL ends with the
    cancel, not one unit later each time."""
    _slow_deletes(db, "p", 1.0, parts=4)
    db.commit()
    caller = connect()
    pid = caller.info.backend_pid
    outcome: list[str] = []

    def call() -> None:
        try:
            caller.execute("CALL ttl.run('p')")
            outcome.append("returned")
        except psycopg.errors.QueryCanceled:
            outcome.append("cancelled")

    thread = threading.Thread(target=call)
    thread.start()
    watcher = connect()
    wait_until(lambda: watcher.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event = 'PgSleep'",
                                       (pid,)).fetchone(), timeout=20)
    db.execute("SELECT pg_cancel_backend(%s)", (pid,))
    db.commit()
    thread.join(30)
    worked = db.execute("SELECT count(*) FROM ttl.run_unit WHERE action = 'delete'").fetchone()[0]
    assert (outcome, worked) == (["cancelled"], 1)


def test_call_after_the_policy_became_an_expression_does_not_resume_a_key_window(
        db: psycopg.Connection[Any], connect: Any) -> None:
    """A run killed mid-unit leaves a key window's checkpoint; the table's TTL then becomes an
    expiration expression (no TTL column, no key windows): the next CALLs start the unit
    from the beginning instead of resuming a key of a column the policy no longer has."""
    _keys_in_early_january(db, rate=500)
    _call_killed_mid_unit(db, connect, "ISO, YMD")
    db.execute("SELECT ttl.disable('w')")
    db.execute("SELECT ttl.enable('w', expiration_expression => 'v + interval ''1 day''')")
    db.commit()
    escaped = []
    for _ in range(2):  # each from a session of its own, the next after the last one ended
        caller = connect()
        try:
            caller.execute("CALL ttl.run('w')")
        except psycopg.Error as exc:
            escaped.append(type(exc).__name__)
        caller.close()
    left = db.execute("SELECT count(*) FROM w WHERE v < '2999-01-01'").fetchone()[0]
    assert (escaped, left) == ([], 0)
