"""TTL DDL hazards found in review: each test names what once went wrong."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pg_ttl.alembic_ops import enable_sql, ttl_ddl
from pg_ttl.ddl import TtlDdlError, rewrite
from pg_ttl.ddl.apply import apply

Conn = psycopg.Connection[Any]


def _ttls(conn: Conn) -> dict[int, float]:
    rows = conn.execute("SELECT id, ttl.expires_at(p) - ttl.write_time(p) FROM pv p").fetchall()
    return {i: d.total_seconds() for i, d in rows}


def test_using_ttl_keeps_the_callers_own_setting_for_later_writes(db: Conn) -> None:
    """USING TTL applies to its statement only: the override the session or the
    transaction set before it applies again to the writes after it."""
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, views int)")
    apply(db, "ALTER TABLE pv SET (default_time_to_live = 3600)")
    db.commit()
    db.execute("SELECT ttl.using_ttl('20 seconds', false)")  # for the session
    apply(db, "INSERT INTO pv VALUES (1, 1) USING TTL 10; INSERT INTO pv VALUES (2, 2);")
    db.execute("SELECT ttl.using_ttl('30 seconds')")  # for this transaction
    apply(db, "INSERT INTO pv VALUES (3, 3) USING TTL 10; INSERT INTO pv VALUES (4, 4);")
    db.commit()
    db.execute("INSERT INTO pv VALUES (5, 5)")
    assert _ttls(db) == {1: 10, 2: 20, 3: 10, 4: 30, 5: 20}


def _columns(conn: Conn, table: str) -> list[str]:
    rows = conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                        "AND NOT attisdropped ORDER BY attnum", (table,)).fetchall()
    return [r[0] for r in rows]


def test_reset_ttl_of_a_per_row_ttl_with_a_queue(db: Conn) -> None:
    """RESET (ttl), or a TTL column instead, on a per-row TTL table with an
    expiration queue: the queue goes with the columns it read, no error."""
    db.execute("CREATE TABLE q (id int PRIMARY KEY, at timestamptz)")
    db.execute("CREATE TABLE r (id int PRIMARY KEY, at timestamptz)")
    apply(db, "ALTER TABLE q SET (ttl_expire_after = '1 day', ttl_queue_shards = 2);"
              "ALTER TABLE r SET (ttl_expire_after = '1 day', ttl_queue_shards = 2);")
    db.commit()
    assert len(_columns(db, "q")) > 2
    apply(db, "ALTER TABLE q RESET (ttl); ALTER TABLE r SET (ttl_column = 'at')")
    assert _columns(db, "q") == ["id", "at"] and _columns(db, "r") == ["id", "at"]
    assert db.execute("SELECT relid::regclass::text, queue_shards FROM ttl.policy").fetchall() == [("r", 2)]
    assert db.execute("SELECT relid::regclass::text FROM ttl.queue").fetchall() == [("r",)]


def test_using_ttl_reads_every_integer_literal_postgresql_scans() -> None:
    """0x10, 0o20, 0b10000 and 1_6 are integers to PostgreSQL's scanner: no Python
    traceback, the seconds they stand for."""
    for literal in ("0x10", "0o20", "0b10000", "1_6", "16"):
        out = rewrite(f"INSERT INTO t VALUES (1) USING TTL {literal};")
        assert "CAST('16 seconds' AS interval)" in out, literal


def test_ydb_clause_takes_column_and_storage_names_that_are_keywords(db: Conn, tmp_path: Any) -> None:
    """ON at, ON key, TO EXTERNAL DATA SOURCE data: names PostgreSQL takes unquoted
    (unreserved keywords) are names in YDB's clause too."""
    db.execute("SELECT ttl.create_storage('data', %s)", (f"file://{tmp_path}",))
    db.execute("CREATE TABLE y (id int PRIMARY KEY, at timestamptz, key bigint)")
    db.execute("CREATE TABLE z (id int PRIMARY KEY, at timestamptz)")
    apply(db, 'ALTER TABLE y SET (TTL = Interval("PT1H") ON key AS SECONDS);\n'
              'ALTER TABLE z SET (TTL = Interval("P1D") TO EXTERNAL DATA SOURCE data, Interval("P30D") DELETE ON At);')
    got = dict(db.execute("SELECT relid::regclass::text, ttl_column FROM ttl.policies").fetchall())
    assert got == {"y": "key", "z": "at"}
    tiers = db.execute("SELECT value FROM ttl.describe('z') WHERE option = 'ttl_tiers'").fetchone()
    assert tiers == ("1 day TO data",)


def test_set_and_reset_in_one_alter_switch_a_column_ttl_to_an_expression(db: Conn) -> None:
    """SET and RESET of one ALTER TABLE make one change: the options reset are gone
    when the ones set are checked, as in the final state the statement asks for."""
    db.execute("CREATE TABLE s (id int PRIMARY KEY, at timestamptz)")
    apply(db, "ALTER TABLE s SET (ttl_expire_after = '1 day', ttl_column = 'at', ttl_delete_batch_size = 7)")
    apply(db, "ALTER TABLE s SET (ttl_expiration_expression = 'at + interval ''2 days'''), "
              "RESET (ttl_column, ttl_expire_after, ttl_delete_batch_size)")
    got = dict(db.execute("SELECT option, value FROM ttl.describe('s')").fetchall())
    assert got["ttl_expiration_expression"] == "at + interval '2 days'"
    assert (got["ttl_column"], got["ttl_expire_after"], got["ttl_delete_batch_size"]) == (None, None, "1000")
    assert _columns(db, "s") == ["id", "at"]


def test_reset_ttl_and_drop_its_column_in_one_alter(db: Conn) -> None:
    """RESET (ttl) with DROP COLUMN of the TTL column in one ALTER TABLE: the TTL
    goes first, then the column (it was refused: the column was dropped first)."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, at timestamptz, c text)")
    apply(db, "ALTER TABLE t SET (ttl_expire_after = '1 day', ttl_column = 'at'), "
              "ALTER COLUMN c SET (ttl_expire_after = '1 hour')")
    apply(db, "ALTER TABLE t RESET (ttl), DROP COLUMN at")
    assert _columns(db, "t") == ["id", "c"]
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)
    apply(db, "ALTER TABLE t ADD COLUMN at timestamptz, SET (ttl_expire_after = '1 day', ttl_column = 'at'), "
              "ALTER COLUMN c SET (ttl_expire_after = '1 hour')")
    apply(db, "ALTER TABLE t ALTER COLUMN c RESET (ttl), DROP COLUMN c")
    assert _columns(db, "t") == ["id", "at"]
    assert db.execute("SELECT count(*) FROM ttl.column_policy").fetchone() == (0,)


def test_iso_durations_with_an_empty_time_part_are_what_the_sql_api_takes(db: Conn) -> None:
    """'P1DT' and 'PT' (0) are intervals to PostgreSQL, so to ttl.enable: TTL DDL
    takes them too, with the same value."""
    db.execute("CREATE TABLE a (id int PRIMARY KEY, at timestamptz)")
    db.execute("CREATE TABLE b (id int PRIMARY KEY, at timestamptz)")
    db.execute("SELECT ttl.enable('a', expire_after => 'P1DT', column_name => 'at')")
    apply(db, "ALTER TABLE b SET (ttl_expire_after = 'P1DT', ttl_column = 'at')")
    query = "SELECT relid::regclass::text, expire_after::text FROM ttl.policy ORDER BY 1"
    assert db.execute(query).fetchall() == [("a", "1 day"), ("b", "1 day")]
    apply(db, "ALTER TABLE b SET (ttl_expire_after = 'PT')")
    assert db.execute(query).fetchall() == [("a", "1 day"), ("b", "00:00:00")]


def test_create_table_with_an_orphan_policy_alone(db: Conn) -> None:
    """CREATE TABLE ... WITH (ttl_orphan_...) gives the new table its orphan policy, as
    ALTER TABLE ... SET does (it was refused: no ttl_expire_after); IF NOT EXISTS
    leaves an existing table's orphan policy as it is."""
    db.execute("CREATE TABLE metadata (hash int PRIMARY KEY)")
    apply(db, "CREATE TABLE data (hash int, at timestamptz) "
              "WITH (ttl_orphan_of = 'metadata(hash)', ttl_orphan_key = 'hash', ttl_orphan_min_age = '1 hour');\n"
              "CREATE TABLE IF NOT EXISTS data (hash int) "
              "WITH (ttl_orphan_of = 'metadata(hash)', ttl_orphan_key = 'hash', ttl_orphan_min_age = '2 hours');")
    got = dict(db.execute("SELECT option, value FROM ttl.describe('data')").fetchall())
    assert (got["ttl_orphan_of"], got["ttl_orphan_key"], got["ttl_orphan_min_age"]) == (
        "public.metadata(hash)", "hash", "01:00:00")
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_a_column_ttl_both_set_and_reset_in_one_alter_is_refused() -> None:
    """Removals run before settings: a column's TTL set and reset in one statement
    has no order to keep, so it is refused like a table option set and reset."""
    with pytest.raises(TtlDdlError, match='column "c": its TTL is both set and reset'):
        rewrite("ALTER TABLE t ALTER COLUMN c SET (ttl_expire_after = '1 day'), ALTER COLUMN c RESET (ttl)")


def test_an_expression_that_closes_the_check_select_is_refused(db: Conn) -> None:
    """An expiration expression is one expression: text that ends the database
    check's own SELECT and adds a UNION is refused, by the SQL API as by TTL DDL."""
    db.execute("CREATE TABLE s (id int PRIMARY KEY, expire_at timestamptz)")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be a single expression"):
        db.execute("SELECT ttl.enable('s', expiration_expression => %s)",
                   ("expire_at) AS expiry FROM ONLY s UNION ALL SELECT (now()",))
    db.rollback()
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_alembic_ops_take_column_name_as_the_same_option_as_column(db: Conn) -> None:
    """column_name is accepted everywhere as the option column (docs/sql-api.md):
    alembic's enable_ttl and alter_ttl too."""
    db.execute("CREATE TABLE e (id int PRIMARY KEY, at timestamptz, at2 timestamptz)")
    apply(db, enable_sql("e", None, {"expire_after": "1 day", "column_name": "at"}))
    assert db.execute("SELECT ttl_column FROM ttl.policies").fetchone() == ("at",)
    apply(db, ttl_ddl("e", None, {"ttl_column_name": "at2"}))
    assert db.execute("SELECT ttl_column FROM ttl.policies").fetchone() == ("at2",)
