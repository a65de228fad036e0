"""The SQL API: every bad input is refused with a clear message and leaves the catalog unchanged."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from tests.helpers import catalog_state

SCHEMA = """
CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, body text, n int, flag bool);
CREATE TABLE metrics (ts bigint, v float8);
CREATE TABLE days (d date, t timestamp, ms numeric, i integer);
CREATE TABLE sessions (id int PRIMARY KEY, expire_at timestamptz, label text NOT NULL);
CREATE TABLE parted (id int, created_at timestamptz) PARTITION BY RANGE (created_at);
CREATE TABLE parted_2026 PARTITION OF parted FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
CREATE VIEW events_v AS SELECT * FROM events;
"""


@pytest.fixture
def conn(db: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    db.execute(SCHEMA)
    db.commit()
    db.autocommit = True
    return db


def refused(conn: psycopg.Connection[Any], call: str, *expected: str, params: Any = None) -> psycopg.Error:
    before = catalog_state(conn)
    with pytest.raises(psycopg.Error) as info:
        conn.execute(call, params)
    text = str(info.value) + " " + (info.value.diag.message_hint or "")
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert catalog_state(conn) == before, "a refused call changed the catalog"
    return info.value


def test_enable_and_describe(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at', "
                 "job_cron => '@daily', delete_batch_size => 500)")
    desc = dict(conn.execute("SELECT * FROM ttl.describe('events')").fetchall())
    assert desc["ttl_column"] == "created_at"
    assert desc["ttl_expire_after"] == "30 days"
    assert desc["ttl_job_cron"] == "@daily"
    assert desc["ttl_delete_batch_size"] == "500"
    assert desc["ttl_select_batch_size"] == "10000"
    row = conn.execute("SELECT table_name, ttl_column, paused FROM ttl.policies").fetchone()
    assert row == ("events", "created_at", False)


@pytest.mark.parametrize("column, unit", [("d", None), ("t", None), ("ms", "milliseconds"), ("i", "seconds")])
def test_supported_column_types(conn: psycopg.Connection[Any], column: str, unit: str | None) -> None:
    conn.execute("SELECT ttl.enable('days', expire_after => '1 day', column_name => %s, unit => %s)", (column, unit))
    assert conn.execute("SELECT ttl_column, unit FROM ttl.policies").fetchone() == (column, unit)


def test_iso8601_interval_and_unit(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT ttl.set_options('metrics', '{\"ttl_expire_after\": \"PT1H\", \"ttl_column\": \"ts\", "
                 "\"ttl_unit\": \"seconds\"}')")
    assert conn.execute("SELECT expire_after::text, unit FROM ttl.policy").fetchone() == ("01:00:00", "seconds")


def test_expression_policy(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT ttl.enable('sessions', expiration_expression => 'expire_at')")
    assert conn.execute("SELECT expiration_expression FROM ttl.policies").fetchone() == ("expire_at",)


def test_set_reset_pause_resume_disable(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT ttl.enable('events', '30 days', 'created_at')")
    conn.execute("SELECT ttl.set_option('events', 'ttl_delete_batch_size', '250')")
    conn.execute("SELECT ttl.set_option('events', 'expire_after', '7 days')")
    assert conn.execute("SELECT delete_batch_size, expire_after::text FROM ttl.policy").fetchone() == (250, "7 days")
    conn.execute("SELECT ttl.reset_option('events', 'delete_batch_size')")
    assert conn.execute("SELECT delete_batch_size FROM ttl.policy").fetchone() == (1000,)
    conn.execute("SELECT ttl.pause('events')")
    assert conn.execute("SELECT paused FROM ttl.policy").fetchone() == (True,)
    conn.execute("SELECT ttl.resume('events')")
    assert conn.execute("SELECT paused FROM ttl.policy").fetchone() == (False,)
    conn.execute("SELECT ttl.reset_options('events', 'ttl')")
    assert conn.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_updated_at_moves(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT ttl.enable('events', '30 days', 'created_at')")
    conn.autocommit = False
    conn.execute("UPDATE ttl.policy SET created_at = created_at - interval '1 hour', "
                 "updated_at = updated_at - interval '1 hour'")
    conn.commit()
    conn.autocommit = True
    conn.execute("SELECT ttl.set_option('events', 'job_cron', '@daily')")
    created, updated = conn.execute("SELECT created_at, updated_at FROM ttl.policy").fetchone()  # type: ignore[misc]
    assert updated > created


def test_policy_change_notifies_workers(conn: psycopg.Connection[Any], connect: Any) -> None:
    listener = connect()
    listener.execute("LISTEN pg_ttl")
    conn.execute("SELECT ttl.enable('events', '30 days', 'created_at')")
    notes = list(listener.notifies(timeout=2, stop_after=1))
    assert notes and notes[0].payload == "public.events"


BAD_CALLS = [
    # unknown table / column
    ("SELECT ttl.enable('nope', '1 day', 'created_at')", ['relation "nope" does not exist']),
    ("SELECT ttl.enable('events', '1 day', 'missing')", ['column "missing" of table public.events does not exist']),
    # unsupported types and objects
    ("SELECT ttl.enable('events', '1 day', 'body')",
     ['column "body" of table public.events has type text, which cannot be a TTL column']),
    ("SELECT ttl.enable('events', '1 day', 'flag')", ["has type boolean"]),
    ("SELECT ttl.enable('events_v', '1 day', 'created_at')", ['"public.events_v" is not a table']),
    ("SELECT ttl.enable('parted_2026', '1 day', 'created_at')", ["is a partition of public.parted"]),
    # intervals
    ("SELECT ttl.enable('events', '-1 day', 'created_at')", ['"ttl_expire_after" must not be negative']),
    ("SELECT ttl.enable('sessions', '0 days')", ['"ttl_expire_after" must be greater than zero without "ttl_column"']),
    ("SELECT ttl.enable('events', 'soon', 'created_at')", ['invalid input syntax for type interval: "soon"']),
    ("SELECT ttl.set_options('events', '{\"expire_after\": \"soon\", \"column\": \"created_at\"}')",
     ['value of "ttl_expire_after" must be an interval, got "soon"']),
    # numeric columns need a unit, time columns refuse one
    ("SELECT ttl.enable('metrics', '1 day', 'ts')", ['"ttl_unit" must be set', "seconds, milliseconds"]),
    ("SELECT ttl.enable('metrics', '1 day', 'ts', unit => 'fortnights')", ["ttl_unit"]),
    ("SELECT ttl.enable('events', '1 day', 'created_at', unit => 'seconds')",
     ['"ttl_unit" applies to numeric columns only']),
    # batch sizes, rate limits
    ("SELECT ttl.enable('events', '1 day', 'created_at', select_batch_size => 0)",
     ['"ttl_select_batch_size" must be at least 1']),
    ("SELECT ttl.enable('events', '1 day', 'created_at', delete_batch_size => -5)",
     ['"ttl_delete_batch_size" must be at least 1']),
    ("SELECT ttl.enable('events', '1 day', 'created_at', delete_rate_limit => -1)",
     ['"ttl_delete_rate_limit" must be at least 1 (or 0 for unlimited)']),
    ("SELECT ttl.set_options('events', '{\"expire_after\": \"1 day\", \"column\": \"created_at\", "
     "\"select_batch_size\": \"many\"}')", ['value of "ttl_select_batch_size" must be an integer, got "many"']),
    # cron
    ("SELECT ttl.enable('events', '1 day', 'created_at', job_cron => 'every hour')",
     ['invalid cron expression for "ttl_job_cron"']),
    # unknown option
    ("SELECT ttl.set_options('events', '{\"expire_after\": \"1 day\", \"column\": \"created_at\", \"colour\": 1}')",
     ['unknown TTL option "ttl_colour"', "Accepted options"]),
    # expressions
    ("SELECT ttl.enable('sessions', expiration_expression => 'expire_at; DROP TABLE events')",
     ['"ttl_expiration_expression" must be a single expression']),
    ("SELECT ttl.enable('sessions', expiration_expression => '(SELECT max(expire_at) FROM sessions)')",
     ["must not contain subqueries"]),
    ("SELECT ttl.enable('sessions', expiration_expression => 'label')",
     ["must be of type timestamp with time zone, not text"]),
    ("SELECT ttl.enable('sessions', expiration_expression => 'nonexistent + 1')",
     ["is not a valid expression over the table's columns", 'column "nonexistent" does not exist']),
    ("SELECT ttl.enable('sessions', '1 day', expiration_expression => 'expire_at')",
     ['"ttl_expire_after" does not apply with "ttl_expiration_expression"']),
    ("SELECT ttl.enable('sessions', column_name => 'expire_at', expiration_expression => 'expire_at')",
     ['set either "ttl_column" or "ttl_expiration_expression", not both']),
    # nothing to expire on
    ("SELECT ttl.set_options('events', '{\"job_cron\": \"@daily\"}')",
     ['"ttl_expire_after" and/or "ttl_expiration_expression" must be set']),
    # detach needs a schema that exists
    ("SELECT ttl.enable('parted', '1 day', 'created_at', partition_action => 'detach')",
     ['needs "ttl_detach_schema"']),
    ("SELECT ttl.enable('parted', '1 day', 'created_at', partition_action => 'detach', detach_schema => 'nowhere')",
     ['schema "nowhere" of "ttl_detach_schema" does not exist']),
    ("SELECT ttl.enable('parted', '1 day', 'created_at', partition_action => 'archive')",
     ['"ttl_partition_action" must be drop or detach']),
    # no TTL to change
    ("SELECT ttl.disable('events')", ["table public.events has no TTL"]),
    ("SELECT ttl.pause('events')", ["table public.events has no TTL"]),
    ("SELECT ttl.set_option('events', 'job_cron', '@daily')", ["table public.events has no TTL"]),
    ("SELECT ttl.reset_option('events', 'job_cron')", ["table public.events has no TTL"]),
    ("SELECT * FROM ttl.describe('events')", ["table public.events has no TTL"]),
    ("SELECT ttl.disable_column('events', 'body')", ['column "body" of table public.events has no TTL']),
    # column TTL
    ("SELECT ttl.enable_column('sessions', 'label', '1 day')", ["NOT NULL without a default"]),
    ("SELECT ttl.enable_column('sessions', 'id', '1 day')", ["part of the primary key"]),
    ("SELECT ttl.enable_column('events', 'nope', '1 day')", ['column "nope" of table public.events does not exist']),
    ("SELECT ttl.enable_column('events', 'body', '0 s')", ['must be greater than zero']),
]


@pytest.mark.parametrize("call, expected", BAD_CALLS, ids=[c for c, _ in BAD_CALLS])
def test_bad_input_refused_catalog_unchanged(conn: psycopg.Connection[Any], call: str, expected: list[str]) -> None:
    refused(conn, call, *expected)


def test_bad_input_with_existing_policy_changes_nothing(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT ttl.enable('events', '30 days', 'created_at')")
    conn.execute("SELECT ttl.enable_column('events', 'body', '7 days')")
    refused(conn, "SELECT ttl.set_option('events', 'expire_after', '-3 days')", "must not be negative")
    refused(conn, "SELECT ttl.set_option('events', 'column', 'body')", "cannot be a TTL column")
    refused(conn, "SELECT ttl.set_option('events', 'delete_batch_size', '0')", "must be at least 1")
    refused(conn, "SELECT ttl.set_option('events', 'job_cron', '61 * * * *')", "ttl_job_cron")
    refused(conn, "SELECT ttl.set_option('events', 'bogus', '1')", 'unknown TTL option "ttl_bogus"')
    refused(conn, "SELECT ttl.reset_option('events', 'bogus')", 'unknown TTL option "ttl_bogus"')
    refused(conn, "SELECT ttl.reset_option('events', 'expire_after')",
            '"ttl_expire_after" and/or "ttl_expiration_expression" must be set')
    refused(conn, "SELECT ttl.enable('events', '1 day', 'created_at')", "table public.events already has a TTL")
    # direct writes to the catalog get the same validation
    refused(conn, "UPDATE ttl.policy SET select_batch_size = 0", '"ttl_select_batch_size" must be at least 1')
    refused(conn, "UPDATE ttl.column_policy SET expire_after = '-1 day'", "must be greater than zero")


def test_all_functions_pin_search_path(conn: psycopg.Connection[Any]) -> None:
    rows = conn.execute(
        """SELECT p.proname, p.prokind, p.prosecdef, p.proconfig, p.prosrc FROM pg_proc p
            WHERE p.pronamespace = 'ttl'::regnamespace"""
    ).fetchall()
    assert rows
    # A procedure that COMMITs cannot carry a SET clause ("invalid transaction
    # termination"): it must pin search_path itself, in its body.
    procedures = {name: src for name, kind, _, _, src in rows if kind == "p"}
    assert set(procedures) == {"run"}
    for name, src in procedures.items():
        assert "set_config('search_path', 'pg_catalog, pg_temp', false)" in src, name
    unpinned = [name for name, kind, _, config, _ in rows
                if kind != "p" and not any(c.startswith("search_path=") for c in (config or []))]
    assert unpinned == []
    # Every SECURITY DEFINER function, reviewed: none runs SQL a table owner wrote
    # (the ALTER TABLE check runs as whoever altered the table).
    definers = [name for name, _, secdef, _, _ in rows if secdef]
    # The partition records of per-row TTL tables (sql/73_value_ttls.sql): written by the
    # application's writes through a trigger, only ever raised, or forgotten (then rescanned).
    assert set(definers) == {"_on_sql_drop", "_strict_view_sync", "prune_history", "close_dead_runs", "_queue_sync",
                             "_note_partition", "_forget_partitions", "_forget_detached"}


def test_zero_expire_after_expires_a_row_at_its_column_time(conn: psycopg.Connection[Any], dsn: str) -> None:
    """YDB's ``Interval("PT0S") ON expire_at``: the column holds the expiry itself."""
    from pg_ttl.expire import expire

    conn.execute("INSERT INTO sessions VALUES (1, now() - interval '1 minute', 'gone'),"
                 " (2, now() + interval '1 hour', 'kept')")
    conn.execute("SELECT ttl.enable('sessions', 'PT0S', 'expire_at')")
    assert conn.execute("SELECT expire_after FROM ttl.policy").fetchone() == (timedelta(0),)
    expire(dsn, ["sessions"])
    assert conn.execute("SELECT label FROM sessions").fetchall() == [("kept",)]
