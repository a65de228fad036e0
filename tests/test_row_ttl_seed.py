"""Seed 004's pageviews examples, written as TTL DDL / CQL-style USING TTL and run through pg_ttl.rewrite."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import psycopg

import pg_ttl
from pg_ttl.expire import expire

Conn = psycopg.Connection[Any]


def run(conn: Conn, ttl_sql: str) -> None:
    with conn.transaction():
        conn.execute(pg_ttl.rewrite(ttl_sql))


def rows(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT path, views, note FROM pageviews ORDER BY path").fetchall()


def test_row_ttl_row_is_gone(db: Conn, dsn: str) -> None:
    db.autocommit = True
    run(db, """
        CREATE TABLE pageviews (path text PRIMARY KEY, views int, note text)
          WITH (ttl_expire_after = '1 second', ttl_value_ttl_overrides_table_ttl = true);
        INSERT INTO pageviews (path, views, note) VALUES ('/gone', 10, 'a');
        INSERT INTO pageviews (path, views, note) VALUES ('/kept', 10, 'b') USING TTL 3600;
        INSERT INTO pageviews (path, views, note) VALUES ('/forever', 10, 'c') USING TTL 0;
    """)
    # each row's TTL, exactly: expiry - write time
    ttls = dict(db.execute("SELECT path, ttl.expires_at(p) - ttl.write_time(p) FROM pageviews p").fetchall())
    assert ttls == {"/gone": timedelta(seconds=1), "/kept": timedelta(hours=1), "/forever": None}
    time.sleep(1.1)
    (result,) = expire(dsn, ["pageviews"])
    assert result.rows_deleted == 1
    assert [r[0] for r in rows(db)] == ["/forever", "/kept"]


def test_update_using_ttl_expires_only_that_value(db: Conn, dsn: str) -> None:
    db.autocommit = True
    run(db, """
        CREATE TABLE pageviews (path text PRIMARY KEY, views int, note text) WITH (ttl_expire_after = '1 day');
        ALTER TABLE pageviews ALTER COLUMN views SET (ttl_expire_after = '30 days', ttl_relative_to = 'write');
        INSERT INTO pageviews (path, views, note) VALUES ('/a', 1, 'x'), ('/b', 2, 'y');
        UPDATE pageviews USING TTL 1 SET views = 10 WHERE path = '/a';
    """)
    # the value got the USING TTL, the row kept the table TTL
    assert db.execute("SELECT ttl.expires_at(p, 'views') - ttl.write_time(p, 'views'), "
                      "ttl.expires_at(p) - ttl.write_time(p) FROM pageviews p WHERE path = '/a'").fetchone() == (
        timedelta(seconds=1), timedelta(days=1))
    time.sleep(1.1)
    (result,) = expire(dsn, ["pageviews"])
    assert result.status == "ok" and result.rows_deleted == 0
    # views of /a reads NULL; the row, its other columns and /b stay
    assert rows(db) == [("/a", None, "x"), ("/b", 2, "y")]
