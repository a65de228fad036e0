"""A negative per-write TTL is refused wherever it would be used, not only by ttl.using_ttl.

`SET LOCAL pg_ttl.row_ttl = '-10 seconds'` (or SET for the session) bypassed
ttl.using_ttl's check: the DEFAULTs and triggers added it to now(), so the row was
written already expired and the next pass deleted it: a TTL shorter than any asked for.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.fixture()
def tables(db: Conn) -> Conn:
    db.autocommit = True
    # per-row TTL, with a value TTL counted from its writes
    db.execute("CREATE TABLE pr (id int PRIMARY KEY, v int, w int)")
    db.execute("SELECT ttl.enable('pr', expire_after => '1 day')")
    db.execute("SELECT ttl.enable_column('pr', 'v', '1 day', 'write')")
    # CQL-style: a TTL per value
    db.execute("CREATE TABLE cq (id int PRIMARY KEY, v int)")
    db.execute("""SELECT ttl.set_options('cq', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    db.execute("INSERT INTO pr (id, v, w) VALUES (1, 1, 1)")
    db.execute("INSERT INTO cq (id, v) VALUES (1, 1)")
    return db


WRITES = [
    "INSERT INTO pr (id, v, w) VALUES (2, 2, 2)",  # the expiry and tracking DEFAULTs
    "UPDATE pr SET w = 5 WHERE id = 1",  # the row's trigger
    "UPDATE pr SET v = 5 WHERE id = 1",  # the value's trigger
    "INSERT INTO cq (id, v) VALUES (2, 2)",  # the marker's DEFAULT
    "UPDATE cq SET v = 5 WHERE id = 1",  # the value's trigger
    "SELECT ttl.row_expires_at('1 day')",
]


@pytest.mark.parametrize("scope", ["SET LOCAL", "SET"])
@pytest.mark.parametrize("write", WRITES)
def test_negative_row_ttl_setting_is_refused(tables: Conn, scope: str, write: str) -> None:
    before = tables.execute("SELECT (SELECT array_agg(t ORDER BY id) FROM pr t)::text, "
                            "(SELECT array_agg(t ORDER BY id) FROM cq t)::text").fetchone()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must not be negative"), tables.transaction():
        tables.execute(f"{scope} pg_ttl.row_ttl = '-10 seconds'")
        tables.execute(write)
    tables.execute("RESET pg_ttl.row_ttl")
    after = tables.execute("SELECT (SELECT array_agg(t ORDER BY id) FROM pr t)::text, "
                           "(SELECT array_agg(t ORDER BY id) FROM cq t)::text").fetchone()
    assert after == before


def test_positive_and_zero_settings_still_apply(tables: Conn) -> None:
    with tables.transaction():
        tables.execute("SET LOCAL pg_ttl.row_ttl = '10 seconds'")
        tables.execute("INSERT INTO cq (id, v) VALUES (3, 3)")
        tables.execute("UPDATE pr SET w = 7 WHERE id = 1")
    with tables.transaction():
        tables.execute("SET LOCAL pg_ttl.row_ttl = '0'")
        tables.execute("INSERT INTO cq (id, v) VALUES (4, 4)")
    lives = tables.execute("SELECT id, extract(epoch FROM ttl_expires_at - ttl_written_at) FROM cq "
                           "WHERE id IN (3, 4) ORDER BY id").fetchall()
    assert lives == [(3, 10), (4, None)]
    # the table TTL is longer than the override and wins (no "ttl_value_ttl_overrides_table_ttl")
    life = tables.execute("SELECT extract(epoch FROM ttl_expires_at - ttl_written_at) FROM pr WHERE id = 1").fetchone()
    assert life == (86400,)


def test_using_ttl_gives_the_same_error(tables: Conn) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must not be negative"):
        tables.execute("SELECT ttl.using_ttl('-1 second'::interval, false)")
