"""Expiration queues of expression policies: entries written at the expiry the engine computes."""

from __future__ import annotations

from typing import Any

import psycopg

from pg_ttl.expire import expire


def test_an_expression_policys_entry_is_written_at_the_expiry_the_engine_computes_whatever_the_writers_time_zone(
        db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    """An expiration expression may depend on the session's TimeZone (a cast of a `timestamp`
    column, `date_trunc` on a timestamptz: both accepted). The engine evaluates it in UTC, so
    the queue's triggers do too: a writer at UTC-10 gets the entry the engine computes, not
    one 10 hours late, and the pass deletes the row that expired an hour ago."""
    db.execute("CREATE TABLE e (id int PRIMARY KEY, created timestamp NOT NULL)")
    db.execute("SELECT ttl.enable('e', expiration_expression => '(created + interval ''1 hour'')::timestamptz')")
    db.execute("SELECT ttl.set_option('e', 'queue_shards', '2')")
    db.commit()
    [res] = expire(dsn, ["e"])  # the queue filled (empty)
    writer = connect()
    writer.execute("SET TimeZone = 'Etc/GMT+10'")  # UTC-10
    # created 2 hours ago in UTC wall-clock time: expired 1 hour ago as the engine computes it
    writer.execute("INSERT INTO e VALUES (1, (now() AT TIME ZONE 'UTC') - interval '2 hours')")
    db.execute("SET TimeZone = 'UTC'")
    assert db.execute("SELECT (created + interval '1 hour')::timestamptz < now() FROM e").fetchone() == (True,)
    db.commit()
    [res] = expire(dsn, ["e"])
    assert res.rows_deleted == 1, res
    assert db.execute("SELECT count(*) FROM e").fetchone() == (0,)
