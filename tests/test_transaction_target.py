"""How long one transaction of expiry aims to take has one owner, the database's
ttl.transaction_seconds(): every way rows go follows it, pg-ttl run's (the Python engine)
and CALL ttl.run()'s, key windows and block ranges, shared or not.

Each test replaces the function, runs one pass, and counts the transactions that deleted
rows (a statement trigger records each DELETE's transaction id): a target of a microsecond
makes every window or range its own transaction, one of a minute groups them or lets them
grow, so the first takes several times as many transactions as the second.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from pg_ttl.expire import expire

EXPIRED = 6000
TINY, HUGE = 0.000001, 60.0


def _target(db: psycopg.Connection[Any], seconds: float) -> None:
    db.execute(sql.SQL("CREATE OR REPLACE FUNCTION ttl.transaction_seconds() RETURNS float8"
                       " LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp"
                       " AS {}").format(sql.Literal(f"SELECT {seconds!r}::float8")))
    db.commit()


def _table(db: psycopg.Connection[Any], *, index: bool, range_bytes: str = "0") -> None:
    """Table t: EXPIRED rows one second apart in 2020, 100 live ones (~60 a block), every
    DELETE on it logged with its transaction in table txns."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz NOT NULL, pad text)")
    db.execute("INSERT INTO t SELECT g, CASE WHEN g <= %s THEN timestamptz '2020-01-01' + g * interval '1 s'"
               " ELSE '2999-01-01' END, rpad('x', 100, 'x') FROM generate_series(1, %s::int) g",
               (EXPIRED, EXPIRED + 100))
    if index:
        db.execute("CREATE INDEX ON t (v)")
    db.execute("CREATE TABLE txns (xid xid8, n bigint)")
    db.execute("CREATE FUNCTION log_txn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
               " INSERT INTO txns SELECT pg_current_xact_id(), count(*) FROM gone HAVING count(*) > 0;"
               " RETURN NULL; END $$")
    db.execute("CREATE TRIGGER log_txn AFTER DELETE ON t REFERENCING OLD TABLE AS gone"
               " FOR EACH STATEMENT EXECUTE FUNCTION log_txn()")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v', select_batch_size => 3000,"
               " delete_batch_size => 100)")
    db.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_strategy'", ("index" if index else "ctid",))
    db.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_range_bytes'", (range_bytes,))
    db.execute("CREATE TABLE t_copy AS SELECT * FROM t")
    db.commit()
    db.autocommit = True
    db.execute("ANALYZE t")  # (relpages: whether the table is swept in shared ranges)
    db.autocommit = False


def _pass(db: psycopg.Connection[Any], dsn: str, connect: Any, how: str, seconds: float) -> tuple[int, str | None]:
    """One pass under a target of ``seconds``: the transactions that deleted rows, and the
    unit's strategy (pg-ttl run's)."""
    _target(db, seconds)
    db.execute("DELETE FROM txns")
    db.execute("ALTER TABLE t DISABLE TRIGGER log_txn")
    db.execute("INSERT INTO t SELECT * FROM t_copy WHERE v < '2999-01-01' ON CONFLICT DO NOTHING")
    db.execute("ALTER TABLE t ENABLE TRIGGER log_txn")
    db.commit()
    strategy = None
    if how == "CALL ttl.run()":
        connect().execute("CALL ttl.run('t')")
    else:
        [res] = expire(dsn, ["t"])
        assert res.status == "ok" and res.rows_deleted == EXPIRED, res
        [strategy] = {u.strategy for u in res.units}
    assert db.execute("SELECT count(*), count(*) FILTER (WHERE v < '2999-01-01') FROM t").fetchone() == (100, 0)
    row = db.execute("SELECT count(DISTINCT xid), sum(n) FROM txns").fetchone()
    assert row is not None and row[1] == EXPIRED, row
    db.commit()
    return int(row[0]), strategy


@pytest.mark.parametrize("how", ["pg-ttl run", "CALL ttl.run()"])
def test_key_windows_grow_toward_the_databases_target(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                      how: str) -> None:
    _table(db, index=True)
    tiny, strategy = _pass(db, dsn, connect, how, TINY)
    huge, _ = _pass(db, dsn, connect, how, HUGE)
    assert strategy in (None, "index")
    # a microsecond: every window at delete_batch_size (100 rows); a minute: fourfold a window
    assert tiny == EXPIRED // 100 and huge <= 6, (tiny, huge)


@pytest.mark.parametrize("how", ["pg-ttl run", "CALL ttl.run()"])
def test_block_ranges_are_grouped_by_the_databases_target(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                          how: str) -> None:
    _table(db, index=False)
    tiny, strategy = _pass(db, dsn, connect, how, TINY)
    huge, _ = _pass(db, dsn, connect, how, HUGE)
    assert strategy in (None, "ctid")
    # a microsecond: each range of ~100 expired rows its own transaction; a minute: one
    # transaction per select batch (pg-ttl run) or for the whole unit (CALL ttl.run())
    assert tiny >= 3 * huge and huge <= 3, (tiny, huge)


def test_a_shared_sweeps_deletes_are_sized_by_the_databases_target(db: psycopg.Connection[Any], dsn: str,
                                                                    connect: Any) -> None:
    _table(db, index=False, range_bytes="64kB")  # ranges of 8 blocks, the table ~100 blocks
    tiny, strategy = _pass(db, dsn, connect, "pg-ttl run", TINY)
    huge, _ = _pass(db, dsn, connect, "pg-ttl run", HUGE)
    assert strategy == "ranges"
    # a microsecond: a block a DELETE; a minute: each range's DELETEs growing fourfold
    assert tiny >= 3 * huge, (tiny, huge)
