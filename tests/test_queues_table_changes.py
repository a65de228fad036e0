"""Expiration queues under ALTER TABLE (a key column renamed, the table moved to another
schema or given to another owner), a DEFERRABLE key, and rows moved between partitions
onto a key another row left."""

from __future__ import annotations

from typing import Any

import psycopg

from pg_ttl.expire import expire


def _table(db: psycopg.Connection[Any], ddl: str = "CREATE TABLE t (id int PRIMARY KEY, v timestamptz,"
           " n int NOT NULL DEFAULT 0)", name: str = "t") -> None:
    db.execute(ddl)
    db.execute("SELECT ttl.enable(%s, expire_after => '1 day', column_name => 'v')", (name,))
    db.execute("SELECT ttl.set_option(%s, 'queue_shards', '2')", (name,))
    db.execute("SELECT ttl.queue_backfill(%s)", (name,))
    db.commit()


def _verify(db: psycopg.Connection[Any], name: str = "t") -> tuple[int, int]:
    row = db.execute("SELECT missing, late FROM ttl.queue_verify(%s)", (name,)).fetchone()
    db.commit()
    assert row is not None
    return int(row[0]), int(row[1])


def test_renaming_a_key_column_keeps_the_table_writable(db: psycopg.Connection[Any]) -> None:
    """ALTER TABLE ... RENAME COLUMN of the key column: the trigger functions are written anew,
    and INSERT, DELETE and UPDATE of the table keep working with the queue exact."""
    _table(db)
    db.execute("INSERT INTO t VALUES (1, now()), (2, now())")
    db.execute("ALTER TABLE t RENAME COLUMN id TO ident")
    db.commit()
    db.execute("INSERT INTO t VALUES (3, '2020-01-01')")
    db.execute("DELETE FROM t WHERE ident = 2")
    db.execute("UPDATE t SET v = '2020-01-01' WHERE ident = 1")
    db.commit()
    assert _verify(db) == (0, 0)


def test_moving_the_table_to_another_schema_keeps_updates_working(db: psycopg.Connection[Any]) -> None:
    """ALTER TABLE ... SET SCHEMA: the trigger functions follow the table to its new schema
    (no 'relation "public.t" does not exist' on UPDATEs that move an expiry earlier)."""
    _table(db)
    db.execute("INSERT INTO t VALUES (1, now())")
    db.execute("CREATE SCHEMA s2")
    db.execute("ALTER TABLE t SET SCHEMA s2")
    db.commit()
    db.execute("UPDATE s2.t SET v = '2020-01-01' WHERE id = 1")
    db.execute("UPDATE s2.t SET id = 2 WHERE id = 1")
    db.commit()
    assert _verify(db, "s2.t") == (0, 0)


def test_a_new_table_owner_keeps_the_queue_working(db: psycopg.Connection[Any], dsn: str) -> None:
    """ALTER TABLE ... OWNER TO: the queue tables and the trigger functions follow the new
    owner, so the application's UPDATEs and the passes (run as the new owner) keep working."""
    db.autocommit = True
    db.execute("CREATE ROLE rq_a LOGIN")
    db.execute("CREATE ROLE rq_b LOGIN")
    db.execute("GRANT CREATE, USAGE ON SCHEMA public TO rq_a, rq_b")
    try:
        with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="rq_a"), autocommit=True) as a:
            a.execute("CREATE TABLE public.items (id int PRIMARY KEY, v timestamptz)")
            a.execute("SELECT ttl.enable('public.items', expire_after => '1 day', column_name => 'v')")
            a.execute("SELECT ttl.set_option('public.items', 'queue_shards', '2')")
            a.execute("SELECT ttl.queue_backfill('public.items')")
            a.execute("INSERT INTO items VALUES (1, '2020-01-01'), (2, now())")
        db.execute("ALTER TABLE public.items OWNER TO rq_b")
        with psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="rq_b"), autocommit=True) as b:
            b.execute("UPDATE items SET v = '2020-01-01' WHERE id = 2")  # earlier: the row trigger fires
        [res] = expire(dsn, ["items"])
        assert res.status == "ok", res.error
        assert db.execute("SELECT count(*) FROM items").fetchone() == (0,)
    finally:
        db.execute("DROP OWNED BY rq_a, rq_b CASCADE")
        db.execute("DROP ROLE rq_a, rq_b")


def test_a_deferrable_key_cannot_lose_a_rows_entry(db: psycopg.Connection[Any]) -> None:
    """A DEFERRABLE key may name two rows inside a transaction (a second row's INSERT would
    share the first's entry, the first's DELETE remove it): such a key is not one a queue
    can be kept by."""
    try:
        _table(db, "CREATE TABLE t (id int, v timestamptz, n int NOT NULL DEFAULT 0,"
                   " PRIMARY KEY (id) DEFERRABLE INITIALLY DEFERRED)")
    except psycopg.errors.InvalidTableDefinition:
        return  # refused: fine
    db.execute("INSERT INTO t VALUES (1, '2020-01-01', 0)")
    db.commit()
    db.execute("INSERT INTO t VALUES (1, '2020-01-01', 1)")  # the new version of row 1
    db.execute("DELETE FROM t WHERE n = 0")  # the old one goes: the key is unique again at commit
    db.commit()
    assert _verify(db) == (0, 0)


def test_a_move_to_another_partition_onto_a_freed_key_leaves_no_row_late(db: psycopg.Connection[Any]) -> None:
    """One UPDATE moves rows between partitions (no row trigger fires), one row onto the key
    another just left: the row that now has the key gets an entry at its own expiry, not
    only the old row's later one (queue_verify: nothing late)."""
    db.execute("CREATE TABLE pt (id int, region int, v timestamptz, PRIMARY KEY (id, region))"
               " PARTITION BY LIST (region)")
    db.execute("CREATE TABLE pt_1 PARTITION OF pt FOR VALUES IN (1)")
    db.execute("CREATE TABLE pt_2 PARTITION OF pt FOR VALUES IN (2)")
    _table(db, "SELECT", "pt")
    db.execute("INSERT INTO pt VALUES (1, 1, '2100-01-01'), (2, 2, '2020-01-01')")
    db.commit()
    db.execute("UPDATE pt SET id = 1, region = CASE region WHEN 1 THEN 2 ELSE 1 END")
    db.commit()
    assert db.execute("SELECT id, region, v < '2021-01-01' FROM pt ORDER BY 2").fetchall() == [(1, 1, True),
                                                                                               (1, 2, False)]
    assert _verify(db, "pt") == (0, 0)
