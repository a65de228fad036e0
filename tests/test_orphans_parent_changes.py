"""Orphan collection while the parent changes under a pass: a parent reloaded (TRUNCATE and
INSERT) while a range's DELETE waits for it, row security enabled on it mid-pass."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire
from pg_ttl.expire.context import NullProgress
from tests.helpers import ENGINE_SESSIONS

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.commit()
    db.autocommit = True
    return db


def _wait_for_range_lock_wait(conn: Conn, seconds: float = 30) -> None:
    """Until the engine waits on a lock in a range's transaction (its DELETE, or any statement
    it would run first to take its locks), not in an estimate or a catalog read."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        row = conn.execute(ENGINE_SESSIONS + " AND wait_event_type = 'Lock' AND backend_xid IS NULL"
                           " AND (query LIKE 'DELETE%' OR query LIKE 'LOCK%')").fetchone()
        if row and row[0]:
            return
        time.sleep(0.02)
    raise AssertionError("the engine never waited in a range's transaction")


class _Once(NullProgress):
    """Runs ``action`` after the pass's first DELETE (between two of its statements)."""

    def __init__(self, action: Any) -> None:
        self.action, self.done = action, False

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        if not self.done:
            self.done = True
            self.action()


def test_a_parent_reloaded_by_truncate_while_the_delete_waits_takes_no_child(conn: Conn, dsn: str,
                                                                             connect: Any) -> None:
    """An application refreshes the parent the common way (BEGIN; TRUNCATE p; INSERT; COMMIT)
    while a range's transaction waits for its lock on p: the parents are locked before the
    transaction's (REPEATABLE READ) snapshot is taken, so it sees the reloaded parent, not an
    empty one (TRUNCATE is not MVCC-safe), and the children of existing parents stay."""
    conn.execute("UPDATE ttl.settings SET value = '30s' WHERE name = 'row_lock_timeout'")
    conn.execute("CREATE TABLE p (k text PRIMARY KEY)")
    conn.execute("CREATE TABLE c (k text, at timestamptz)")
    conn.execute("INSERT INTO p VALUES ('a'), ('b')")
    conn.execute("INSERT INTO c VALUES ('a', now() - interval '1 day'), ('b', now() - interval '1 day'),"
                 " ('gone', now() - interval '1 day')")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', age_column => 'at')")
    app = connect(autocommit=False)
    app.execute("TRUNCATE p")
    app.execute("INSERT INTO p VALUES ('a'), ('b')")  # the same parents, reloaded
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(expire(dsn, ["c"])))
    t.start()
    try:
        _wait_for_range_lock_wait(conn)
    finally:
        app.commit()
        t.join(60)
    assert conn.execute("SELECT k FROM p ORDER BY k").fetchall() == [("a",), ("b",)]
    assert sorted(r[0] for r in conn.execute("SELECT k FROM c")) == ["a", "b"], \
        "children of parents that exist were deleted"


def test_row_security_enabled_on_the_parent_during_a_pass_takes_no_child(conn: Conn, dsn: str,
                                                                          connect: Any) -> None:
    """The parent's owner enables row security (a tenant policy) while a pass sweeps the
    child: every later DELETE checks it (as its lookup would see the parent) and deletes
    nothing, instead of taking every child whose parent the policy hides."""
    conn.execute("CREATE ROLE orphans_child_owner")
    conn.execute("GRANT USAGE, CREATE ON SCHEMA public TO orphans_child_owner")
    conn.execute("CREATE TABLE p (k text PRIMARY KEY, tenant text)")
    conn.execute("GRANT SELECT ON p TO orphans_child_owner")
    conn.execute("CREATE TABLE c (k text, at timestamptz, pad text)")
    conn.execute("ALTER TABLE c OWNER TO orphans_child_owner")
    conn.execute("INSERT INTO p SELECT 'k' || g, 't1' FROM generate_series(1, 3000) g")
    conn.execute("INSERT INTO c VALUES ('gone', now() - interval '1 day', 'x')")
    conn.execute("INSERT INTO c SELECT 'k' || g, now() - interval '1 day', repeat('x', 50)"
                 " FROM generate_series(1, 3000) g")
    conn.execute("VACUUM ANALYZE c")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', age_column => 'at', range_bytes => 8192,"
                 " delete_batch_size => 1)")
    other = connect(autocommit=False)

    def secure() -> None:
        other.execute("ALTER TABLE p ENABLE ROW LEVEL SECURITY")
        other.execute("CREATE POLICY mine ON p USING (tenant = current_setting('app.tenant', true))")
        other.commit()

    expire(dsn, ["c"], progress=_Once(secure))
    assert conn.execute("SELECT count(*) FROM c WHERE k LIKE 'k%'").fetchone() == (3000,), \
        "children of parents that exist were deleted"
