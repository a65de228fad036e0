"""Per-row TTL: "ttl_expire_after" without a TTL column, USING TTL overrides, ttl()/write_time()."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pg_ttl.expire import expire
from tests.helpers import catalog_state

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.autocommit = True
    db.execute("CREATE TABLE pageviews (path text PRIMARY KEY, views int, note text)")
    return db


def columns(conn: Conn, table: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum", (table,)).fetchall()]


def triggers(conn: Conn, table: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal ORDER BY 1",
        (table,)).fetchall()]


def seconds_left(conn: Conn, where: str = "true") -> list[Any]:
    return [r[0] for r in conn.execute(
        f"SELECT ttl.ttl(p) FROM pageviews p WHERE {where} ORDER BY path").fetchall()]


def test_enable_adds_expiry_column_and_disable_removes_it(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day')")
    assert columns(conn, "pageviews") == ["path", "views", "note", "ttl_expires_at", "ttl_written_at"]
    assert triggers(conn, "pageviews") == ["ttl_row_expiry"]
    desc = dict(conn.execute("SELECT * FROM ttl.describe('pageviews')").fetchall())
    assert desc["ttl_expire_after"] == "1 day"
    assert desc["row_expiry_column"] == "ttl_expires_at"
    assert conn.execute("SELECT row_expiry_column, row_write_column FROM ttl.policies").fetchone() == (
        "ttl_expires_at", "ttl_written_at")
    with conn.transaction():
        conn.execute("INSERT INTO pageviews VALUES ('/a', 1)")
        row = conn.execute("SELECT ttl_expires_at - now(), ttl_written_at = now(), ttl.ttl(p), "
                           "ttl.write_time(p) = now() FROM pageviews p").fetchone()
    assert row is not None
    assert row[0].total_seconds() == 86400 and row[1] is True and row[2] == 86400 and row[3] is True
    conn.execute("SELECT ttl.disable('pageviews')")
    assert columns(conn, "pageviews") == ["path", "views", "note"]
    assert triggers(conn, "pageviews") == []
    assert conn.execute("SELECT count(*) FROM pageviews").fetchone() == (1,)


def test_set_options_and_reset_ttl_do_the_same(conn: Conn) -> None:
    conn.execute("""SELECT ttl.set_options('pageviews', '{"ttl_expire_after": "10 seconds"}')""")
    assert "ttl_expires_at" in columns(conn, "pageviews")
    conn.execute("SELECT ttl.reset_options('pageviews', 'ttl')")
    assert columns(conn, "pageviews") == ["path", "views", "note"]
    assert catalog_state(conn) == ([], [])


def test_existing_rows_expire_from_enable_time(conn: Conn) -> None:
    conn.execute("INSERT INTO pageviews SELECT '/' || g, g FROM generate_series(1, 3) g")
    with conn.transaction():
        conn.execute("SELECT ttl.enable('pageviews', expire_after => '2 hours')")
        assert seconds_left(conn) == [7200, 7200, 7200]


def test_using_ttl_override_later_wins_by_default(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('10 seconds')")
        conn.execute("INSERT INTO pageviews VALUES ('/short', 1)")
        conn.execute("SET LOCAL pg_ttl.row_ttl = '2 days'")
        conn.execute("INSERT INTO pageviews VALUES ('/long', 1)")
        conn.execute("SELECT ttl.using_ttl('0')")
        conn.execute("INSERT INTO pageviews VALUES ('/never', 1)")
        # the table TTL (1 hour) is later than 10 s: it wins; 0 = never
        assert seconds_left(conn) == [172800, None, 3600]
    # the override ends with its transaction
    with conn.transaction():
        conn.execute("INSERT INTO pageviews VALUES ('/next', 1)")
        assert seconds_left(conn, "path = '/next'") == [3600]


def test_value_ttl_overrides_table_ttl_option(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    conn.execute("SELECT ttl.set_option('pageviews', 'value_ttl_overrides_table_ttl', 'true')")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('10 seconds')")
        conn.execute("INSERT INTO pageviews VALUES ('/short', 1)")
        assert seconds_left(conn) == [10]
        # UPDATE ... USING TTL shortens or extends
        conn.execute("SELECT ttl.using_ttl('30 seconds')")
        conn.execute("UPDATE pageviews SET views = 2")
        assert seconds_left(conn) == [30]


def test_update_refreshes_expiry_unless_statement_sets_it(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    conn.execute("INSERT INTO pageviews VALUES ('/a', 1), ('/b', 1)")
    conn.execute("UPDATE pageviews SET ttl_expires_at = now() - interval '1 minute', "
                 "ttl_written_at = now() - interval '61 minutes'")
    assert seconds_left(conn) == [0, 0]  # expired, not yet removed
    with conn.transaction():
        conn.execute("UPDATE pageviews SET views = views + 1 WHERE path = '/a'")
        assert seconds_left(conn) == [3600, 0]
        row = conn.execute("SELECT ttl.write_time(p) = now() FROM pageviews p WHERE path = '/a'").fetchone()
        assert row == (True,)
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('3 hours')")  # UPDATE ... USING TTL extends
        conn.execute("UPDATE pageviews SET views = 5 WHERE path = '/a'")
        assert seconds_left(conn, "path = '/a'") == [10800]
        conn.execute("UPDATE pageviews SET ttl_expires_at = NULL WHERE path = '/a'")  # explicit: never
        assert seconds_left(conn, "path = '/a'") == [None]


def test_ttl_is_null_without_ttl_not_zero(conn: Conn) -> None:
    conn.execute("INSERT INTO pageviews VALUES ('/a', 1)")
    assert seconds_left(conn) == [None]
    assert conn.execute("SELECT ttl.write_time(p), ttl.ttl(p, 'views') FROM pageviews p").fetchone() == (None, None)


def test_using_ttl_refuses_negative(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must not be negative"):
        conn.execute("SELECT ttl.using_ttl('-1 second')")


def test_name_clash_refused_cleanly(conn: Conn) -> None:
    conn.execute("ALTER TABLE pageviews ADD COLUMN ttl_expires_at timestamptz")
    with pytest.raises(psycopg.errors.DuplicateColumn, match='already has a column "ttl_expires_at"'):
        conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day')")
    assert catalog_state(conn) == ([], [])
    assert columns(conn, "pageviews") == ["path", "views", "note", "ttl_expires_at"]


def test_switch_to_ttl_column_removes_added_columns(conn: Conn) -> None:
    conn.execute("ALTER TABLE pageviews ADD COLUMN created_at timestamptz DEFAULT now()")
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day')")
    conn.execute("SELECT ttl.set_option('pageviews', 'column', 'created_at')")
    assert columns(conn, "pageviews") == ["path", "views", "note", "created_at"]
    assert conn.execute("SELECT ttl_column, expiration_expression FROM ttl.policies").fetchone() == (
        "created_at", None)
    conn.execute("SELECT ttl.reset_option('pageviews', 'column')")  # back to per-row
    assert columns(conn, "pageviews")[-2:] == ["ttl_expires_at", "ttl_written_at"]


def test_expire_after_change_applies_to_new_writes(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    conn.execute("SELECT ttl.set_option('pageviews', 'expire_after', '2 hours')")
    with conn.transaction():
        conn.execute("INSERT INTO pageviews VALUES ('/a', 1)")
        assert seconds_left(conn) == [7200]
        conn.execute("UPDATE pageviews SET views = 2")
        assert seconds_left(conn) == [7200]


def test_seed_row_ttl_row_is_gone(conn: Conn, dsn: str) -> None:
    """pageviews: INSERT ... USING TTL 1 -> a second later the row is gone; the others stay."""
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day')")
    conn.execute("SELECT ttl.set_option('pageviews', 'value_ttl_overrides_table_ttl', 'true')")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('1 second')")
        conn.execute("INSERT INTO pageviews VALUES ('/gone', 10)")
    conn.execute("INSERT INTO pageviews VALUES ('/stays', 10)")
    with conn.transaction():
        conn.execute("SELECT ttl.using_ttl('0')")
        conn.execute("INSERT INTO pageviews VALUES ('/forever', 10)")
    # not due yet: nothing goes
    expire(dsn, ["pageviews"])
    assert [r[0] for r in conn.execute("SELECT path FROM pageviews ORDER BY 1").fetchall()] == [
        "/forever", "/gone", "/stays"]
    time.sleep(1.1)
    (result,) = expire(dsn, ["pageviews"])
    assert result.status == "ok" and result.rows_deleted == 1
    assert [r[0] for r in conn.execute("SELECT path FROM pageviews ORDER BY 1").fetchall()] == ["/forever", "/stays"]


def test_partitions_with_mixed_row_ttls_are_not_dropped_early(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE hits (id int, day date NOT NULL, v int) PARTITION BY RANGE (day)")
    conn.execute("CREATE TABLE hits_old PARTITION OF hits FOR VALUES FROM ('2000-01-01') TO ('2000-02-01')")
    conn.execute("CREATE TABLE hits_new PARTITION OF hits FOR VALUES FROM ('2000-02-01') TO ('2100-01-01')")
    conn.execute("SELECT ttl.enable('hits', expire_after => '1 hour')")
    conn.execute("INSERT INTO hits SELECT g, '2000-01-15', g FROM generate_series(1, 10) g")
    # 9 of 10 rows in the old partition are long expired, one lives on
    conn.execute("UPDATE hits SET ttl_expires_at = now() - interval '1 day' WHERE id <> 7")
    (result,) = expire(dsn, ["hits"])
    assert result.status == "ok" and result.partitions_dropped == 0 and result.rows_deleted == 9
    assert conn.execute("SELECT id FROM hits").fetchall() == [(7,)]
    assert conn.execute("SELECT to_regclass('hits_old') IS NOT NULL").fetchone() == (True,)
    # per-row TTL on a partitioned table: every partition got the columns, ttl() works on them
    row = conn.execute("SELECT ttl.ttl(h) FROM hits h").fetchone()
    assert row is not None and 3590 <= row[0] <= 3600


def test_uninstall_removes_what_per_row_ttl_added(conn: Conn, dsn: str, cli: Any) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day')")
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("SELECT ttl.set_option('pageviews', 'strict', 'true')")
    conn.execute("INSERT INTO pageviews VALUES ('/a', 1, 'x')")
    result = cli("uninstall", "--dsn", dsn, "--yes")
    assert result.returncode == 0, result.stderr
    assert columns(conn, "pageviews") == ["path", "views", "note"]
    assert triggers(conn, "pageviews") == []
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'pageviews'::regclass").fetchone() == (False,)
    assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname IN ('ttl', 'ttl_live')").fetchone() == (0,)
    assert conn.execute("SELECT * FROM pageviews").fetchall() == [("/a", 1, "x")]


def test_using_ttl_session_scope_for_autocommit(conn: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    conn.execute("SELECT ttl.set_option('pageviews', 'value_ttl_overrides_table_ttl', 'true')")
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    conn.execute("SELECT ttl.using_ttl('10 seconds')")  # autocommit: ends with this statement
    assert notices and "until the end of this transaction" in notices[0]
    conn.execute("SELECT ttl.using_ttl('20 seconds', false)")  # the session: survives autocommit
    conn.execute("INSERT INTO pageviews VALUES ('/a', 1)")
    conn.execute("RESET pg_ttl.row_ttl")
    conn.execute("INSERT INTO pageviews VALUES ('/b', 1)")
    ttls = dict(conn.execute("SELECT path, ttl.expires_at(p) - ttl.write_time(p) FROM pageviews p").fetchall())
    assert {k: v.total_seconds() for k, v in ttls.items()} == {"/a": 20, "/b": 3600}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table_s=st.integers(1, 10**6), override_s=st.one_of(st.none(), st.integers(0, 10**6)),
       override_wins=st.booleans())
def test_expiry_rule_property(conn: Conn, table_s: int, override_s: int | None, override_wins: bool) -> None:
    """expiry - write time = the table TTL, the override, or the later of the two (0 = never)."""
    with conn.transaction():
        conn.execute("CREATE TABLE IF NOT EXISTS prop (id int)")
        if conn.execute("SELECT 1 FROM ttl.policy WHERE relid = 'prop'::regclass").fetchone() is None:
            conn.execute("SELECT ttl.enable('prop', expire_after => '1 day')")
        conn.execute("SELECT ttl.set_options('prop', %s::jsonb)",
                     (f'{{"expire_after": "{table_s} seconds", "value_ttl_overrides_table_ttl": "{override_wins}"}}',))
        if override_s is not None:
            conn.execute("SELECT ttl.using_ttl(make_interval(secs => %s))", (override_s,))
        conn.execute("TRUNCATE prop")
        conn.execute("INSERT INTO prop VALUES (1)")
        conn.execute("UPDATE prop SET id = 2 WHERE false")
        got = conn.execute("SELECT ttl.expires_at(p) - ttl.write_time(p) FROM prop p").fetchone()
        assert got is not None
        if override_s is None:
            expected: float | None = table_s
        elif override_s == 0:
            expected = None
        else:
            expected = override_s if override_wins else max(table_s, override_s)
        assert (None if got[0] is None else got[0].total_seconds()) == expected
