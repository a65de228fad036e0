"""Hazards of per-row and per-value TTL found in review: each test names the property it guards."""

from __future__ import annotations

from typing import Any

import psycopg

Conn = psycopg.Connection[Any]


def test_second_using_ttl_write_of_a_tracked_value_in_one_transaction_keeps_the_row_ttl(db: Conn) -> None:
    """UPDATE ... USING TTL of a 'write' column TTL value gives the TTL to the value only, also when
    the same row's value is written twice in one transaction (its range is then unchanged)."""
    db.autocommit = True
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, v int, w int)")
    db.execute("SELECT ttl.enable('pv', expire_after => '1 day')")
    db.execute("SELECT ttl.set_option('pv', 'value_ttl_overrides_table_ttl', 'true')")
    db.execute("SELECT ttl.enable_column('pv', 'v', '1 day', 'write')")
    db.execute("INSERT INTO pv VALUES (1, 1, 1), (2, 1, 1)")
    with db.transaction():
        db.execute("SELECT ttl.using_ttl('10 seconds')")
        db.execute("UPDATE pv SET v = 2 WHERE id = 1")
        db.execute("UPDATE pv SET v = 2 WHERE id = 2")
        db.execute("UPDATE pv SET v = 3 WHERE id = 2")
        rows = db.execute("SELECT ttl_expires_at - now(), upper(ttl_cell_v) - now() FROM pv ORDER BY id").fetchall()
        # an UPDATE setting no tracked value still gives the statement's TTL to the row
        db.execute("UPDATE pv SET w = 5 WHERE id = 1")
        other = db.execute("SELECT ttl_expires_at - now() FROM pv WHERE id = 1").fetchone()
    assert [(r[0].total_seconds(), r[1].total_seconds()) for r in rows] == [(86400, 10), (86400, 10)]
    assert other is not None and other[0].total_seconds() == 10
