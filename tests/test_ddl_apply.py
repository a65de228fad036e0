"""TTL DDL against the real server: apply (atomic / statement by statement), the
pure checks agree with the database, per-row expiry is the database's call."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pg_ttl.ddl import TtlDdlError, rewrite
from pg_ttl.ddl import options as opts
from pg_ttl.ddl.apply import ApplyError, apply
from tests.helpers import catalog_state

Conn = psycopg.Connection[Any]


def _describe(conn: Conn, table: str) -> dict[str, str | None]:
    rows = conn.execute("SELECT option, value FROM ttl.describe(%s)", (table,)).fetchall()
    return {o: v for o, v in rows if o not in ("created_at", "updated_at")}


def test_issue_example_applies(db: Conn) -> None:
    db.execute("CREATE TABLE users (id int PRIMARY KEY, email text)")
    db.commit()
    sql = """
CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, body jsonb)
  WITH (ttl_expire_after = '30 days', ttl_column = 'created_at', ttl_job_cron = '@hourly', fillfactor = 70);
ALTER TABLE events SET (ttl_delete_batch_size = 1000);
ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '90 days');
CREATE TABLE sessions (id uuid PRIMARY KEY, expire_at timestamptz) WITH (ttl_expiration_expression = 'expire_at');
CREATE TABLE metrics (ts bigint, v float8) WITH (ttl_expire_after = 'PT1H', ttl_column = 'ts', ttl_unit = 'seconds');
ALTER TABLE events RESET (ttl_job_cron), SET (ttl_pause = true);
"""
    result = apply(db, sql, "m.sql")
    assert (result.statements, result.changed) == (6, 6)
    ev = _describe(db, "events")
    assert ev["ttl_expire_after"] == "30 days" and ev["ttl_column"] == "created_at"
    assert ev["ttl_delete_batch_size"] == "1000" and ev["ttl_pause"] == "true"
    assert ev["ttl_job_cron"] == "@hourly"
    assert db.execute("SELECT reloptions FROM pg_class WHERE relname = 'events'").fetchone() == (["fillfactor=70"],)
    assert _describe(db, "users")["column email: ttl_expire_after"] == "90 days"
    assert _describe(db, "sessions")["ttl_expiration_expression"] == "expire_at"
    m = _describe(db, "metrics")
    assert (m["ttl_expire_after"], m["ttl_unit"]) == ("01:00:00", "seconds")

    apply(db, "ALTER TABLE events RESET (ttl); ALTER TABLE users ALTER COLUMN email RESET (ttl);")
    assert db.execute("SELECT count(*) FROM ttl.policy WHERE relid = 'events'::regclass").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM ttl.column_policy").fetchone() == (0,)


def test_bad_third_statement_leaves_first_and_second_unapplied(db: Conn, connect: Any) -> None:
    before = catalog_state(db)
    sql = ("CREATE TABLE a (at timestamptz) WITH (ttl_expire_after = '1 day', ttl_column = 'at');\n"
           "ALTER TABLE a SET (ttl_delete_batch_size = 10);\n"
           "ALTER TABLE a SET (ttl_column = 'no_such_column');\n"
           "CREATE TABLE d (x int);\n")
    with pytest.raises(ApplyError) as err:
        apply(db, sql, "three.sql")
    assert (err.value.line, err.value.column, err.value.applied) == (3, 1, 0)
    assert re.match(r'three.sql:3:1: column "no_such_column" of table (public\.)?a does not exist', str(err.value))
    other = connect()
    assert other.execute("SELECT to_regclass('a'), to_regclass('d')").fetchone() == (None, None)
    assert catalog_state(other) == before


def test_statement_by_statement_keeps_what_ran(db: Conn, connect: Any) -> None:
    sql = ("CREATE TABLE a (at timestamptz) WITH (ttl_expire_after = '1 day', ttl_column = 'at');\n"
           "ALTER TABLE a SET (ttl_delete_batch_size = 10);\n"
           "  ALTER TABLE a SET (ttl_column = 'missing');\n"
           "CREATE TABLE d (x int);\n")
    conn = connect()  # autocommit, like the CLI
    with pytest.raises(ApplyError) as err:
        apply(conn, sql, "s.sql", statement_by_statement=True)
    assert (err.value.line, err.value.column, err.value.applied) == (3, 3, 2)
    assert _describe(conn, "a")["ttl_delete_batch_size"] == "10"
    assert conn.execute("SELECT to_regclass('d')").fetchone() == (None,)


def test_create_and_its_ttl_are_one_unit_in_statement_mode(db: Conn, connect: Any) -> None:
    conn = connect()
    with pytest.raises(ApplyError) as err:
        apply(conn, "CREATE TABLE b (at text) WITH (ttl_expire_after = '1 day', ttl_column = 'at');",
              "b.sql", statement_by_statement=True)
    assert "cannot be a TTL column" in str(err.value)
    assert conn.execute("SELECT to_regclass('b')").fetchone() == (None,)


def test_transaction_control_refused_in_one_transaction(db: Conn) -> None:
    with pytest.raises(TtlDdlError, match=r"^t.sql:2:1: COMMIT inside a file applied as one transaction"):
        apply(db, "CREATE TABLE c (x int);\nCOMMIT;\n", "t.sql")
    assert db.execute("SELECT to_regclass('c')").fetchone() == (None,)


def test_pure_errors_run_nothing(db: Conn, connect: Any) -> None:
    with pytest.raises(TtlDdlError, match=r"^p.sql:2:1: .*ttl_select_batch_size.*at least 1"):
        apply(db, "CREATE TABLE e (x int);\nALTER TABLE e SET (ttl_select_batch_size = 0);", "p.sql")
    assert connect().execute("SELECT to_regclass('e')").fetchone() == (None,)


def test_alter_set_on_table_without_ttl_needs_expiry(db: Conn) -> None:
    db.execute("CREATE TABLE f (at date)")
    with pytest.raises(ApplyError, match='"ttl_expire_after" and/or "ttl_expiration_expression" must be set'):
        apply(db, "ALTER TABLE f SET (ttl_job_cron = '@daily');", "f.sql")


def test_if_exists_skips_a_missing_table(db: Conn) -> None:
    apply(db, "ALTER TABLE IF EXISTS nowhere SET (ttl_pause = true); ALTER TABLE IF EXISTS nowhere RESET (ttl);")
    db.execute("CREATE TABLE g (at date)")
    apply(db, "ALTER TABLE IF EXISTS g SET (ttl_expire_after = '2 days', ttl_column = 'at');")
    assert _describe(db, "g")["ttl_expire_after"] == "2 days"


def test_create_if_not_exists_keeps_an_existing_ttl(db: Conn) -> None:
    sql = "CREATE TABLE IF NOT EXISTS h (at date) WITH (ttl_expire_after = '{}', ttl_column = 'at');"
    apply(db, sql.format("3 days"))
    apply(db, sql.format("9 days"))
    assert _describe(db, "h")["ttl_expire_after"] == "3 days"


def test_quoted_names_reach_the_right_table(db: Conn) -> None:
    apply(db, 'CREATE SCHEMA "Odd Schema"; CREATE TABLE "Odd Schema"."user" ("When" timestamptz) '
              "WITH (ttl_expire_after = '1 week', ttl_column = 'When');")
    row = db.execute("SELECT table_name, ttl_column FROM ttl.policies").fetchone()
    assert row == ('"Odd Schema"."user"', "When")


def test_per_row_expiry_is_passed_to_the_database(db: Conn) -> None:
    """ttl_expire_after without a column: the rewrite only passes it on, and the
    database turns it into per-row TTL (its own expiry and write columns, a trigger)."""
    sql = "CREATE TABLE carts (id int PRIMARY KEY) WITH (ttl_expire_after = '1 day');"
    assert "ttl.set_options('carts', CAST('{\"expire_after\": \"1 day\"}' AS jsonb))" in rewrite(sql)
    notices: list[str] = []
    db.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
    result = apply(db, sql, "c.sql")
    assert (result.statements, result.executed, result.changed) == (1, 2, 1)
    desc = _describe(db, "carts")
    assert desc["ttl_expire_after"] == "1 day" and desc["ttl_column"] is None
    assert desc["row_expiry_column"] == desc["ttl_expiration_expression"] == "ttl_expires_at"
    cols = db.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'carts'::regclass AND attnum > 0 "
                      "AND NOT attisdropped ORDER BY attnum").fetchall()
    assert [c for c, in cols] == ["id", "ttl_expires_at", "ttl_written_at"]
    triggers = db.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'carts'::regclass").fetchall()
    assert triggers == [("ttl_row_expiry",)]
    assert [n for n in notices if n.startswith("per-row TTL: added columns ttl_expires_at")], notices


def test_option_table_matches_the_database(db: Conn) -> None:
    registry = db.execute("SELECT name, kind FROM ttl.options ORDER BY position").fetchall()
    assert [(k, kind.value) for k, kind in opts.OPTIONS.items()] == registry
    names = db.execute("SELECT ttl.option_names()").fetchone()
    assert names is not None and names[0] == [n for n, _ in registry]


def test_database_refuses_what_the_pure_checks_refuse(db: Conn) -> None:
    """The pure checks are a subset of the database's own: the same values fail there too."""
    db.execute("CREATE TABLE k (at timestamptz, n bigint)")
    db.execute("SELECT ttl.enable('k', expire_after => '1 day', column_name => 'at')")
    db.commit()
    bad = {"expire_after": ["banana", "-1 day"], "job_cron": ["61 * * * *", "* * *"],
           "select_batch_size": ["0", "1.5"], "delete_rate_limit": ["-1"], "pause": ["maybe"],
           "unit": ["hours"], "partition_action": ["archive"]}
    for key, values in bad.items():
        for value in values:
            with pytest.raises(opts.OptionError):
                opts.check(key, value)
            with pytest.raises(psycopg.Error):
                db.execute("SELECT ttl.set_option('k', %s, %s)", (key, value))
            db.rollback()


INTERVAL_WORDS = ["day", "days", "hour", "h", "min", "m", "s", "sec", "week", "mon", "month", "year", "ms",
                  "us", "ago", "@", "P", "T", "D", "H", "M", "S", "Y", "W", "daze", "x", "infinity"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.integers(-50, 50).map(str), st.sampled_from(INTERVAL_WORDS),
                          st.sampled_from(["1:30", "1-2", "1.5", ":", "-"])), min_size=0, max_size=4),
       st.sampled_from([" ", ""]))
def test_python_never_refuses_an_interval_postgres_takes(db: Conn, parts: list[str], sep: str) -> None:
    # The database is only read here, so sharing it between examples is fine.
    text = sep.join(parts)
    try:
        seconds = opts.interval_seconds(text)
    except ValueError:
        python_ok = False
    else:
        python_ok = True
    try:
        with db.transaction():
            row = db.execute("SELECT %s::interval > interval '0'", (text,)).fetchone()
        pg_ok = True
    except psycopg.Error:
        pg_ok = False
    if not python_ok:
        assert not pg_ok, f"Python refused {text!r} but PostgreSQL reads it"
    if python_ok and pg_ok and seconds is not None:
        assert row is not None and (seconds > 0) == row[0], text


USING_TTL = """
CREATE TABLE pv (id int PRIMARY KEY, views int)
  WITH (ttl_expire_after = '1 day', ttl_value_ttl_overrides_table_ttl = true);
INSERT INTO pv VALUES (1, 1) USING TTL 10;
INSERT INTO pv VALUES (2, 1);
INSERT INTO pv VALUES (3, 1) USING TTL 0;
UPDATE pv USING TTL 3600 SET views = 2 WHERE id = 2;
INSERT INTO pv VALUES (4, 1);
"""


@pytest.mark.parametrize("statement_by_statement", [False, True])
def test_using_ttl_applies_to_its_own_statement(db: Conn, connect: Any, statement_by_statement: bool) -> None:
    """CQL's USING TTL, through ttl.using_ttl: the row's expiry follows it, and
    the next statement without USING TTL gets the table's TTL again."""
    conn = connect() if statement_by_statement else db
    apply(conn, USING_TTL, "u.sql", statement_by_statement=statement_by_statement)
    rows = conn.execute("SELECT id, (ttl_expires_at - ttl_written_at)::text FROM pv ORDER BY id").fetchall()
    assert rows == [(1, "00:00:10"), (2, "01:00:00"), (3, None), (4, "1 day")]
