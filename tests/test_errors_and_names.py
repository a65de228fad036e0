"""Errors a user reads and the names they type: the SQL API raises one error (its message, DETAIL,
HINT and SQLSTATE kept) without the CONTEXT lines of the functions it calls unless
pg_ttl.verbose_errors is on; the CLI prints CONTEXT only with --verbose; "column_name", the
parameter of ttl.enable, names the "column" option everywhere."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest


def _error(conn: psycopg.Connection[Any], statement: str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(statement)
    return info.value


def test_api_errors_carry_one_context_line_unless_verbose(connect: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    cases = [
        ("SELECT ttl.enable('ev', expire_after => '-1 day', column_name => 'created_at')", "22023",
         'value of "ttl_expire_after" must not be negative'),
        ("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'nope')", "42703",
         'column "nope" of table public.ev does not exist'),
        ("SELECT ttl.set_option('ev', 'job_cron', '@daily')", None, "table public.ev has no TTL"),
    ]
    for statement, state, message in cases:
        err = _error(conn, statement)
        assert message in (err.diag.message_primary or ""), err
        if state:
            assert err.diag.sqlstate == state, (statement, err.diag.sqlstate)
        context = (err.diag.context or "").strip().splitlines()
        assert len(context) == 1 and context[0].startswith("PL/pgSQL function ttl."), context
        assert "ttl._" not in context[0], context  # no internal function names
    # The HINT survives the re-raise.
    err = _error(conn, "SELECT ttl.set_option('ev', 'job_cron', '@daily')")
    assert err.diag.message_hint and "ttl.enable" in err.diag.message_hint

    conn.execute("SET pg_ttl.verbose_errors = on")
    err = _error(conn, "SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'nope')")
    context = (err.diag.context or "").strip().splitlines()
    assert len(context) > 2 and any("ttl._attnum" in line for line in context), context
    assert err.diag.sqlstate == "42703"


def test_cli_prints_context_only_with_verbose(connect: Any, dsn: str, cli: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    res = cli("ttl", "set", "ev", "--column", "nope", "--expire-after", "1d", "--dsn", dsn)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == ['pg-ttl: column "nope" of table public.ev does not exist ("ttl_column")']
    res = cli("--verbose", "ttl", "set", "ev", "--column", "nope", "--expire-after", "1d", "--dsn", dsn)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("CONTEXT: PL/pgSQL function ttl._attnum"), lines
    assert lines[-1] == 'pg-ttl: column "nope" of table public.ev does not exist ("ttl_column")'
    assert conn.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_column_name_is_the_column_option_everywhere(connect: Any, dsn: str, cli: Any, tmp_path: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, "
                 "seen_at timestamptz NOT NULL DEFAULT now())")
    conn.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'created_at')")
    column = "SELECT attname FROM pg_attribute WHERE attrelid = 'ev'::regclass AND attnum = " \
             "(SELECT ttl_attnum FROM ttl.policy WHERE relid = 'ev'::regclass)"
    assert conn.execute(column).fetchone() == ("created_at",)
    conn.execute("SELECT ttl.set_option('ev', 'column_name', 'seen_at')")
    assert conn.execute(column).fetchone() == ("seen_at",)
    conn.execute("SELECT ttl.set_options('ev', '{\"column\": \"created_at\"}')")
    assert conn.execute(column).fetchone() == ("created_at",)
    ddl = tmp_path / "ttl.sql"
    ddl.write_text("ALTER TABLE ev SET (ttl_column_name = 'seen_at');\n")
    res = cli("apply", str(ddl), "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    assert conn.execute(column).fetchone() == ("seen_at",)
    # describe and dump show the one name the option has.
    res = cli("dump", "ev", "--dsn", dsn)
    assert "ttl_column = 'seen_at'" in res.stdout and "column_name" not in res.stdout, res.stdout


def test_enable_without_a_column_says_what_it_adds(connect: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, v text)")
    texts: list[str] = []  # read in the handler: a notice's fields are gone after it returns
    conn.add_notice_handler(lambda n: texts.append((n.message_primary or "") + " | " + (n.message_hint or "")))
    conn.execute("SELECT ttl.enable('ev', expire_after => '1 day')")
    assert any("added columns ttl_expires_at" in t and "ttl_written_at" in t and "column_name =>" in t
               for t in texts), texts
