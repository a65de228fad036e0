"""pg-ttl list / describe."""

from __future__ import annotations

import json
from typing import Any

import psycopg


def test_list_and_describe(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    empty = cli("list", "--dsn", dsn)
    assert empty.returncode == 0 and "No TTL policies" in empty.stdout
    db.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz)")
    db.execute("CREATE TABLE metrics (ts bigint)")
    db.execute("SELECT ttl.enable('events', '30 days', 'created_at', job_cron => '@daily')")
    db.execute("SELECT ttl.enable('metrics', '1 hour', 'ts', unit => 'seconds', pause => true)")
    db.commit()

    result = cli("list", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert "created_at + 30 days" in result.stdout
    assert "ts (seconds) + 1 hour" in result.stdout
    assert "@daily" in result.stdout and "paused" in result.stdout

    rows = json.loads(cli("list", "--dsn", dsn, "--json").stdout)
    assert [(r["table"], r["paused"]) for r in rows] == [("events", False), ("metrics", True)]

    described = cli("describe", "--dsn", dsn, "events")
    assert described.returncode == 0
    assert "ttl_expire_after" in described.stdout and "30 days" in described.stdout


def test_describe_errors(dsn: str, plain_dsn: str, db: psycopg.Connection[Any], cli: Any) -> None:
    db.execute("CREATE TABLE plain (id int)")
    db.commit()
    no_ttl = cli("describe", "--dsn", dsn, "plain")
    assert no_ttl.returncode == 1 and "table public.plain has no TTL" in no_ttl.stderr
    missing = cli("describe", "--dsn", dsn, "nope")
    assert missing.returncode == 1 and 'relation "nope" does not exist' in missing.stderr
    not_installed = cli("list", "--dsn", plain_dsn)
    assert not_installed.returncode == 1 and "pg_ttl is not installed" in not_installed.stderr
    for r in (no_ttl, missing, not_installed):
        assert "Traceback" not in r.stderr


def test_describe_separates_ttl_options_from_policy_metadata(db: psycopg.Connection[Any], dsn: str,
                                                             cli: Any) -> None:
    # A TTL column called created_at, like the policy's own timestamp: describe must not mix them.
    db.execute("CREATE TABLE ev (id int, created_at timestamptz NOT NULL)")
    db.execute("SELECT ttl.enable('ev', expire_after => '30 days', column_name => 'created_at')")
    db.commit()
    res = cli("describe", "--dsn", dsn, "ev")
    assert res.returncode == 0, res.stderr
    options, _, record = res.stdout.partition("Policy record")
    assert record, res.stdout
    assert "ttl_expire_after" in options and "created_at" in options  # the TTL column, an option's value
    assert "policy created at" not in options and "policy updated at" not in options
    assert "policy created at" in record and "policy updated at" in record and "ttl_expire_after" not in record
