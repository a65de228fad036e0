"""YDB's TTL clause in TTL DDL (pg_ttl/ddl/ydb.py): the examples of YDB's TTL
documentation (https://ydb.tech/docs/en/yql/reference/recipes/ttl and
.../syntax/alter_table/set) give the same policy as the ttl_* spelling, every
other byte is kept, and mistakes are reported at their line and column."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from pg_ttl.ddl import TtlDdlError, rewrite
from pg_ttl.ddl.apply import apply

Conn = psycopg.Connection[Any]


def _policy(db: Conn, table: str) -> dict[str, Any]:
    rows = db.execute("SELECT option, value FROM ttl.describe(%s)", (table,)).fetchall()
    return {o: v for o, v in rows if o not in ("created_at", "updated_at", "table")}


# (YDB statement, the same in ttl_* options); the table is created first
EXAMPLES = [
    # enable TTL on an existing table: an hour after created_at
    ("ALTER TABLE {t} SET (TTL = Interval(\"PT1H\") ON created_at);",
     "ALTER TABLE {t} SET (ttl_expire_after = '1 hour', ttl_column = 'created_at');"),
    # a numeric column holding Unix seconds
    ("ALTER TABLE {t} SET (TTL = Interval(\"PT1H\") ON modified_at AS SECONDS);",
     "ALTER TABLE {t} SET (ttl_expire_after = '1 hour', ttl_column = 'modified_at', ttl_unit = 'seconds');"),
    # the row expires at expire_at itself
    ("ALTER TABLE {t} SET (TTL = Interval(\"PT0S\") ON expire_at);",
     "ALTER TABLE {t} SET (ttl_expire_after = '0', ttl_column = 'expire_at');"),
    # single quotes, other units, other options kept
    ("ALTER TABLE {t} SET (fillfactor = 80, TTL = Interval('P30D') ON modified_at AS MILLISECONDS);",
     "ALTER TABLE {t} SET (fillfactor = 80, ttl_expire_after = '30 days', ttl_column = 'modified_at', "
     "ttl_unit = 'milliseconds');"),
]
TABLE = "CREATE TABLE {t} (id bigint PRIMARY KEY, created_at timestamptz, modified_at bigint, expire_at timestamptz)"


@pytest.mark.parametrize("ydb, native", EXAMPLES)
def test_ydb_examples_give_the_same_policy_as_ttl_options(db: Conn, ydb: str, native: str) -> None:
    for t in ("a", "b"):
        db.execute(TABLE.format(t=t))
    db.commit()
    apply(db, ydb.format(t="a"), "ydb.sql")
    apply(db, native.format(t="b"), "native.sql")
    db.commit()
    assert _policy(db, "a") == _policy(db, "b")
    # and pg-ttl dump writes the same TTL DDL for both
    from pg_ttl.ddl import dump

    [a], [b] = dump.read(db, "a"), dump.read(db, "b")
    assert a.options == b.options and a.options
    reloptions = db.execute("SELECT c.relname, c.reloptions FROM pg_class c WHERE relname IN ('a', 'b')"
                            " ORDER BY 1").fetchall()
    assert reloptions[0][1] == reloptions[1][1]  # fillfactor where given, nothing else


def test_new_table_with_ttl_and_reset(db: Conn, dsn: str, cli: Any, tmp_path: Any) -> None:
    migration = tmp_path / "m.sql"
    migration.write_text("""CREATE TABLE mytable (
    id bigint,
    expire_at timestamptz,
    PRIMARY KEY (id)
) WITH (
    TTL = Interval("PT0S") ON expire_at
);
""")
    result = cli("apply", str(migration), "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert _policy(db, "mytable")["ttl_expire_after"] in ("00:00:00", "0", "PT0S", "0 seconds")
    db.commit()
    db.execute("INSERT INTO mytable VALUES (1, now() - interval '1 second'), (2, now() + interval '1 hour')")
    db.commit()
    from pg_ttl.expire import expire

    [res] = expire(dsn, ["mytable"])
    assert res.rows_deleted == 1  # expired at its own expire_at
    migration.write_text("ALTER TABLE mytable RESET (TTL);\n")
    assert cli("apply", str(migration), "--dsn", dsn).returncode == 0
    db.rollback()
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_only_the_clause_changes() -> None:
    sql = ("-- a comment\nSELECT 1;\nALTER TABLE t SET (TTL = Interval(\"PT1H\") ON created_at);\n"
           "CREATE INDEX ON t (created_at);\n")
    out = rewrite(sql)
    assert out.startswith("-- a comment\nSELECT 1;\n")
    assert out.endswith("\nCREATE INDEX ON t (created_at);\n")
    assert "ttl.set_options('t'" in out and '"expire_after": "PT1H"' in out and '"column": "created_at"' in out
    assert rewrite("SELECT interval '1 day';\n") == "SELECT interval '1 day';\n"


@pytest.mark.parametrize("sql, position, message", [
    ("ALTER TABLE t SET (TTL = Interval(\"PT1H\"));", "1:42", "ON column expected"),
    ("ALTER TABLE t\n  SET (TTL = Interval(\"PT1H\") ON c AS HOURS);", "2:39", "unknown unit HOURS"),
    ("ALTER TABLE t SET (TTL = Interval(\"PT1H\") ON c,\n TTL = Interval(\"PT2H\") ON c);", "2:2",
     "one TTL clause"),
    ("ALTER TABLE t SET (TTL = Interval(\"one hour\") ON c);", "1:35", "not an ISO 8601 duration"),
    ("ALTER TABLE t SET (TTL = Interval(\"P1D\") DELETE, Interval(\"P2D\") DELETE ON c);", "1:50",
     "DELETE must be the last tier"),
    ("ALTER TABLE t SET (TTL = Interval(\"P1D\") TO EXTERNAL DATA SOURCE cold ON c);",
     "1:35", "the last tier must DELETE"),
])
def test_mistakes_are_reported_at_their_line_and_column(sql: str, position: str, message: str) -> None:
    with pytest.raises(TtlDdlError) as err:
        rewrite(sql, "m.sql")
    assert f"m.sql:{position}: " in str(err.value) and message in str(err.value), str(err.value)


def test_tiers_become_pg_ttl_tiers(db: Conn, tmp_path: Any) -> None:
    db.execute(TABLE.format(t="t"))
    db.execute("SELECT ttl.create_storage('cold', %s)", (f"file://{tmp_path}",))
    db.commit()
    apply(db, "ALTER TABLE t SET (TTL = Interval(\"P1D\") TO EXTERNAL DATA SOURCE cold, "
              "Interval(\"P30D\") DELETE ON created_at);", "m.sql")
    db.commit()
    policy = _policy(db, "t")
    assert (policy["ttl_column"], policy["ttl_expire_after"], policy["ttl_tiers"]) == (
        "created_at", "30 days", "1 day TO cold")
    assert db.execute("SELECT after::text, storage FROM ttl.tier").fetchall() == [("1 day", "cold")]
