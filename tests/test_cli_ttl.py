"""pg-ttl ttl set / reset / describe (pg_ttl/cli/ttl.py), shaped like YDB's ydb table ttl."""

from __future__ import annotations

from typing import Any

import psycopg


def _policy(db: psycopg.Connection[Any], table: str) -> dict[str, Any]:
    db.rollback()
    return {o: v for o, v in db.execute("SELECT option, value FROM ttl.describe(%s)", (table,)).fetchall()}


def test_set_reset_and_describe(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz, ts bigint, expire_at timestamptz)")
    db.commit()
    result = cli("ttl", "set", "--column", "created_at", "--expire-after", "3600", "events", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    policy = _policy(db, "events")
    assert policy["ttl_column"] == "created_at" and policy["ttl_expire_after"] == "01:00:00"
    # numeric Unix time with YDB's unit spelling, a cron, an interval
    result = cli("ttl", "set", "--column", "ts", "--expire-after", "P30D", "--unit", "ms", "--cron", "@daily",
                 "events", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    policy = _policy(db, "events")
    assert (policy["ttl_column"], policy["ttl_unit"], policy["ttl_job_cron"]) == ("ts", "milliseconds", "@daily")
    assert policy["ttl_expire_after"] == "30 days"
    # the default --expire-after 0: at the column's own time
    assert cli("ttl", "set", "--column", "expire_at", "events", "--dsn", dsn).returncode == 0
    assert _policy(db, "events")["ttl_expire_after"] == "00:00:00"
    described = cli("ttl", "describe", "events", "--dsn", dsn)
    assert described.returncode == 0 and "expire_at" in described.stdout
    assert cli("ttl", "reset", "events", "--dsn", dsn).returncode == 0
    db.rollback()
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_bad_input_gets_the_sql_apis_messages(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz, ts bigint)")
    db.commit()
    for args, message in (
        (("--column", "nope"), 'column "nope" of table public.events does not exist'),
        (("--column", "ts"), "ttl_unit"),  # a numeric column needs its unit
        (("--column", "created_at", "--expire-after", "-5 minutes"), "must not be negative"),
        (("--column", "created_at", "--unit", "hours"), "unknown --unit 'hours'"),
        (("--column", "created_at", "--cron", "every day"), "invalid cron expression"),
    ):
        result = cli("ttl", "set", *args, "events", "--dsn", dsn)
        assert result.returncode != 0 and message in result.stderr, (args, result.stderr)
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)  # nothing changed


def test_help_names_the_ydb_equivalents(cli: Any) -> None:
    out = cli("ttl", "set", "--help").stdout
    assert "ydb table ttl set" in out and 'TTL = Interval("PT1H") ON created_at' in out
