"""pg-ttl rewrite / apply / dump as a user runs them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]

DDL = """-- my migration
CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)
  WITH (ttl_expire_after = '30 days', ttl_column = 'created_at', fillfactor = 90);
ALTER TABLE events SET (ttl_delete_batch_size = 1000);
"""


def test_rewrite_file_and_stdin(cli: Any, tmp_path: Path) -> None:
    f = tmp_path / "m.sql"
    f.write_text(DDL)
    r = cli("rewrite", str(f))
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "-- my migration\n"
        "CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL) WITH (fillfactor = 90);\n"
        "SELECT ttl.set_options('events', CAST('{\"expire_after\": \"30 days\", \"column\": \"created_at\"}' "
        "AS jsonb));\n"
        "SELECT ttl.set_options('events', CAST('{\"delete_batch_size\": \"1000\"}' AS jsonb));\n")
    assert cli("rewrite", "-", input=DDL).stdout == r.stdout


def test_rewrite_error_is_one_positioned_line(cli: Any, tmp_path: Path) -> None:
    f = tmp_path / "bad.sql"
    f.write_text("SELECT 1;\n\nALTER TABLE t SET (ttl_expire_after = 'soon');\n")
    r = cli("rewrite", str(f))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(f"pg-ttl: {f}:3:1: value of \"ttl_expire_after\" must be an interval, got 'soon'")
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = cli("rewrite", "-", input="ALTER TABLE t SET (ttl = 'off')")
    assert r.returncode == 1 and "<stdin>:1:1: \"ttl\" cannot be set to 'off'" in r.stderr
    assert "RESET (ttl)" in r.stderr
    r = cli("rewrite", str(tmp_path / "missing.sql"))
    assert r.returncode == 1 and "cannot read" in r.stderr


def test_apply_and_dump(cli: Any, dsn: str, db: Conn, tmp_path: Path) -> None:
    f = tmp_path / "m.sql"
    f.write_text(DDL)
    r = cli("apply", "--dsn", dsn, str(f))
    assert r.returncode == 0, r.stderr
    assert "applied 2 statement(s), 2 with TTL DDL" in r.stderr
    row = db.execute("SELECT expire_after::text, delete_batch_size FROM ttl.policies").fetchone()
    assert row == ("30 days", 1000)

    r = cli("dump", "--dsn", dsn)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ALTER TABLE public.events SET (ttl_column = 'created_at', ")
    assert "ttl_expire_after = '30 days'" in r.stdout and "ttl_delete_batch_size = '1000'" in r.stdout
    assert cli("dump", "--dsn", dsn, "events").stdout == r.stdout

    db.execute("CREATE TABLE plain (x int)")
    db.commit()
    r = cli("dump", "--dsn", dsn, "plain")
    assert r.returncode == 1 and "table plain has no TTL" in r.stderr


def test_apply_is_atomic_and_reports_the_statement(cli: Any, dsn: str, db: Conn) -> None:
    sql = ("CREATE TABLE a (at timestamptz) WITH (ttl_expire_after = '1 day', ttl_column = 'at');\n"
           "ALTER TABLE a SET (ttl_pause = true);\n"
           "   ALTER TABLE a SET (ttl_unit = 'seconds');\n")
    r = cli("apply", "--dsn", dsn, "-", input=sql)
    assert r.returncode == 1
    assert r.stderr.startswith("pg-ttl: <stdin>:3:4: ")
    assert '"ttl_unit"' in r.stderr and r.stderr.rstrip().endswith("(nothing applied)")
    assert db.execute("SELECT to_regclass('a')").fetchone() == (None,)

    r = cli("apply", "--dsn", dsn, "--statement-by-statement", "-", input=sql)
    assert r.returncode == 1 and "(2 statement(s) before it stay applied)" in r.stderr
    assert db.execute("SELECT paused FROM ttl.policies").fetchone() == (True,)


def test_apply_refuses_bad_ddl_before_connecting(cli: Any) -> None:
    r = cli("apply", "--dsn", "host=/nonexistent dbname=x", "-", input="ALTER TABLE t SET (ttl_x = 1);")
    assert r.returncode == 1 and "<stdin>:1:1: unknown TTL option \"ttl_x\"" in r.stderr


def test_apply_plain_sql_without_pg_ttl(cli: Any, plain_dsn: str, plain_db: Conn) -> None:
    r = cli("apply", "--dsn", plain_dsn, "-", input="CREATE TABLE p (x int); INSERT INTO p VALUES (1);")
    assert r.returncode == 0, r.stderr
    assert plain_db.execute("SELECT count(*) FROM p").fetchone() == (1,)
    r = cli("apply", "--dsn", plain_dsn, "-", input="ALTER TABLE p RESET (ttl);")
    assert r.returncode == 1 and "not installed" in r.stderr


def test_help_explains(cli: Any) -> None:
    r = cli("rewrite", "--help")
    assert r.returncode == 0 and "USING TTL" in r.stdout and "ttl_expire_after" in r.stdout
    r = cli("apply", "--help")
    assert "--statement-by-statement" in r.stdout and "one transaction" in r.stdout
