"""pg-ttl dump: TTL DDL that recreates the policies; dump -> RESET (ttl) -> apply round-trips."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from pg_ttl.ddl import rewrite
from pg_ttl.ddl.apply import apply
from pg_ttl.ddl.dump import NoTtlError, dump

Conn = psycopg.Connection[Any]
# Column TTL's base ('row' or 'write'), once the catalog has it.
RELATIVE = r"(, ttl_relative_to = '(row|write)')?"

# Columns of the catalog that a dump must reproduce (not oids of the moment, not timestamps).
_POLICY = """
SELECT table_name, ttl_column, expiration_expression, expire_after, unit, job_cron, job_cron_override,
       select_batch_size, delete_batch_size, select_rate_limit, delete_rate_limit, paused,
       partition_action, detach_schema
  FROM ttl.policies ORDER BY table_name
"""


def _state(conn: Conn) -> tuple[list[Any], list[Any], dict[str, list[Any]]]:
    policies = conn.execute(_POLICY).fetchall()
    columns = conn.execute("SELECT table_name, column_name, expire_after FROM ttl.column_policies "
                           "ORDER BY 1, 2").fetchall()
    described = {t: [r for r in conn.execute("SELECT option, value FROM ttl.describe(%s)", (t,)).fetchall()
                     if r[0] not in ("created_at", "updated_at")]
                 for t in ("public.events", '"Odd"."Mixed Case"', "public.users", "public.metrics", "public.carts")}
    return policies, columns, described


def _setup(db: Conn) -> None:
    db.execute("""
        CREATE SCHEMA "Odd"; CREATE SCHEMA archive;
        CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, note text);
        CREATE TABLE "Odd"."Mixed Case" ("Expire At" timestamptz);
        CREATE TABLE users (id int PRIMARY KEY, email text, phone text);
        CREATE TABLE metrics (ts bigint);
        CREATE TABLE carts (id int PRIMARY KEY, item text);
    """)
    apply(db, """
        ALTER TABLE events SET (ttl_expire_after = '30 days', ttl_column = 'created_at', ttl_job_cron = '@daily',
                                ttl_select_batch_size = 500, ttl_delete_batch_size = 50, ttl_select_rate_limit = 7,
                                ttl_delete_rate_limit = 0, ttl_pause = true, ttl_partition_action = 'detach',
                                ttl_detach_schema = 'archive');
        ALTER TABLE events ALTER COLUMN note SET (ttl_expire_after = '1 day 02:03:04');
        ALTER TABLE "Odd"."Mixed Case" SET (ttl_expiration_expression = '"Expire At" + interval ''1 hour''');
        ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '90 days'),
                          ALTER COLUMN phone SET (ttl_expire_after = 'P1M');
        ALTER TABLE metrics SET (ttl_expire_after = 'PT1H', ttl_column = 'ts', ttl_unit = 'milliseconds');
        ALTER TABLE carts SET (ttl_expire_after = '2 days', ttl_delete_batch_size = 5);
        ALTER TABLE carts ALTER COLUMN item SET (ttl_expire_after = '1 hour', ttl_relative_to = 'write');
    """)
    db.commit()


def test_dump_reset_apply_round_trips(db: Conn) -> None:
    _setup(db)
    before = _state(db)
    text = dump(db)
    assert text.count("\n") == 8
    # Per-row expiry (no TTL column) is dumped as what the user wrote, not as its internal expression.
    assert "ALTER TABLE public.carts SET (ttl_expire_after = '2 days', " in text
    assert "ALTER TABLE \"Odd\".\"Mixed Case\" SET (ttl_expiration_expression = '\"Expire At\" + interval" in text
    assert re.search(r"^ALTER TABLE public.users ALTER COLUMN email SET \(ttl_expire_after = '90 days'"
                     + RELATIVE + r"\);$", text, re.MULTILINE)
    # What dump prints is TTL DDL that rewrite accepts.
    assert "ttl.set_options" in rewrite(text)

    apply(db, """ALTER TABLE events RESET (ttl); ALTER TABLE "Odd"."Mixed Case" RESET (ttl);
                 ALTER TABLE users RESET (ttl); ALTER TABLE metrics RESET (ttl); ALTER TABLE carts RESET (ttl);""")
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM ttl.column_policy").fetchone() == (0,)

    apply(db, text, "dump.sql")
    assert _state(db) == before
    assert dump(db) == text


def test_dump_one_table(db: Conn) -> None:
    _setup(db)
    lines = dump(db, "users").splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"ALTER TABLE public.users ALTER COLUMN email SET \(ttl_expire_after = '90 days'"
                        + RELATIVE + r"\);", lines[0])
    assert re.fullmatch(r"ALTER TABLE public.users ALTER COLUMN phone SET \(ttl_expire_after = '1 mon'"
                        + RELATIVE + r"\);", lines[1])
    db.execute("CREATE TABLE plain (x int)")
    with pytest.raises(NoTtlError, match="table plain has no TTL"):
        dump(db, "plain")


def test_dump_of_nothing_is_empty(db: Conn) -> None:
    assert dump(db) == ""
