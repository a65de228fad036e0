"""Orphan collection against what a real schema holds and what happens to it during a pass:
varchar and multi-column keys with NULLs, a case-insensitive unique index, row security on
the parent (from the start or enabled mid-pass), a child moved to a new parent while the
DELETE waits on it, a parent dropped and recreated, or reloaded (TRUNCATE and INSERT); and
children following their parents in the same round when another worker swept them first."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire
from tests.helpers import ENGINE_SESSIONS, AfterFirstBatch, StopAfter, wait_for_engine_lock_wait

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.commit()
    db.autocommit = True
    return db


def test_varchar_keys_are_accepted_and_their_orphans_deleted(conn: Conn, dsn: str) -> None:
    """A varchar key in child and parent: the lookup uses the index's operator (text = text, its
    opclass's), so the orphans go; no run fails for want of a varchar operator."""
    conn.execute("CREATE TABLE p (k varchar(40) PRIMARY KEY)")
    conn.execute("CREATE TABLE c (k varchar(40), at timestamptz)")
    conn.execute("INSERT INTO p VALUES ('a')")
    conn.execute("INSERT INTO c VALUES ('a', now() - interval '1 day'), ('gone', now() - interval '1 day')")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', age_column => 'at')")
    [res] = expire(dsn, ["c"])
    assert res.status == "ok", res
    assert conn.execute("SELECT k FROM c").fetchall() == [("a",)]


def test_a_case_insensitive_unique_index_on_the_parent_is_used_as_it_compares(conn: Conn, dsn: str) -> None:
    """The parent's unique index compares its key case-insensitively (COLLATE a nondeterministic
    collation on a column of the default one): the lookup compares as that index does, so
    it uses the index (never a scan of the parent per child) and the child 'abc' of the
    parent 'ABC' stays."""
    conn.execute("CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)")
    conn.execute("CREATE TABLE p (k text)")
    conn.execute("CREATE UNIQUE INDEX p_k ON p (k COLLATE ci)")
    conn.execute("CREATE TABLE c (k text, at timestamptz)")
    conn.execute("INSERT INTO p VALUES ('ABC')")
    conn.execute("INSERT INTO c VALUES ('abc', now() - interval '1 day'), ('gone', now() - interval '1 day')")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', age_column => 'at')")
    cond = conn.execute("SELECT ttl.orphans_sql('c'::regclass, now())").fetchone()[0]
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN SELECT 1 FROM c WHERE " + cond).fetchall())
    expire(dsn, ["c"])
    assert conn.execute("SELECT k FROM c").fetchall() == [("abc",)]
    assert "Seq Scan on p" not in plan, plan


def test_row_security_on_the_parent_hides_no_parent(conn: Conn, dsn: str) -> None:
    """The parent has row security that shows a session its tenant's rows only, and the
    child's owner may read it: a lookup as the child's owner would see no parent and take
    every child, so the policy's runs refuse (nothing deleted) with the reason."""
    conn.execute("CREATE ROLE app_owner")
    conn.execute("GRANT USAGE, CREATE ON SCHEMA public TO app_owner")
    conn.execute("CREATE TABLE p (k text PRIMARY KEY, tenant text)")
    conn.execute("ALTER TABLE p ENABLE ROW LEVEL SECURITY")
    conn.execute("CREATE POLICY mine ON p USING (tenant = current_setting('app.tenant', true))")
    conn.execute("GRANT SELECT ON p TO app_owner")
    conn.execute("CREATE TABLE c (k text, at timestamptz)")
    conn.execute("ALTER TABLE c OWNER TO app_owner")
    conn.execute("INSERT INTO p VALUES ('a', 't1'), ('b', 't2')")
    conn.execute("INSERT INTO c VALUES ('a', now() - interval '1 day'), ('b', now() - interval '1 day'),"
                 " ('gone', now() - interval '1 day')")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', age_column => 'at')")
    expire(dsn, ["c"])
    left = {r[0] for r in conn.execute("SELECT k FROM c").fetchall()}
    assert {"a", "b"} <= left, left


def test_a_multi_column_key_with_a_null_is_no_orphan(conn: Conn, dsn: str) -> None:
    """A child whose key has a NULL column refers to no parent (as a foreign key, MATCH
    SIMPLE): it is never an orphan (NULL = NULL is never true)."""
    conn.execute("CREATE TABLE p (a int, b int, UNIQUE (a, b))")
    conn.execute("CREATE TABLE c (a int, b int, at timestamptz)")
    conn.execute("INSERT INTO p VALUES (1, NULL), (2, 2)")
    conn.execute("INSERT INTO c VALUES (1, NULL, now() - interval '1 day'), (2, 2, now() - interval '1 day'),"
                 " (3, 3, now() - interval '1 day')")
    conn.execute("SELECT ttl.enable_orphans('c', '{a, b}', 'p', age_column => 'at')")
    expire(dsn, ["c"])
    assert sorted(conn.execute("SELECT a, b FROM c").fetchall()) == [(1, None), (2, 2)]


def test_a_child_moved_to_a_new_parent_while_the_delete_waits_on_it(conn: Conn, dsn: str, connect: Any) -> None:
    """An application moves an old child to a parent it creates in the same transaction while
    the pass's DELETE waits on that child's row: the child stays (its parent was committed
    before it could be deleted; a READ COMMITTED re-check would judge it with the old snapshot)."""
    conn.execute("UPDATE ttl.settings SET value = '30s' WHERE name = 'row_lock_timeout'")
    conn.execute("CREATE TABLE p (k text PRIMARY KEY)")
    conn.execute("CREATE TABLE c (k text, at timestamptz)")
    conn.execute("INSERT INTO c VALUES ('old', now() - interval '1 day')")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', age_column => 'at')")
    app = connect(autocommit=False)
    app.execute("INSERT INTO p VALUES ('new')")
    app.execute("UPDATE c SET k = 'new' WHERE k = 'old'")
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(expire(dsn, ["c"])))
    t.start()
    try:
        wait_for_engine_lock_wait(conn, "DELETE")
    finally:
        app.commit()
        t.join(60)
    assert conn.execute("SELECT k FROM c").fetchall() == [("new",)]


def test_a_parent_dropped_and_recreated_during_a_pass_takes_no_child(conn: Conn, dsn: str, connect: Any) -> None:
    """A parent dropped and recreated (empty) while a pass sweeps the child: the pass takes
    none of the old parent's children (its condition checks the parent is still the same
    table, not a new one of the same name)."""
    conn.execute("CREATE TABLE p (k text PRIMARY KEY)")
    conn.execute("CREATE TABLE c (k text, at timestamptz, pad text)")
    conn.execute("INSERT INTO p SELECT 'k' || g FROM generate_series(1, 3000) g")
    conn.execute("INSERT INTO c SELECT 'k' || g, now() - interval '1 day', repeat('x', 50)"
                 " FROM generate_series(1, 3000) g")
    conn.execute("INSERT INTO c VALUES ('gone', now() - interval '1 day', 'x')")
    conn.execute("VACUUM ANALYZE c")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', age_column => 'at', range_bytes => 8192,"
                 " delete_batch_size => 1)")
    other = connect()

    def recreate() -> None:
        other.execute("DROP TABLE p")
        other.execute("CREATE TABLE p (k text PRIMARY KEY)")

    expire(dsn, ["c"], progress=AfterFirstBatch(recreate))
    assert conn.execute("SELECT count(*) FROM ttl.orphan_policy").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM c WHERE k LIKE 'k%'").fetchone() == (3000,)


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

    expire(dsn, ["c"], progress=AfterFirstBatch(secure))
    assert conn.execute("SELECT count(*) FROM c WHERE k LIKE 'k%'").fetchone() == (3000,), \
        "children of parents that exist were deleted"


def test_a_parents_run_is_followed_by_its_childs_orphans_after_the_childs_own_sweep(conn: Conn,
                                                                                      dsn: str) -> None:
    """Two workers: one starts the parent's round (cutoff T1); the other starts the child's
    own round a moment later (T2 > T1) and finishes a sweep of the child before the parent's
    rows are gone; then the first expires the parent's rows and runs the child's orphan
    policy after them. That sweep began before those rows went: it does not count as this
    round's for the run that follows them, which sweeps again and deletes the new orphan in
    the same round (not at the child's next schedule). Replayed in that order, with the
    cutoffs the workers would give."""
    conn.execute("CREATE TABLE p (k text PRIMARY KEY, at timestamptz)")
    conn.execute("CREATE TABLE c (k text, at timestamptz)")
    conn.execute("INSERT INTO p VALUES ('old', now() - interval '60 days'), ('new', now())")
    conn.execute("INSERT INTO c VALUES ('old', now() - interval '60 days'), ('new', now() - interval '60 days')")
    conn.execute("SELECT ttl.enable('p', expire_after => '30 days', column_name => 'at')")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', min_age => '1 hour', age_column => 'at')")
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    parent_round = row[0]  # the parent's round starts (worker 1)
    time.sleep(0.05)
    [own] = expire(dsn, ["c"])  # the child's own round, started after it (worker 2): nothing to delete yet
    assert own.status == "ok" and own.orphans_deleted == 0
    results = expire(dsn, ["p"], cutoff=parent_round)  # worker 1 expires the parent; its children follow
    assert results[0].rows_deleted == 1
    assert conn.execute("SELECT k FROM p").fetchall() == [("new",)]
    assert sorted(r[0] for r in conn.execute("SELECT k FROM c")) == ["new"], \
        "the orphan of the parent the run expired was left until the child's next schedule"


def test_a_parents_run_is_followed_by_a_new_sweep_when_the_childs_own_is_unfinished(conn: Conn,
                                                                                    dsn: str) -> None:
    """As above, but the child's own sweep (one block a range) stopped after its first range:
    it is unfinished when the parent's rows go. The run that follows them does not join it
    (its first range, done before, would keep the new orphan there until the child's next
    schedule): it begins a sweep of its own, which deletes that orphan in the same round."""
    conn.execute("CREATE TABLE p (k text PRIMARY KEY, at timestamptz)")
    conn.execute("CREATE TABLE c (k text, at timestamptz, pad text)")
    conn.execute("INSERT INTO p VALUES ('old', now() - interval '60 days'), ('new', now())")
    conn.execute("INSERT INTO c VALUES ('old', now() - interval '60 days', 'x')")  # block 0
    conn.execute("INSERT INTO c SELECT 'new', now() - interval '60 days', repeat('x', 200)"
                 " FROM generate_series(1, 200)")
    conn.execute("SELECT ttl.enable('p', expire_after => '30 days', column_name => 'at')")
    conn.execute("SELECT ttl.enable_orphans('c', '{k}', 'p', min_age => '1 hour', age_column => 'at',"
                 " range_bytes => 8192)")
    row = conn.execute("SELECT now(), pg_relation_size('c') / 8192").fetchone()
    assert row is not None and row[1] >= 3
    parent_round = row[0]
    time.sleep(0.05)
    stop = threading.Event()
    [own] = expire(dsn, ["c"], stop=stop, progress=StopAfter(stop, 1))  # the child's own round, stopped
    assert own.status == "partial" and own.orphans_deleted == 0
    ranges = conn.execute("SELECT range_no, status FROM ttl.block_range ORDER BY range_no").fetchall()
    assert ranges == [(0, "ok")], ranges  # its sweep unfinished, range 0 (the 'old' child's block) done
    results = expire(dsn, ["p"], cutoff=parent_round)
    assert results[0].rows_deleted == 1
    assert [r.orphans_deleted for r in results if r.table.endswith("c")] == [1]
    assert conn.execute("SELECT count(*) FROM c WHERE k = 'old'").fetchone() == (0,), \
        "the orphan of the parent the run expired was left until the child's next schedule"
    sweeps = conn.execute("SELECT count(DISTINCT sweep) FROM ttl.block_range").fetchone()
    assert sweeps == (2,)
