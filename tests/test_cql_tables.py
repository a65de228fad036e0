"""CQL-style tables as a user declares and changes them: CQL's default_time_to_live in TTL
DDL, USING TTL refused where nothing keeps it, the table's columns and triggers, and
partitions dropped whole once everything written to them expired (YugabyteDB's files).
The per-value semantics themselves: tests/test_cql_semantics.py and tests/test_cql_model.py."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from pg_ttl.ddl import rewrite
from pg_ttl.ddl.apply import ApplyError, apply
from pg_ttl.expire import expire

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.autocommit = True
    return db


def triggers(conn: Conn, table: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal ORDER BY 1",
        (table,)).fetchall()]


def columns(conn: Conn, table: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum", (table,)).fetchall()]


def option(conn: Conn, table: str, name: str) -> str | None:
    options: dict[str, str | None] = dict(conn.execute("SELECT option, value FROM ttl.describe(%s)",
                                                       (table,)).fetchall())
    return options[name]


def test_default_time_to_live_declares_a_cql_style_table_and_alter_changes_later_writes_only(conn: Conn) -> None:
    apply(conn, "CREATE TABLE pv (path text PRIMARY KEY, views int, note text) WITH (default_time_to_live = 86400);",
          "m.sql")
    assert option(conn, "pv", "ttl_value_ttls") == "true"
    assert option(conn, "pv", "ttl_expire_after") == "24:00:00"  # 86400 seconds
    assert columns(conn, "pv") == ["path", "views", "note", "ttl_expires_at", "ttl_written_at", "ttl_values"]
    # one trigger per value column, and one that keeps the INSERT's values' times when an
    # overwrite moves the row's marker; none moves the marker on UPDATE
    assert triggers(conn, "pv") == ["ttl_value_0_marker", "ttl_value_2", "ttl_value_3"]
    conn.execute("INSERT INTO pv VALUES ('/old', 1, 'a')")
    apply(conn, "ALTER TABLE pv SET (default_time_to_live = 0);", "m.sql")
    conn.execute("INSERT INTO pv VALUES ('/new', 1, 'a')")
    left = dict(conn.execute("SELECT path, ttl.ttl(p) FROM pv p").fetchall())
    assert 86390 < left["/old"] <= 86400  # written before: keeps its TTL (Cassandra's rule)
    assert left["/new"] is None  # no default any more: never
    # an UPDATE after the change writes views without TTL: the row now lives as long as it
    conn.execute("UPDATE pv SET views = 2 WHERE path = '/old'")
    assert conn.execute("SELECT ttl.ttl(p, 'views'), ttl.ttl(p, 'note') > 86390, ttl.ttl(p) FROM pv p "
                        "WHERE path = '/old'").fetchone() == (None, True, None)
    apply(conn, "ALTER TABLE pv RESET (ttl);", "m.sql")
    assert columns(conn, "pv") == ["path", "views", "note"]
    assert triggers(conn, "pv") == []


def test_default_time_to_live_must_be_whole_seconds() -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        rewrite("CREATE TABLE t (k int PRIMARY KEY, v int) WITH (default_time_to_live = '1 day')")
    with pytest.raises(ValueError, match="set it to 0"):
        rewrite("ALTER TABLE t RESET (default_time_to_live)")


@pytest.mark.parametrize("statement, refused", [
    ("INSERT INTO plain VALUES (1, 1) USING TTL 10",
     "USING TTL cannot apply to table public.plain: it keeps no TTL per row"),
    ("INSERT INTO by_column VALUES (1, now(), 1) USING TTL 10",
     "USING TTL cannot apply to table public.by_column: its rows expire by their column at"),
    ("UPDATE by_column USING TTL 10 SET v = 2 WHERE k = 1",
     'USING TTL cannot apply to column "v" of table public.by_column: its values keep no TTL per write'),
])
def test_using_ttl_is_refused_where_nothing_keeps_it(conn: Conn, statement: str, refused: str) -> None:
    conn.execute("CREATE TABLE plain (k int PRIMARY KEY, v int)")
    conn.execute("CREATE TABLE by_column (k int PRIMARY KEY, at timestamptz, v int, w int)")
    conn.execute("SELECT ttl.enable('by_column', expire_after => '1 day', column_name => 'at')")
    conn.execute("SELECT ttl.enable_column('by_column', 'w', '1 hour', 'write')")
    conn.execute("INSERT INTO by_column VALUES (1, now(), 1, 1)")
    with pytest.raises(ApplyError) as info:
        apply(conn, statement + ";", "m.sql")
    assert refused in str(info.value)
    assert "hint: Make" in str(info.value) and "default_time_to_live" in str(info.value)
    # nothing was written
    assert conn.execute("SELECT count(*) FROM plain").fetchone() == (0,)
    assert conn.execute("SELECT v FROM by_column").fetchone() == (1,)
    # a column that keeps a TTL per write takes it
    apply(conn, "UPDATE by_column USING TTL 10 SET w = 2 WHERE k = 1;", "m.sql")
    assert conn.execute("SELECT ttl.ttl(b, 'w') FROM by_column b").fetchone() == (10,)


def test_cql_style_refuses_not_null_values_column_ttls_and_a_ttl_column(conn: Conn) -> None:
    conn.execute("CREATE TABLE t (k int PRIMARY KEY, v int NOT NULL, at timestamptz)")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match=r'column "v" of table public\.t is NOT NULL'):
        conn.execute("""SELECT ttl.set_options('t', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    conn.execute("ALTER TABLE t ALTER COLUMN v DROP NOT NULL")
    conn.execute("""SELECT ttl.set_options('t', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="CQL-style"):
        conn.execute("SELECT ttl.enable_column('t', 'v', '1 hour')")
    conn.execute("SELECT ttl.disable('t')")
    conn.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'at')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match='"ttl_value_ttls" needs a per-row TTL'):
        conn.execute("SELECT ttl.set_option('t', 'value_ttls', 'true')")


def test_added_and_dropped_columns_keep_their_value_triggers_in_step(conn: Conn) -> None:
    conn.execute("CREATE TABLE t (k int PRIMARY KEY, a int)")
    conn.execute("""SELECT ttl.set_options('t', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    conn.execute("ALTER TABLE t ADD COLUMN b text")
    assert triggers(conn, "t") == ["ttl_value_0_marker", "ttl_value_2", "ttl_value_6"]
    conn.execute("INSERT INTO t (k, a) VALUES (1, 1)")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('60 seconds')")
        conn.execute("UPDATE t SET b = 'x'")
    assert conn.execute("SELECT ttl.ttl(t, 'b'), ttl.ttl(t, 'a') > 3600 FROM t").fetchone() == (60, True)
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match=r'column "c" of table public\.t is NOT NULL'):
        conn.execute("ALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 0")
    # the trigger on a column depends on it: DROP COLUMN needs CASCADE (as PostgreSQL says)
    with pytest.raises(psycopg.errors.DependentObjectsStillExist):
        conn.execute("ALTER TABLE t DROP COLUMN a")
    conn.execute("ALTER TABLE t DROP COLUMN a CASCADE")
    assert triggers(conn, "t") == ["ttl_value_0_marker", "ttl_value_6"]
    conn.execute("ALTER TABLE t RENAME COLUMN b TO body")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('30 seconds')")
        conn.execute("UPDATE t SET body = 'y'")
    assert conn.execute("SELECT ttl.ttl(t, 'body') FROM t").fetchone() == (30,)


def _partitioned(conn: Conn, name: str, options: str) -> None:
    conn.execute(f"CREATE TABLE {name} (day date, id int, v int, PRIMARY KEY (day, id)) PARTITION BY RANGE (day)")
    for n in (1, 2):
        conn.execute(f"CREATE TABLE {name}_{n} PARTITION OF {name} "
                     f"FOR VALUES FROM ('2026-01-0{n}') TO ('2026-01-0{n + 1}')")
    conn.execute("SELECT ttl.set_options(%s, %s)", (name, options))


def _write(conn: Conn, sql: str, ttl: str | None = None) -> None:
    with conn.transaction():
        if ttl is not None:
            conn.execute("SELECT ttl.using_ttl(%s)", (ttl,))
        conn.execute(sql)


def _partitions(conn: Conn, table: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = %s::regclass ORDER BY 1", (table,)).fetchall()]


def test_partitions_are_dropped_once_everything_written_to_them_expired(conn: Conn, dsn: str) -> None:
    """Each of YugabyteDB's three rules, side by side; writes 1 s apart at most."""
    conn.execute("UPDATE ttl.settings SET value = '1 second' WHERE name = 'partition_expiry_step'")
    # conservative default: the latest expiry, and the table TTL since the latest write
    _partitioned(conn, "dflt", '{"expire_after": "1 second", "value_ttls": "true"}')
    _write(conn, "INSERT INTO dflt VALUES ('2026-01-01', 1, 1), ('2026-01-02', 2, 2)")
    _write(conn, "UPDATE dflt SET v = 20 WHERE id = 2", "1 hour")  # one value with a later TTL
    _write(conn, "INSERT INTO dflt VALUES ('2026-01-01', 3, 3)", "1 second")
    # by the values' own TTLs alone: a short USING TTL on a table whose default is an hour
    _partitioned(conn, "over", '{"expire_after": "3600 seconds", "value_ttls": "true", '
                               '"value_ttl_overrides_table_ttl": "true"}')
    _write(conn, "INSERT INTO over VALUES ('2026-01-01', 1, 1)", "1 second")
    _write(conn, "INSERT INTO over VALUES ('2026-01-02', 2, 2)")
    # by the table TTL alone: a value that never expires is lost with its partition
    _partitioned(conn, "ign", '{"expire_after": "1 second", "value_ttls": "true", "ignore_value_ttl": "true"}')
    _write(conn, "INSERT INTO ign VALUES ('2026-01-01', 1, 1)", "0")
    _partitioned(conn, "keep", '{"expire_after": "1 second", "value_ttls": "true"}')
    _write(conn, "INSERT INTO keep VALUES ('2026-01-01', 1, 1)", "0")
    # a per-row TTL table that is not CQL-style follows the same rules
    _partitioned(conn, "rows", '{"expire_after": "1 second"}')
    _write(conn, "INSERT INTO rows VALUES ('2026-01-01', 1, 1)")
    _write(conn, "INSERT INTO rows VALUES ('2026-01-02', 2, 2)", "1 hour")
    time.sleep(3.2)  # 1 s TTL + 1 s rounding step + margin
    results = {r.table: r for r in expire(dsn, ["dflt", "over", "ign", "keep", "rows"])}
    assert {t: r.status for t, r in results.items()} == dict.fromkeys(("dflt", "over", "ign", "keep", "rows"), "ok"), \
        [(u.unit, u.status, u.error) for r in results.values() for u in r.units]
    assert _partitions(conn, "dflt") == ["dflt_2"]
    assert conn.execute("SELECT id, v FROM dflt").fetchall() == [(2, 20)]
    assert [(u.unit, u.action, u.status) for u in results["dflt"].units] == [
        ("dflt_1", "drop", "ok"), ("dflt_2", "delete", "ok")]
    assert _partitions(conn, "over") == ["over_2"]
    assert _partitions(conn, "ign") == ["ign_2"]  # the never-expiring row went with it; ign_2, never written, stays
    assert _partitions(conn, "keep") == ["keep_1", "keep_2"]
    assert conn.execute("SELECT id FROM keep").fetchall() == [(1,)]
    assert _partitions(conn, "rows") == ["rows_2"]


def test_a_partition_written_to_after_it_was_judged_is_kept(conn: Conn) -> None:
    conn.execute("UPDATE ttl.settings SET value = '1 second' WHERE name = 'partition_expiry_step'")
    _partitioned(conn, "ev", '{"expire_after": "1 second", "value_ttls": "true"}')
    _write(conn, "INSERT INTO ev VALUES ('2026-01-01', 1, 1)")
    time.sleep(2.2)
    cutoff = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    judged = {r[0] for r in conn.execute(
        "SELECT ttl.partitions_expired('ev'::regclass, ARRAY['ev_1'::regclass::oid, 'ev_2'::regclass::oid], %s)"
        "::regclass::text", (cutoff,))}
    assert judged == {"ev_1"}
    _write(conn, "INSERT INTO ev VALUES ('2026-01-01', 2, 2)", "1 hour")  # commits before the drop
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="ev_1 was written to since"), \
            conn.transaction():
        conn.execute("LOCK TABLE ev_1 IN ACCESS EXCLUSIVE MODE")
        conn.execute("SELECT ttl._partition_still_expired('ev'::regclass, 'ev_1'::regclass, %s)", (cutoff,))


def test_a_partition_with_rows_from_before_is_scanned_once_then_kept_by_its_writes(conn: Conn, dsn: str) -> None:
    conn.execute("UPDATE ttl.settings SET value = '1 second' WHERE name = 'partition_expiry_step'")
    conn.execute("CREATE TABLE ev (day date, id int, v int, PRIMARY KEY (day, id)) PARTITION BY RANGE (day)")
    conn.execute("CREATE TABLE ev_1 PARTITION OF ev FOR VALUES FROM ('2026-01-01') TO ('2026-01-02')")
    conn.execute("INSERT INTO ev VALUES ('2026-01-01', 1, 1)")
    conn.execute("""SELECT ttl.set_options('ev', '{"expire_after": "1 hour", "value_ttls": "true"}')""")
    # created empty afterwards: known complete at once
    conn.execute("CREATE TABLE ev_2 PARTITION OF ev FOR VALUES FROM ('2026-01-02') TO ('2026-01-03')")
    records = dict(conn.execute("SELECT relid::regclass::text, complete FROM ttl.partition_expiry").fetchall())
    assert records == {"ev_2": True}
    expire(dsn, ["ev"])
    row = conn.execute("SELECT complete, latest_expiry > now() + interval '59 minutes' FROM ttl.partition_expiry "
                       "WHERE relid = 'ev_1'::regclass").fetchone()
    assert row == (True, True)  # the row from before counts: an hour from enable time
    assert _partitions(conn, "ev") == ["ev_1", "ev_2"]
    # detached (and maybe written to meanwhile): its record goes, it is scanned again once attached
    conn.execute("ALTER TABLE ev DETACH PARTITION ev_1")
    conn.execute("ALTER TABLE ev ATTACH PARTITION ev_1 FOR VALUES FROM ('2026-01-01') TO ('2026-01-02')")
    assert conn.execute("SELECT count(*) FROM ttl.partition_expiry WHERE relid = 'ev_1'::regclass").fetchone() == (0,)
    conn.execute("SELECT ttl.disable('ev')")
    assert conn.execute("SELECT count(*) FROM ttl.partition_expiry").fetchone() == (0,)
    assert triggers(conn, "ev") == []
