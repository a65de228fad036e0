"""Expiration queues ("ttl_queue_shards", sql/78_queues.sql, pg_ttl/expire/queues.py):
under every kind of write each row with an expiry keeps an entry at or before it
(early, never late), a pass reads only what expired, never deletes a row early,
moves early entries, resumes where it stopped, re-checks every entry against its
row, partitioned tables included, and the queue's code runs as the table's owner."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pg_ttl.expire import expire


def _queue(db: psycopg.Connection[Any], table: str = "t") -> set[tuple[int, datetime]]:
    """The queue's entries as (key, expiry), all shards."""
    name = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue WHERE relid = %s::regclass",
                      (table,)).fetchone()
    assert name is not None
    return {(int(k), e) for k, e in db.execute(f"SELECT k1, expires_at FROM {name[0]}").fetchall()}


def _expected(db: psycopg.Connection[Any]) -> set[tuple[int, datetime]]:
    """Each row's expiry, computed here independently of pg_ttl: v + 1 day, NULL never."""
    return {(int(k), e) for k, e in db.execute(
        "SELECT id, v + interval '1 day' FROM t WHERE v IS NOT NULL").fetchall()}


def _first_entries(db: psycopg.Connection[Any], table: str = "t") -> dict[int, datetime]:
    """Each key's earliest entry."""
    first: dict[int, datetime] = {}
    for k, e in _queue(db, table):
        first[k] = min(e, first.get(k, e))
    return first


def _assert_no_row_late(db: psycopg.Connection[Any], table: str = "t") -> None:
    """The queue's invariant: every row with an expiry has an entry at or before it
    (computed here from the rows themselves), and queue_verify agrees."""
    first = _first_entries(db, table)
    late = [(k, e, first.get(k)) for k, e in db.execute(
        f"SELECT id, v + interval '1 day' FROM {table} WHERE v IS NOT NULL").fetchall()
        if k not in first or first[k] > e]
    assert late == []
    assert db.execute("SELECT missing, late FROM ttl.queue_verify(%s)", (table,)).fetchone() == (0, 0)


def _table(db: psycopg.Connection[Any], rows: int, expired_every: int, shards: int = 4) -> None:
    """`rows` rows; every `expired_every`-th expired a year ago, the rest live for a year."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, n int NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO t SELECT g, CASE WHEN g %% %s = 0 THEN now() - interval '1 year'"
               " ELSE now() + interval '1 year' END FROM generate_series(1, %s) g", (expired_every, rows))
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")
    db.execute("SELECT ttl.set_option('t', 'queue_shards', %s)", (str(shards),))
    db.commit()


OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.integers(1, 40), st.sampled_from(["-3 days", "2 days", None])),
    st.tuples(st.just("expiry"), st.integers(1, 40), st.sampled_from(["-1 day", "-2 days", "5 days", None])),
    st.tuples(st.just("later"), st.integers(0, 2), st.sampled_from(["1 hour", "3 days"])),
    st.tuples(st.just("earlier"), st.integers(0, 2), st.sampled_from(["1 hour", "3 days"])),
    st.tuples(st.just("other"), st.integers(1, 40), st.none()),
    st.tuples(st.just("key"), st.integers(1, 40), st.integers(41, 80)),
    st.tuples(st.just("delete"), st.integers(1, 40), st.none()),
    st.tuples(st.just("bulk"), st.integers(1, 40), st.none()),
    st.tuples(st.just("copy"), st.integers(100, 120), st.none()),
    st.tuples(st.just("truncate"), st.none(), st.none()),
    st.tuples(st.just("drain"), st.none(), st.none()),
), min_size=1, max_size=12)


def _write(db: psycopg.Connection[Any], op: str, a: Any, b: Any) -> None:
    """One generated write."""
    if op == "insert":
        db.execute("INSERT INTO t VALUES (%s + 1000, now() + %s::interval) ON CONFLICT DO NOTHING", (a, b))
    elif op == "expiry":
        db.execute("UPDATE t SET v = now() + %s::interval WHERE id = %s", (b, a))
    elif op == "later":  # the usual refresh: no trigger fires, the entries stay early
        db.execute("UPDATE t SET v = v + %s::interval WHERE id %% 3 = %s", (b, a))
    elif op == "earlier":
        db.execute("UPDATE t SET v = v - %s::interval WHERE id %% 3 = %s", (b, a))
    elif op == "other":
        db.execute("UPDATE t SET n = n + 1 WHERE id >= %s", (a,))  # expiry unchanged: nothing to do
    elif op == "key":
        db.execute("UPDATE t SET id = id + 1000 WHERE id BETWEEN %s AND %s", (a, b))
    elif op == "delete":
        db.execute("DELETE FROM t WHERE id %% 7 = %s %% 7", (a,))
    elif op == "bulk":
        db.execute("INSERT INTO t SELECT g + 5000, now() + g * interval '1 hour' FROM generate_series(1, %s) g"
                   " ON CONFLICT DO NOTHING", (a,))
    elif op == "copy":
        with db.cursor().copy("COPY t (id, v) FROM STDIN") as copy:
            for i in range(a, a + 5):
                copy.write_row((i + 9000, "2020-01-01"))
    else:
        db.execute("TRUNCATE t")


def _drain(db: psycopg.Connection[Any], dsn: str) -> None:
    """One pass at a cutoff taken now: it deletes exactly the rows expired at the cutoff
    (never one before its expiry, none left behind), and the queue keeps its invariant."""
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    cutoff = row[0]
    before = dict(db.execute("SELECT id, v + interval '1 day' FROM t").fetchall())
    db.commit()
    [res] = expire(dsn, ["t"], cutoff=cutoff)
    assert res.status == "ok", res
    after = {int(k) for (k,) in db.execute("SELECT id FROM t").fetchall()}
    deleted = {k: e for k, e in before.items() if k not in after}
    assert all(e is not None and e <= cutoff for e in deleted.values()), deleted  # never early
    assert {k for k, e in before.items() if e is not None and e <= cutoff} == set(deleted)  # none left


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS)
def test_every_row_keeps_an_entry_at_or_before_its_expiry_whatever_the_writes(
        db: psycopg.Connection[Any], dsn: str, ops: list[tuple[Any, Any, Any]]) -> None:
    db.rollback()
    db.execute("DROP TABLE IF EXISTS t")
    _table(db, 30, 3)
    db.execute("SELECT ttl.queue_backfill('t')")
    db.commit()
    assert _queue(db) == _expected(db)
    for op, a, b in ops:
        if op == "drain":
            _drain(db, dsn)
        else:
            try:
                _write(db, op, a, b)
            except psycopg.errors.UniqueViolation:
                db.rollback()  # a generated key already taken: the queue must be untouched too
        db.commit()
        _assert_no_row_late(db)
        db.commit()
    db.execute("DROP TABLE t")
    db.commit()


def test_an_update_that_makes_the_expiry_later_runs_no_trigger_and_a_pass_moves_its_entry(
        db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 1000, 10)  # 100 expired
    db.execute("SELECT ttl.queue_backfill('t')")
    db.execute("SET track_functions = 'pl'")
    db.commit()
    entries = _queue(db)
    calls = "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname LIKE 'queue\\_%%\\_move'"

    def trigger_calls() -> int:
        db.execute("SELECT pg_stat_force_next_flush()")
        db.commit()
        row = db.execute(calls).fetchone()
        db.commit()
        assert row is not None
        return int(row[0])

    before = trigger_calls()
    db.execute("UPDATE t SET v = v + interval '1 hour' WHERE id <= 500")  # later: the entries stay
    db.execute("UPDATE t SET v = now() WHERE id % 10 = 0 AND id <= 500")  # 50 expired rows live again: later too
    db.execute("UPDATE t SET n = n + 1")  # another column
    db.commit()
    assert trigger_calls() == before  # the trigger's function never ran
    assert _queue(db) == entries  # the entries stayed where they were: early now
    _assert_no_row_late(db)
    db.execute("UPDATE t SET v = v - interval '2 hours' WHERE id BETWEEN 501 AND 510")  # earlier: moved at once
    db.commit()
    assert trigger_calls() == before + 10
    _assert_no_row_late(db)
    # a pass deletes the 50 rows still expired, and moves the entries of the 50 live again to their expiry
    [res] = expire(dsn, ["t"])
    assert res.status == "ok" and res.rows_deleted == 50
    assert db.execute("SELECT count(*) FROM t").fetchone() == (950,)
    revived = {(k, e) for k, e in _expected(db) if k % 10 == 0 and k <= 500}
    assert len(revived) == 50 and {(k, e) for k, e in _queue(db) if k % 10 == 0 and k <= 500} == revived
    _assert_no_row_late(db)


def test_a_key_inserted_again_where_its_old_entry_was_left_is_no_error(db: psycopg.Connection[Any]) -> None:
    _table(db, 10, 100)
    db.execute("SELECT ttl.queue_backfill('t')")
    db.execute("UPDATE t SET v = '2026-01-01' WHERE id = 1")  # earlier: moved there
    db.execute("UPDATE t SET v = '2026-02-01' WHERE id = 1")  # later: the entry stays at 2026-01-02
    db.execute("DELETE FROM t WHERE id = 1")  # removes no entry: the one at 2026-01-02 stays
    db.commit()
    assert db.execute("SELECT extra FROM ttl.queue_verify('t')").fetchone() == (1,)
    # rows 1 and 11: 1's entry is there already; both in one statement, then alone
    db.execute("INSERT INTO t SELECT g, '2026-01-01' FROM unnest(ARRAY[1, 11]) g")
    db.commit()
    assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('t')").fetchone() == (0, 0, 0)
    db.execute("DELETE FROM t WHERE id = 1")
    db.execute("INSERT INTO t SELECT 1, '2026-01-01'")
    db.commit()
    _assert_no_row_late(db)


def test_a_row_inserted_while_a_pass_removes_the_entry_it_found_keeps_an_entry(
        db: psycopg.Connection[Any], connect: Any) -> None:
    """A key's entry left behind (its row gone) at the very expiry of a row inserted again: the
    INSERT keeps that entry (locked), a pass removing it at the same time waits, then sees
    the row and gives it its entry again."""
    from psycopg.types.json import Jsonb

    _table(db, 10, 100, shards=1)
    db.execute("SELECT ttl.queue_backfill('t')")
    db.execute("UPDATE t SET v = '2026-01-01' WHERE id = 1")  # earlier: its entry at 2026-01-02
    db.execute("UPDATE t SET v = '2026-02-01' WHERE id = 1")  # later: stays there
    db.execute("DELETE FROM t WHERE id = 1")  # the entry at 2026-01-02 stays, its row gone
    db.commit()
    app = connect(autocommit=False)
    app.execute("INSERT INTO t VALUES (1, '2026-01-01')")  # finds that entry there: keeps it, locked
    queries = db.execute("SELECT drain, repair, recheck FROM ttl.queue_drain_sql('t'::regclass, now())").fetchone()
    assert queries is not None
    db.commit()
    done: list[Any] = []

    def drain() -> None:  # what a pass does with that entry (pg_ttl/expire/queues.py)
        with connect(autocommit=False) as conn:
            cur = psycopg.RawCursor(conn)
            got = cur.execute(queries[0], (None, 100, 0, None, None)).fetchone()  # shard 0, no run to count in
            assert got is not None and (got[0], got[1]) == (1, 0)  # the entry read, no row deleted
            repaired = cur.execute(queries[1], (None, Jsonb(got[2]), 0)).fetchone()  # waits for the INSERT
            assert repaired is not None
            done.append(repaired[0])
            if repaired[1] is not None:
                cur.execute(queries[2], (Jsonb(repaired[1]), 0))
            conn.commit()

    th = threading.Thread(target=drain)
    th.start()
    th.join(1.0)
    assert th.is_alive() and not done  # the pass waits for the application's transaction
    app.commit()
    th.join(30)
    assert done == [1]  # it removed the entry, as its row was gone when it looked...
    _assert_no_row_late(db)  # ...and gave the row inserted meanwhile its entry again


def test_a_pass_moves_early_entries_while_the_application_moves_expiries(
        db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    import random

    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, n int NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO t SELECT g, now() - interval '3 days' FROM generate_series(1, 4000) g")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")
    db.execute("SELECT ttl.set_option('t', 'queue_shards', '2')")
    db.execute("SELECT ttl.set_option('t', 'delete_batch_size', '50')")
    db.execute("SELECT ttl.queue_backfill('t')")
    # odd rows live for a year: a later expiry, no trigger; their entries are early and due
    db.execute("UPDATE t SET v = now() + interval '1 year' WHERE id % 2 = 1")
    db.commit()
    stop = threading.Event()
    moved = [0]

    def application() -> None:
        app = connect(autocommit=True)
        rnd = random.Random(7)
        while not stop.is_set():  # odd rows: expiries moved later and earlier, never into the past
            days = rnd.choice([2, 30, 400, 800])
            app.execute("UPDATE t SET v = now() + %s * interval '1 day' WHERE id = %s",
                        (days, rnd.randrange(1, 4000, 2)))
            moved[0] += 1

    threads = [threading.Thread(target=application) for _ in range(2)]
    for th in threads:
        th.start()
    try:
        results = [r for _ in range(3) for r in expire(dsn, ["t"])]
    finally:
        stop.set()
        for th in threads:
            th.join(30)
    assert moved[0] > 100 and all(r.status == "ok" for r in results)
    assert db.execute("SELECT count(*) FROM t WHERE id % 2 = 1").fetchone() == (2000,)  # none early
    assert db.execute("SELECT count(*) FROM t WHERE id % 2 = 0").fetchone() == (0,)  # all expired ones
    _assert_no_row_late(db)
    # the early entries that were due were moved: none of the live rows has one due now
    row = db.execute("SELECT now()").fetchone()
    assert row is not None and min(_first_entries(db).values()) > row[0]


def _queue_triggers(db: psycopg.Connection[Any]) -> dict[str, list[str]]:
    """Each table's triggers of the queue (their clones on partitions included)."""
    out: dict[str, list[str]] = {}
    for rel, name in db.execute("SELECT tgrelid::regclass::text, tgname FROM pg_trigger"
                                " WHERE tgname LIKE 'ttl\\_queue\\_%%' ORDER BY 1, 2").fetchall():
        out.setdefault(rel, []).append(name)
    return out


def test_a_partitioned_tables_queue_follows_writes_through_it_and_into_its_partitions(
        db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE pt (id int, region int, v timestamptz, n int NOT NULL DEFAULT 0,"
               " PRIMARY KEY (id, region)) PARTITION BY LIST (region)")
    db.execute("CREATE TABLE pt_1 PARTITION OF pt FOR VALUES IN (1)")
    db.execute("CREATE TABLE pt_2 PARTITION OF pt FOR VALUES IN (2)")
    db.execute("INSERT INTO pt SELECT g, 1 + g % 2, CASE WHEN g % 5 = 0 THEN now() - interval '1 year'"
               " ELSE now() + interval '1 year' END FROM generate_series(1, 100) g")
    db.execute("SELECT ttl.enable('pt', expire_after => '1 day', column_name => 'v')")
    db.execute("SELECT ttl.set_option('pt', 'queue_shards', '3')")
    db.execute("SELECT ttl.queue_backfill('pt')")
    db.commit()
    assert _queue(db, "pt") == {(k, e) for k, e in db.execute(
        "SELECT id, v + interval '1 day' FROM pt").fetchall()}
    assert _queue_triggers(db) == {
        "pt": ["ttl_queue_delete", "ttl_queue_insert", "ttl_queue_moves", "ttl_queue_truncate", "ttl_queue_update"],
        "pt_1": ["ttl_queue_delete", "ttl_queue_insert", "ttl_queue_update"],
        "pt_2": ["ttl_queue_delete", "ttl_queue_insert", "ttl_queue_update"]}
    # writes through the partitioned table and directly into its partitions
    db.execute("INSERT INTO pt VALUES (101, 1, now() - interval '1 year'), (102, 2, now())")
    db.execute("INSERT INTO pt_1 VALUES (103, 1, now() - interval '1 year'), (104, 1, now())")
    with db.cursor().copy("COPY pt_2 (id, region, v) FROM STDIN") as copy:
        copy.write_row((105, 2, "2020-01-01"))
    db.execute("UPDATE pt SET v = v - interval '2 days' WHERE id IN (1, 2)")  # earlier, through pt
    db.execute("UPDATE pt_2 SET v = now() - interval '1 year' WHERE id = 3")  # earlier, in the partition
    db.execute("UPDATE pt_1 SET v = v + interval '1 day' WHERE id IN (6, 8)")  # later: entries stay early
    db.execute("UPDATE pt SET region = 2 WHERE id IN (22, 24)")  # moved from pt_1 to pt_2: new keys
    db.execute("UPDATE pt SET region = 1, v = now() - interval '1 year' WHERE id = 27")  # moved, and expired
    db.execute("DELETE FROM pt_1 WHERE id = 14")
    db.execute("DELETE FROM pt WHERE id IN (16, 17)")
    assert db.execute("SELECT count(*) FROM pt WHERE id IN (1, 2, 3, 6, 8, 14, 16, 17, 22, 24, 27, 101, 102, 103,"
                      " 104, 105)").fetchone() == (13,)
    db.commit()
    _assert_no_row_late(db, "pt")
    assert db.execute("SELECT extra FROM ttl.queue_verify('pt')").fetchone() == (0,)
    # a partition created later: its triggers at once
    db.execute("CREATE TABLE pt_3 PARTITION OF pt FOR VALUES IN (3)")
    db.commit()
    assert _queue_triggers(db)["pt_3"] == ["ttl_queue_delete", "ttl_queue_insert", "ttl_queue_update"]
    assert db.execute("SELECT backfilled FROM ttl.queue").fetchone() == (True,)  # created empty: nothing to fill
    db.execute("INSERT INTO pt_3 VALUES (201, 3, now() - interval '1 year'), (202, 3, now())")
    db.execute("INSERT INTO pt VALUES (203, 3, now() - interval '1 year')")
    db.commit()
    _assert_no_row_late(db, "pt")
    # a table attached with rows: they need entries, the queue is filled again
    db.execute("CREATE TABLE pt_4 (LIKE pt INCLUDING DEFAULTS)")
    db.execute("INSERT INTO pt_4 VALUES (301, 4, now() - interval '1 year'), (302, 4, now())")
    db.execute("ALTER TABLE pt ATTACH PARTITION pt_4 FOR VALUES IN (4)")
    db.commit()
    assert _queue_triggers(db)["pt_4"] == ["ttl_queue_delete", "ttl_queue_insert", "ttl_queue_update"]
    assert db.execute("SELECT backfilled FROM ttl.queue").fetchone() == (False,)
    # a partition detached: its triggers go, its rows' entries are left to the drain
    db.execute("ALTER TABLE pt DETACH PARTITION pt_2")
    db.commit()
    assert "pt_2" not in _queue_triggers(db)
    entries = _queue(db, "pt")
    db.execute("INSERT INTO pt_2 VALUES (401, 2, now() - interval '1 year')")
    db.execute("UPDATE pt_2 SET v = v - interval '1 year'")
    db.commit()
    assert _queue(db, "pt") == entries  # writes to the detached table no longer reach the queue
    expired = {k for (k,) in db.execute("SELECT id FROM pt WHERE v + interval '1 day' <= now()").fetchall()}
    assert {101, 103, 27, 201, 203, 301} <= expired and not {3, 105} & expired  # 3, 105 left with pt_2
    kept = db.execute("SELECT count(*) FROM pt_2").fetchone()
    [res] = expire(dsn, ["pt"])  # fills the queue first (pt_4's rows), then drains it
    assert res.status == "ok" and res.rows_deleted == len(expired)
    assert db.execute("SELECT count(*) FROM pt WHERE v + interval '1 day' <= now()").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM pt_2").fetchone() == kept  # the detached table is not the queue's
    _assert_no_row_late(db, "pt")
    # the entries of pt_2's rows that were due went with the pass (their row is gone from pt)
    assert not {k for k, e in _queue(db, "pt") if k in (3, 105)}
    # a partition dropped, or truncated: its entries are left to the drain; TRUNCATE of the table empties the queue
    db.execute("INSERT INTO pt_3 VALUES (204, 3, now() - interval '1 year')")
    db.execute("DROP TABLE pt_3")
    db.execute("TRUNCATE pt_1")
    db.commit()
    _assert_no_row_late(db, "pt")
    db.execute("TRUNCATE pt")
    db.commit()
    assert _queue(db, "pt") == set()
    db.execute("SELECT ttl.set_option('pt', 'queue_shards', '0')")
    db.commit()
    assert _queue_triggers(db) == {}


def _assert_rows_have_early_entries(db: psycopg.Connection[Any], table: str) -> None:
    """Every row with an expiry (ttl.expires_at: pg_ttl's own reading of it) has an entry at
    or before it, and queue_verify agrees."""
    first = {str(k): e for k, e in _first_entries_by_text_key(db, table).items()}
    rows = db.execute(f"SELECT path, ttl.expires_at(p) FROM {table} p").fetchall()
    assert rows and all(e is None or (k in first and first[k] <= e) for k, e in rows)
    assert db.execute("SELECT missing, late FROM ttl.queue_verify(%s)", (table,)).fetchone() == (0, 0)


def _first_entries_by_text_key(db: psycopg.Connection[Any], table: str) -> dict[str, datetime]:
    name = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue WHERE relid = %s::regclass",
                      (table,)).fetchone()
    assert name is not None
    first: dict[str, datetime] = {}
    for k, e in db.execute(f"SELECT k1, expires_at FROM {name[0]}").fetchall():
        first[k] = min(e, first.get(k, e))
    return first


def test_per_row_and_cql_style_tables_keep_early_entries(db: psycopg.Connection[Any], dsn: str) -> None:
    from pg_ttl.ddl.apply import apply

    db.execute("CREATE TABLE pr (path text PRIMARY KEY, views int)")
    db.execute("SELECT ttl.enable('pr', expire_after => '1 day')")  # per-row TTL: its expiry column
    apply(db, "CREATE TABLE pv (path text PRIMARY KEY, views int) WITH (default_time_to_live = 86400);", "m.sql")
    for table in ("pr", "pv"):
        db.execute("SELECT ttl.set_option(%s, 'queue_shards', '2')", (table,))
        db.execute(f"INSERT INTO {table} (path, views) SELECT 'p' || g, 0 FROM generate_series(1, 20) g")
    db.commit()
    when = dict(db.execute("SELECT tgrelid::regclass::text, pg_get_triggerdef(oid) FROM pg_trigger"
                           " WHERE tgname = 'ttl_queue_update'").fetchall())
    assert "(new.ttl_expires_at < old.ttl_expires_at)" in when["pr"]  # the expiry column, compared as it is
    assert "(old.* IS DISTINCT FROM new.*)" in when["pv"]  # CQL-style: the values count too
    for table in ("pr", "pv"):
        db.execute(f"UPDATE {table} SET views = views + 1")  # a refresh (per-row) or new values (CQL): later
        db.commit()
        _assert_rows_have_early_entries(db, table)
        db.execute("SELECT ttl.using_ttl('10 seconds')")  # this transaction's writes: USING TTL 10
        db.execute(f"UPDATE {table} SET views = views + 1 WHERE path IN ('p1', 'p2')")
        db.commit()
        _assert_rows_have_early_entries(db, table)
    # a pass far from any expiry deletes nothing
    for table in ("pr", "pv"):
        [res] = expire(dsn, [table])
        assert res.status == "ok" and res.rows_deleted == 0
        assert db.execute(f"SELECT count(*) FROM {table}").fetchone() == (20,)


def test_a_pass_reads_only_what_expired_and_deletes_it(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 20_000, 100)  # 200 expired
    [res] = expire(dsn, ["t"])
    assert res.status == "ok" and res.rows_deleted == 200
    assert sorted(u.action for u in res.units) == ["queue"] * 4
    # the existing rows were added first; then only the 200 expired entries were read
    assert db.execute("SELECT sum(rows_selected) FROM ttl.run_unit").fetchone() == (200,)
    assert db.execute("SELECT count(*) FROM t WHERE v < now()").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM t").fetchone() == (19_800,)
    assert _queue(db) == _expected(db)


def test_a_pass_drains_only_the_shards_with_entries_due(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 1000, 1000)  # one expired row: one shard has an entry due
    [res] = expire(dsn, ["t"])
    assert res.status == "ok" and res.rows_deleted == 1 and [u.action for u in res.units] == ["queue"]
    assert db.execute("SELECT count(*) FROM ttl.run_unit WHERE run_id = %s", (res.run_id,)).fetchone() == (1,)
    [res] = expire(dsn, ["t"])  # nothing due: no shard claimed, nothing recorded but the run
    assert res.status == "ok" and res.rows_deleted == 0 and res.units == []
    assert db.execute("SELECT status, (SELECT count(*) FROM ttl.run_unit u WHERE u.run_id = r.run_id)"
                      " FROM ttl.run r WHERE run_id = %s", (res.run_id,)).fetchone() == ("ok", 0)


def test_a_stopped_pass_resumes_after_its_last_entry(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 4000, 2, shards=1)  # 2000 expired, one shard, batches of 100
    db.execute("SELECT ttl.set_option('t', 'delete_batch_size', '100')")
    db.commit()
    stop = threading.Event()

    class StopAfterThree:
        n = 0

        def unit_started(self, *a: Any) -> None:
            pass

        def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
            self.n += 1
            if self.n == 3:
                stop.set()

        def unit_finished(self, result: Any) -> None:
            pass

    [res] = expire(dsn, ["t"], stop=stop, progress=StopAfterThree())
    assert res.status == "partial" and res.rows_deleted == 300
    cp = db.execute("SELECT checkpoint FROM ttl.run_unit").fetchone()
    assert cp is not None and cp[0]["strategy"] == "queue"
    # the checkpoint is the 300th expired entry in (expiry, key) order (one expiry): key 600
    assert cp[0]["after"][1] == 600
    [res] = expire(dsn, ["t"])
    assert res.status == "ok" and res.rows_deleted == 1700
    # where the second run started: after the first run's checkpoint, reading only the rest
    row = db.execute("SELECT resumed_from, rows_selected FROM ttl.run_unit WHERE run_id = %s",
                     (res.run_id,)).fetchone()
    assert row is not None and row[0] == cp[0] and row[1] == 1700
    assert db.execute("SELECT count(*) FROM t").fetchone() == (2000,)


def test_a_pass_removes_every_entry_of_the_rows_it_deletes(db: psycopg.Connection[Any], dsn: str) -> None:
    """The drain removes the entries of the rows it deletes itself (their DELETE trigger
    leaves them to it): a row's second, later entry too, read in a later batch."""
    _table(db, 10, 100, shards=1)
    db.execute("SELECT ttl.set_option('t', 'delete_batch_size', '1')")  # each entry its own batch
    db.execute("SELECT ttl.queue_backfill('t')")
    db.execute("UPDATE t SET v = '2026-01-01' WHERE id = 3")  # earlier: its entry moves to 2026-01-02
    db.execute("UPDATE t SET v = '2026-03-01' WHERE id = 3")  # later: no trigger, the entry stays
    db.execute("UPDATE t SET v = '2026-02-01' WHERE id = 3")  # earlier again: a second entry, 2026-02-02
    db.commit()
    assert sorted(e for k, e in _queue(db) if k == 3) == [datetime.fromisoformat(d + " 00:00:00+00:00")
                                                         for d in ("2026-01-02", "2026-02-02")]
    [res] = expire(dsn, ["t"])
    assert res.status == "ok" and res.rows_deleted == 1
    assert db.execute("SELECT count(*) FROM t WHERE id = 3").fetchone() == (0,)
    assert _queue(db) == _expected(db)  # both of row 3's entries gone, the other rows' kept
    # a DELETE elsewhere that claims to be a pass only leaves entries whose row is gone
    db.execute("SELECT set_config('pg_ttl.queue_drain', 't'::regclass::oid::text, true)")
    db.execute("DELETE FROM t WHERE id = 5")
    db.commit()
    assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('t')").fetchone() == (0, 0, 1)
    db.execute("DELETE FROM t WHERE id = 6")  # without it, the trigger removes the entry
    db.commit()
    assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('t')").fetchone() == (0, 0, 1)


def test_every_entry_is_checked_against_its_row(db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    _table(db, 100, 10)  # 10 expired
    db.execute("SELECT ttl.queue_backfill('t')")
    queue = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue").fetchone()
    assert queue is not None
    # row 5 (live) with an early entry, due; key 999 has no row
    db.execute(f"UPDATE {queue[0]} SET expires_at = '2000-01-01' WHERE k1 = 5")
    db.execute(f"INSERT INTO {queue[0]} SELECT shard, '2000-01-01', 999 FROM {queue[0]} LIMIT 1")
    db.commit()
    app = connect(autocommit=False)
    app.execute("SELECT * FROM t WHERE id = 20 FOR UPDATE")  # an expired row the application holds
    [res] = expire(dsn, ["t"])
    assert res.status == "ok" and res.rows_deleted == 9
    assert [r[0] for r in db.execute("SELECT id FROM t WHERE v < now() OR id = 5").fetchall()] == [5, 20]
    db.commit()
    entries = _queue(db)
    assert entries == _expected(db)  # row 5's entry moved to its real expiry, 999's gone, 20's kept
    app.rollback()
    [res] = expire(dsn, ["t"])
    assert res.rows_deleted == 1 and _queue(db) == _expected(db)


def test_writers_need_no_right_on_the_queue_and_owner_code_runs_as_the_owner(
        db: psycopg.Connection[Any], dsn: str) -> None:
    db.autocommit = True
    db.execute("CREATE ROLE qowner LOGIN")
    db.execute("CREATE ROLE qwriter LOGIN")
    db.execute("GRANT CREATE, USAGE ON SCHEMA public TO qowner")
    try:
        owner = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="qowner"), autocommit=True)
        owner.execute("CREATE TABLE public.items (id int PRIMARY KEY, v timestamptz, who name)")
        owner.execute("CREATE FUNCTION public.exp(t timestamptz) RETURNS timestamptz LANGUAGE sql IMMUTABLE"
                      " AS $$ SELECT t + interval '1 day' $$")
        owner.execute("SELECT ttl.enable('public.items', expiration_expression => 'public.exp(v)')")
        owner.execute("SELECT ttl.set_option('public.items', 'queue_shards', '2')")
        owner.execute("GRANT INSERT, UPDATE, DELETE, SELECT ON public.items TO qwriter")
        writer = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="qwriter"), autocommit=True)
        writer.execute("INSERT INTO public.items VALUES (1, '2020-01-01'), (2, '2100-01-01')")
        queue = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue").fetchone()
        assert queue is not None
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            writer.execute(f"SELECT * FROM {queue[0]}")
        owned = db.execute(f"SELECT k1, pg_catalog.pg_get_userbyid(c.relowner) FROM {queue[0]}, pg_class c"
                           f" WHERE c.oid = '{queue[0]}'::regclass ORDER BY 1").fetchall()
        assert owned == [(1, "qowner"), (2, "qowner")]
        # a writer cannot drop another owner's queue through pg_ttl's functions
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            writer.execute("SELECT ttl._queue_drop('public.items'::regclass)")
        owner.execute("SELECT ttl.queue_backfill('public.items')")
        [res] = expire(dsn, ["items"])
        assert res.rows_deleted == 1
        owner.close()
        writer.close()
    finally:
        db.execute("DROP OWNED BY qowner, qwriter CASCADE")
        db.execute("DROP ROLE qowner, qwriter")


def test_a_writers_search_path_cannot_stand_in_for_a_builtin_in_the_queue_triggers(
        db: psycopg.Connection[Any], dsn: str) -> None:
    db.autocommit = True
    db.execute("CREATE ROLE sowner LOGIN")
    db.execute("CREATE ROLE swriter LOGIN")
    db.execute("GRANT CREATE, USAGE ON SCHEMA public TO sowner")
    db.execute("CREATE SCHEMA evil AUTHORIZATION swriter")
    try:
        owner = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="sowner"), autocommit=True)
        owner.execute("CREATE TABLE public.items (id int PRIMARY KEY, v timestamptz, code text)")
        owner.execute("SELECT ttl.enable('public.items', expire_after => '1 day', column_name => 'v')")
        owner.execute("SELECT ttl.set_option('public.items', 'queue_shards', '2')")
        owner.execute("GRANT INSERT, UPDATE, DELETE, SELECT, TRUNCATE ON public.items TO swriter")
        writer = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="swriter"), autocommit=True)
        # operators of every type the triggers compare, each writing down who called it
        writer.execute("CREATE TABLE evil.log (who name)")
        writer.execute("GRANT USAGE ON SCHEMA evil TO PUBLIC")
        writer.execute("GRANT INSERT ON evil.log TO PUBLIC")
        for typ in ("text", "int2", "int4", "int8", "oid", "timestamptz", "timestamp"):
            writer.execute(f"CREATE FUNCTION evil.eq_{typ}(a {typ}, b {typ}) RETURNS boolean LANGUAGE plpgsql AS"
                           f" $$ BEGIN INSERT INTO evil.log VALUES (current_user);"
                           f" RETURN a OPERATOR(pg_catalog.=) b; END $$")
            writer.execute(f"CREATE OPERATOR evil.= (LEFTARG = {typ}, RIGHTARG = {typ}, FUNCTION = evil.eq_{typ})")
        writer.execute("SET search_path = evil, pg_catalog, public")
        writer.execute("INSERT INTO items VALUES (1, '2020-01-01'), (2, now()), (3, now())")
        writer.execute("UPDATE items SET v = v + interval '1 hour' WHERE id = 2")
        writer.execute("UPDATE items SET v = '2020-01-01' WHERE id = 3")
        writer.execute("DELETE FROM items WHERE id = 2")
        # row 2's early entry stays after its DELETE, for the drain
        assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('public.items')").fetchone() == (0, 0, 1)
        writer.execute("TRUNCATE items")
        # the writer's operators ran for the writer's own statements (id = 2), never as the table's owner
        assert db.execute("SELECT DISTINCT who FROM evil.log").fetchall() == [("swriter",)]
        owner.close()
        writer.close()
    finally:
        db.execute("DROP SCHEMA evil CASCADE")
        db.execute("DROP OWNED BY sowner, swriter CASCADE")
        db.execute("DROP ROLE sowner, swriter")


def test_bad_values_and_tables_without_a_key_are_refused(db: psycopg.Connection[Any]) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz)")
    db.execute("CREATE TABLE nokey (id int, v timestamptz)")
    db.execute("CREATE TABLE pointkey (p point NOT NULL, v timestamptz)")
    db.execute("CREATE UNIQUE INDEX ON pointkey ((p[0]))")  # an expression index is no key either
    db.execute("CREATE TABLE moneykey (m money PRIMARY KEY, v timestamptz)")  # money: no hash function
    for table in ("t", "nokey", "pointkey", "moneykey"):
        db.execute("SELECT ttl.enable(%s, expire_after => '1 day', column_name => 'v')", (table,))
    db.commit()
    for value, message in ((r"-1", r"between 0 \(no queue\) and 1024, got -1"),
                           ("2000", r"between 0 \(no queue\) and 1024, got 2000"),
                           ("many", "must be an integer")):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            db.execute("SELECT ttl.set_option('t', 'queue_shards', %s)", (value,))
        db.rollback()
    with pytest.raises(psycopg.errors.InvalidTableDefinition, match="no primary key or unique index"):
        db.execute("SELECT ttl.set_option('nokey', 'queue_shards', '4')")
    db.rollback()
    with pytest.raises(psycopg.errors.InvalidTableDefinition, match="no primary key or unique index"):
        db.execute("SELECT ttl.set_option('pointkey', 'queue_shards', '4')")
    db.rollback()
    with pytest.raises(psycopg.errors.FeatureNotSupported, match="cannot be hashed"):
        db.execute("SELECT ttl.set_option('moneykey', 'queue_shards', '4')")
    db.rollback()
    assert db.execute("SELECT count(*) FROM ttl.queue").fetchone() == (0,)


def test_off_drop_and_changes_remove_or_rebuild_the_queue(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 100, 10)
    objects = ("SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
               "         WHERE n.nspname = 'ttl' AND c.relname LIKE 't\\_%%\\_queue%%' AND c.relkind IN ('r', 'p')),"
               " (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'ttl\\_queue\\_%%'),"
               " (SELECT count(*) FROM pg_proc WHERE proname LIKE 'queue\\_%%\\_sync')")
    assert db.execute(objects).fetchone() == (5, 4, 1)  # the parent and 4 shards
    db.execute("SELECT ttl.queue_backfill('t')")
    db.execute("ALTER TABLE t RENAME TO t2")  # kept by oid
    db.execute("ALTER TABLE t2 RENAME TO t")
    db.execute("ALTER TABLE t RENAME COLUMN v TO w")  # the triggers name it: made anew, the queue filled again
    db.execute("INSERT INTO t VALUES (1001, now())")
    db.execute("UPDATE t SET w = w - interval '1 hour' WHERE id = 1")
    db.execute("SELECT ttl.queue_backfill('t')")
    assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('t')").fetchone() == (0, 0, 0)
    db.execute("ALTER TABLE t RENAME COLUMN w TO v")
    db.execute("DELETE FROM t WHERE id = 1001")
    db.execute("SELECT ttl.set_option('t', 'expire_after', '2 days')")  # entries computed anew
    assert db.execute("SELECT backfilled FROM ttl.queue").fetchone() == (False,)
    db.execute("SELECT ttl.queue_backfill('t')")
    assert _queue(db) == {(int(k), e) for k, e in db.execute(
        "SELECT id, v + interval '2 days' FROM t WHERE v IS NOT NULL").fetchall()}
    assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('t')").fetchone() == (0, 0, 0)
    db.execute("SELECT ttl.set_option('t', 'queue_shards', '2')")
    assert db.execute(objects).fetchone() == (3, 4, 1)
    db.execute("SELECT ttl.set_option('t', 'queue_shards', '0')")
    assert db.execute(objects).fetchone() == (0, 0, 0)
    db.execute("SELECT ttl.set_option('t', 'queue_shards', '3')")
    db.execute("DROP TABLE t")
    assert db.execute(objects).fetchone() == (0, 0, 0)
    assert db.execute("SELECT count(*) FROM ttl.queue").fetchone() == (0,)


def test_verify_counts_missing_and_late_rows_as_wrong_and_early_entries_as_fine(
        db: psycopg.Connection[Any], cli: Any, dsn: str) -> None:
    _table(db, 50, 5)
    db.execute("SELECT ttl.queue_backfill('t')")
    queue = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue").fetchone()
    assert queue is not None
    db.execute(f"UPDATE {queue[0]} SET expires_at = '2000-01-01' WHERE k1 = 4")  # early: fine
    db.commit()
    assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('t')").fetchone() == (0, 0, 0)
    result = cli("queue", "verify", "t", "--dsn", dsn)
    assert result.returncode == 0 and "every row has its entry" in result.stdout
    db.execute(f"DELETE FROM {queue[0]} WHERE k1 IN (1, 2, 3)")  # missing
    db.execute(f"UPDATE {queue[0]} SET expires_at = '2200-01-01' WHERE k1 = 6")  # late
    db.execute(f"INSERT INTO {queue[0]} SELECT shard, '2000-01-01', 999 FROM {queue[0]} LIMIT 1")  # extra: no row
    db.commit()
    assert db.execute("SELECT missing, late, extra FROM ttl.queue_verify('t')").fetchone() == (3, 1, 2)
    result = cli("queue", "verify", "t", "--dsn", dsn)
    assert result.returncode == 1 and "3 rows missing, 1 late, 2 extra" in result.stdout
    result = cli("queue", "verify", "t", "--repair", "--dsn", dsn)
    assert result.returncode == 0 and "repaired" in result.stdout
    db.rollback()
    assert _queue(db) == _expected(db)  # exact after a repair
    assert cli("queue", "verify", "t", "--dsn", dsn).returncode == 0


def test_ttl_ddl_sets_and_resets_the_queue(db: psycopg.Connection[Any]) -> None:
    from pg_ttl.ddl import TtlDdlError
    from pg_ttl.ddl.apply import apply

    apply(db, "CREATE TABLE ev (id bigint PRIMARY KEY, at timestamptz)"
              " WITH (ttl_expire_after = '1 day', ttl_column = 'at', ttl_queue_shards = 3);", "m.sql")
    db.commit()
    assert db.execute("SELECT shards FROM ttl.queue WHERE relid = 'ev'::regclass").fetchone() == (3,)
    with pytest.raises(TtlDdlError, match=r"between 0 \(no queue\) and 1024"):
        apply(db, "ALTER TABLE ev SET (ttl_queue_shards = 5000);", "m.sql")
    db.rollback()
    apply(db, "ALTER TABLE ev RESET (ttl_queue_shards);", "m.sql")
    db.commit()
    assert db.execute("SELECT count(*) FROM ttl.queue").fetchone() == (0,)


def test_two_engines_drain_different_shards_and_none_twice(db: psycopg.Connection[Any], dsn: str) -> None:
    _table(db, 40_000, 2, shards=6)  # 20,000 expired over 6 shards
    db.execute("SELECT ttl.set_option('t', 'delete_batch_size', '200')")
    db.execute("SELECT ttl.queue_backfill('t', 100000)")
    db.commit()
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    results: list[Any] = []
    engines = [threading.Thread(target=lambda: results.extend(expire(dsn, ["t"], cutoff=row[0]))) for _ in range(2)]
    for t in engines:
        t.start()
    for t in engines:
        t.join(120)
    assert len(results) == 2 and sum(r.rows_deleted for r in results) == 20_000
    done = db.execute("SELECT unit_name, count(*) FROM ttl.run_unit WHERE action = 'queue' AND status = 'ok'"
                      " GROUP BY unit_name ORDER BY 1").fetchall()
    assert len(done) == 6 and all(n == 1 for _, n in done)  # each shard drained by exactly one engine
    # the other engine's skips: the shards it found claimed (one it listed after they were drained
    # has nothing due left: not listed at all)
    skipped = db.execute("SELECT count(*) FROM ttl.run_unit WHERE status = 'skipped'").fetchone()
    assert skipped is not None and skipped[0] <= 6
    assert db.execute("SELECT count(*) FROM t").fetchone() == (20_000,)
    assert _queue(db) == _expected(db)


@pytest.mark.slow
def test_a_killed_pass_resumes_after_its_last_committed_batch(db: psycopg.Connection[Any], dsn: str) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    _table(db, 200_000, 2, shards=1)  # 100,000 expired, one shard
    db.execute("SELECT ttl.set_option('t', 'delete_batch_size', '20')")
    db.execute("SELECT ttl.queue_backfill('t', 1000000)")
    db.commit()
    proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "run", "t", "--quiet", "--dsn", dsn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = db.execute("SELECT rows_deleted FROM ttl.run_unit WHERE action = 'queue'").fetchone()
            db.commit()
            if row and row[0] >= 2000:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    for _ in range(200):  # until its server session has gone too
        gone = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl engine'"
                          " AND datname = current_database()").fetchone()
        db.commit()
        if gone == (0,):
            break
        time.sleep(0.05)
    killed = db.execute("SELECT status, checkpoint, rows_deleted FROM ttl.run_unit WHERE action = 'queue'").fetchone()
    assert killed is not None and killed[0] == "running" and killed[1] is not None and 0 < killed[2] < 100_000
    # the counters and the checkpoint committed with the deletes: exact, and the checkpoint is
    # the last entry deleted (one expiry for all: key order; every 2nd key expired)
    assert db.execute("SELECT count(*) FROM t").fetchone() == (200_000 - killed[2],)
    assert killed[1]["after"][1] == 2 * killed[2]
    db.commit()
    [res] = expire(dsn, ["t"])
    resumed = db.execute("SELECT resumed_from, rows_selected FROM ttl.run_unit WHERE run_id = %s",
                         (res.run_id,)).fetchone()
    assert resumed == (killed[1], 100_000 - killed[2]) and res.status == "ok"  # started after it, read the rest
    assert res.rows_deleted == 100_000 - killed[2]
    assert _queue(db) == _expected(db)


def test_plan_and_lag_read_the_queue(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    from pg_ttl.expire import oldest_expired, plan

    _table(db, 1000, 10, shards=2)  # 100 expired
    db.execute("SELECT ttl.queue_backfill('t')")
    db.commit()
    plans = plan(db, "t")
    assert [p.action for p in plans] == ["queue", "queue"]
    assert sum(p.rows for p in plans) == 100 and sum(p.total_rows for p in plans) == 1000
    expected = db.execute("SELECT min(v) + interval '1 day' FROM t").fetchone()
    relid = db.execute("SELECT 't'::regclass::oid").fetchone()
    assert expected is not None and relid is not None
    assert oldest_expired(db, relid[0]) == expected[0]
    out = cli("plan", "t", "--dsn", dsn).stdout
    assert "drain queue shard" in out
    assert db.execute("SELECT count(*) FROM t").fetchone() == (1000,)  # the plan changed nothing
    # the expired rows refreshed: their entries are due but early, the lag reads the rows
    db.execute("UPDATE t SET v = now() WHERE v < now() - interval '1 day' AND id > 500")
    db.commit()
    expected = db.execute("SELECT min(v) + interval '1 day' FROM t").fetchone()
    assert expected is not None and oldest_expired(db, relid[0]) == expected[0]
    db.execute("UPDATE t SET v = now() WHERE v < now() - interval '1 day'")
    db.commit()
    assert oldest_expired(db, relid[0]) is None


def test_status_shows_each_shards_backlog_read_from_the_queue(db: psycopg.Connection[Any], dsn: str,
                                                              cli: Any) -> None:
    import json

    from pg_ttl.worker import status as status_mod

    _table(db, 1000, 10, shards=3)  # 100 expired
    db.execute("SELECT ttl.queue_backfill('t')")
    db.commit()
    name = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue WHERE relid = 't'::regclass").fetchone()
    assert name is not None
    want = dict(db.execute(f"SELECT shard, count(*) FROM {name[0]} WHERE expires_at <= now() GROUP BY 1").fetchall())
    assert sum(want.values()) == 100
    [table] = status_mod.collect(db, "t").tables
    assert [(b.shard, b.rows, b.exact) for b in table.queue_backlog] == [
        (shard, want.get(shard, 0), True) for shard in range(3)]
    assert (table.backlog, table.backlog_exact) == (100, True)
    shown = json.loads(cli("status", "t", "--json", "--dsn", dsn).stdout)["tables"][0]
    assert shown["queue_backlog"] == [{"shard": b.shard, "rows": b.rows, "exact": True} for b in table.queue_backlog]
    out = cli("status", "t", "--dsn", dsn).stdout
    assert "100 (shards " + ", ".join(str(want.get(s, 0)) for s in range(3)) + ")" in out
    # a count stops at its limit: then it says "at least"
    status_mod.EXACT_COUNT_LIMIT, limit = 10, status_mod.EXACT_COUNT_LIMIT
    try:
        [capped] = status_mod.collect(db, "t").tables
    finally:
        status_mod.EXACT_COUNT_LIMIT = limit
    assert [(b.rows, b.exact) for b in capped.queue_backlog] == [(10, False)] * 3
    assert (capped.backlog, capped.backlog_exact) == (30, False)


def test_a_timestamp_key_finds_its_entry_whatever_the_writers_time_zone(db: psycopg.Connection[Any],
                                                                        connect: Any) -> None:
    db.execute("CREATE TABLE ev (at timestamptz PRIMARY KEY, v timestamptz)")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'v')")
    db.execute("SELECT ttl.set_option('ev', 'queue_shards', '8')")
    assert db.execute("SELECT ttl.queue_backfill('ev')").fetchone() == (0,)  # empty: filled at once
    db.execute("SET TimeZone = 'UTC'")
    db.execute("INSERT INTO ev SELECT '2026-01-01'::timestamptz + g * interval '1 minute', now()"
               " FROM generate_series(1, 50) g")
    db.commit()
    tokyo = connect(autocommit=True)
    tokyo.execute("SET TimeZone = 'Asia/Tokyo'")
    tokyo.execute("SET DateStyle = 'SQL, DMY'")
    tokyo.execute("UPDATE ev SET v = v + interval '1 hour' WHERE at < '2026-01-01 00:20:00+00'")
    tokyo.execute("DELETE FROM ev WHERE at >= '2026-01-01 00:40:00+00'")
    assert db.execute("SELECT missing, late FROM ttl.queue_verify('ev')").fetchone() == (0, 0)
    queue = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue").fetchone()
    assert queue is not None
    assert db.execute(f"SELECT count(*) FROM {queue[0]}").fetchone() == (39,)


def test_uninstall_removes_the_queue_and_its_triggers(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    _table(db, 100, 10)
    db.execute("SELECT ttl.queue_backfill('t')")
    db.commit()
    result = cli("uninstall", "--dsn", dsn, "--yes")
    assert result.returncode == 0, result.stderr
    assert db.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 't'::regclass AND NOT tgisinternal"
                      ).fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'ttl'").fetchone() == (0,)
    db.execute("UPDATE t SET v = now(), id = id + 1000")  # the table works without pg_ttl
    assert db.execute("SELECT count(*) FROM t").fetchone() == (100,)
    db.rollback()
    assert cli("install", "--dsn", dsn).returncode == 0


def test_a_repair_and_an_update_moving_the_expiry_back_onto_an_early_entry_leave_no_row_late(
        db: psycopg.Connection[Any], connect: Any) -> None:
    """A row with an early entry (its expiry made later since: no trigger), repaired while
    the application moves the expiry back onto that entry's instant. The repair removes the
    early entry (not at the row's expiry as it reads the row) and adds one at the later
    expiry; the UPDATE found the early entry there and added none. The UPDATE holds that
    entry locked till it commits, so the repair's removal waits for it and the repair's
    next statement sees the row's new expiry: the row keeps an entry at it, never only the
    later one."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, n int NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO t VALUES (1, '2030-01-01'), (2, '2030-01-01')")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")
    db.execute("SELECT ttl.set_option('t', 'queue_shards', '2')")
    db.execute("SELECT ttl.queue_backfill('t')")
    db.execute("UPDATE t SET v = '2031-01-01' WHERE id = 1")  # later: its entry stays at 2030-01-02
    queue = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue").fetchone()
    assert queue is not None
    db.execute(f"DELETE FROM {queue[0]} WHERE k1 = 2")  # something for the repair to do
    db.commit()
    app = connect(autocommit=False)
    app.execute("UPDATE t SET v = '2030-01-01' WHERE id = 1")  # back onto the early entry; not committed
    repairer = connect(autocommit=True)
    done = threading.Event()

    def repair() -> None:
        repairer.execute("SELECT * FROM ttl.queue_verify('t', true)")
        done.set()

    thread = threading.Thread(target=repair)
    thread.start()
    waited = False
    for _ in range(100):  # the repair waits for the application's transaction (or, unlocked, is done)
        if done.wait(0.05):
            break
        row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                         (repairer.info.backend_pid,)).fetchone()
        db.commit()
        if row == (1,):
            waited = True
            break
    app.commit()
    thread.join(10)
    assert done.is_set()
    _assert_no_row_late(db)
    assert waited


def test_a_repair_while_the_queue_is_being_filled_leaves_the_rows_it_passed_their_entries(
        db: psycopg.Connection[Any]) -> None:
    """The fill has passed row 1 (its entry added), not row 2 yet. Row 1's expiry made
    later leaves its entry early; an extra entry gives the repair something to do. The
    repair removes row 1's early entry (not at its expiry) and gives it one at its
    expiry: the fill will not come back to it."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz, n int NOT NULL DEFAULT 0)")
    db.execute("INSERT INTO t VALUES (1, '2030-01-01'), (2, '2030-01-01')")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v')")
    db.execute("SELECT ttl.set_option('t', 'queue_shards', '2')")
    assert db.execute("SELECT ttl.queue_backfill('t', 1)").fetchone() == (1,)
    assert db.execute("SELECT backfilled FROM ttl.queue").fetchone() == (False,)
    db.execute("UPDATE t SET v = '2031-01-01' WHERE id = 1")  # later: its entry stays at 2030-01-02
    queue = db.execute("SELECT queue_relid::regclass::text FROM ttl.queue").fetchone()
    assert queue is not None
    db.execute(f"INSERT INTO {queue[0]} VALUES (0, '2030-01-01', 999)")  # extra: no such row
    assert db.execute("SELECT * FROM ttl.queue_verify('t', true)").fetchone() == (0, 0, 1, True)
    assert _queue(db) == {(1, datetime.fromisoformat("2031-01-02T00:00:00+00:00"))}
    while db.execute("SELECT ttl.queue_backfill('t')").fetchone() != (0,):
        pass
    _assert_no_row_late(db)


def test_the_cli_turns_a_queue_on_fills_it_and_turns_it_off(db: psycopg.Connection[Any], cli: Any,
                                                            dsn: str) -> None:
    _table(db, 250, 5, shards=0)
    assert db.execute("SELECT count(*) FROM ttl.queue").fetchone() == (0,)
    result = cli("queue", "set", "t", "3", "--fill", "--batch", "100", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert "3 shards, filled (250 rows added)" in result.stdout
    db.rollback()
    assert db.execute("SELECT shards, backfilled FROM ttl.queue").fetchone() == (3, True)
    assert _queue(db) == _expected(db)
    db.rollback()
    result = cli("queue", "set", "t", "5000", "--dsn", dsn)  # refused, the queue as it was
    assert result.returncode != 0 and "between 0 (no queue) and 1024" in result.stderr
    assert db.execute("SELECT shards, backfilled FROM ttl.queue").fetchone() == (3, True)
    db.rollback()
    result = cli("queue", "set", "t", "0", "--dsn", dsn)
    assert result.returncode == 0 and "off" in result.stdout
    assert db.execute("SELECT count(*) FROM ttl.queue").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'ttl\\_queue\\_%'").fetchone() == (0,)


def test_queue_set_waits_for_a_held_table_no_longer_than_its_lock_timeout(
        db: psycopg.Connection[Any], cli: Any, dsn: str, connect: Any) -> None:
    """A long writing transaction holds the table: `pg-ttl queue set` gives up after
    --lock-timeout (other writes would queue behind it meanwhile), changes nothing and says so."""
    _table(db, 10, 5, shards=0)
    app = connect(autocommit=False)
    app.execute("UPDATE t SET n = n + 1 WHERE id = 1")  # a writer: holds ROW EXCLUSIVE till it ends
    started = time.monotonic()
    result = cli("queue", "set", "t", "4", "--lock-timeout", "300ms", "--dsn", dsn)
    took = time.monotonic() - started
    app.rollback()
    assert result.returncode != 0 and "locked by another session" in result.stderr, result.stderr
    assert took < 30
    assert db.execute("SELECT count(*) FROM ttl.queue").fetchone() == (0,)
