"""Orphan collection: child rows whose parent row is gone are deleted range by range,
never younger than min_age, never while their parent exists at delete time."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire
from tests.helpers import StopAfter, Together, catalog_state

Conn = psycopg.Connection[Any]

SCHEMA = """
CREATE TABLE metadata (hash text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE data (id bigserial PRIMARY KEY, hash text NOT NULL, body text,
                   created_at timestamptz NOT NULL DEFAULT clock_timestamp());
"""


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.execute(SCHEMA)
    db.commit()
    db.autocommit = True
    return db


def _fill(conn: Conn) -> None:
    conn.execute("INSERT INTO metadata SELECT 'k' || g FROM generate_series(1, 100) g")
    # with a parent, old: kept
    conn.execute("INSERT INTO data (hash, created_at) SELECT 'k' || g, now() - interval '2 hours'"
                 " FROM generate_series(1, 100) g")
    # orphans, old: deleted
    conn.execute("INSERT INTO data (hash, created_at) SELECT 'gone' || g, now() - interval '2 hours'"
                 " FROM generate_series(1, 60) g")
    # orphans, younger than min_age (the parent may still come): kept
    conn.execute("INSERT INTO data (hash, created_at) SELECT 'soon' || g, now() - interval '10 minutes'"
                 " FROM generate_series(1, 40) g")


def test_old_orphans_go_children_with_a_parent_and_young_orphans_stay(conn: Conn, dsn: str) -> None:
    _fill(conn)
    conn.execute("SELECT ttl.enable_orphans('data', key => '{hash}', parent => 'metadata', min_age => '1 hour',"
                 " age_column => 'created_at')")
    [res] = expire(dsn, ["data"])
    assert res.status == "ok" and res.rows_deleted == 60 and res.orphans_deleted == 60
    assert [u.action for u in res.units] == ["orphans"]
    left = conn.execute("SELECT count(*) FILTER (WHERE hash LIKE 'k%'), count(*) FILTER (WHERE hash LIKE 'gone%'),"
                        " count(*) FILTER (WHERE hash LIKE 'soon%') FROM data").fetchone()
    assert left == (100, 0, 40)
    unit = conn.execute("SELECT action, rows_deleted, status FROM ttl.run_unit ORDER BY run_id DESC LIMIT 1")
    assert unit.fetchone() == ("orphans", 60, "ok")
    described = dict(conn.execute("SELECT option, value FROM ttl.describe('data')").fetchall())
    assert described["ttl_orphan_of"] == "public.metadata(hash)" and described["ttl_orphan_min_age"] == "01:00:00"


def test_the_parent_lookup_uses_its_index_and_child_names_never_resolve_to_the_parent(conn: Conn) -> None:
    """Both tables have a column "hash": the child's, written unqualified, must stay the child's."""
    conn.execute("SELECT ttl.enable_orphans('data', key => '{hash}', parent => 'metadata', min_age => '1 hour',"
                 " age_column => 'created_at')")
    row = conn.execute("SELECT ttl.orphans_sql('data'::regclass, now())").fetchone()
    assert row is not None
    conn.execute("INSERT INTO metadata SELECT 'k' || g FROM generate_series(1, 20000) g")
    conn.execute("ANALYZE metadata")
    conn.execute("INSERT INTO data (hash, created_at) SELECT 'k' || g, now() - interval '1 day'"
                 " FROM generate_series(1, 20000) g")
    conn.execute("ANALYZE data")
    # what one DELETE of the engine reads: a block range of the child
    plan = "\n".join(r[0] for r in conn.execute(
        "EXPLAIN SELECT 1 FROM data WHERE ctid >= '(0,0)' AND ctid < '(20,0)' AND " + row[0]).fetchall())
    assert "SubPlan" in plan and "metadata_pkey" in plan and "Seq Scan on metadata" not in plan, plan
    conn.execute("INSERT INTO data (hash, created_at) VALUES ('nope', now() - interval '1 day')")
    assert conn.execute("SELECT hash FROM data WHERE " + row[0]).fetchall() == [("nope",)]


def test_multi_column_keys_partitioned_children_and_a_date_age(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE owners (a int, b text, PRIMARY KEY (b, a))")
    conn.execute("CREATE TABLE items (x int, y text, day date NOT NULL) PARTITION BY RANGE (day)")
    conn.execute("CREATE TABLE items_old PARTITION OF items FOR VALUES FROM ('2000-01-01') TO ('2026-01-01')")
    conn.execute("CREATE TABLE items_new PARTITION OF items FOR VALUES FROM ('2026-01-01') TO ('2100-01-01')")
    conn.execute("INSERT INTO owners VALUES (1, 'a'), (2, 'b')")
    conn.execute("INSERT INTO items VALUES (1, 'a', '2020-01-01'), (1, 'b', '2020-01-01'), (2, 'b', '2025-06-01'),"
                 " (3, 'c', '2026-06-01'), (1, 'a', '2026-06-01'), (9, 'z', current_date)")
    conn.execute("SELECT ttl.enable_orphans('items', key => '{x, y}', parent => 'owners', parent_key => '{a, b}',"
                 " min_age => '1 day', age_column => 'day')")
    [res] = expire(dsn, ["items"])
    assert res.status == "ok" and sorted(u.unit for u in res.units) == ["items_new", "items_old"]
    # (1, 'b') and (3, 'c') have no owner; (9, 'z') is dated today: less than a day old
    assert sorted(conn.execute("SELECT x, y FROM items").fetchall()) == [(1, "a"), (1, "a"), (2, "b"), (9, "z")]


AGES = [("timestamptz", "t", None), ("timestamp", "t AT TIME ZONE 'UTC'", None),
        ("bigint", "floor(extract(epoch FROM t))", "seconds"),
        ("numeric", "extract(epoch FROM t) * 1000", "milliseconds")]


@pytest.mark.parametrize(("typ", "value", "unit"), AGES, ids=[a[0] for a in AGES])
@pytest.mark.parametrize("min_age", ["1 hour", "1 month 2 days"])
def test_min_age_is_exact_in_every_age_column_type(conn: Conn, dsn: str, typ: str, value: str, unit: str | None,
                                                   min_age: str) -> None:
    """A row goes when its age reached min_age at the run's cutoff, to the second,
    whatever the age column's type (compared as a constant threshold where that is exact)."""
    conn.execute(f"CREATE TABLE aged (hash text, made {typ})")
    row = conn.execute("SELECT date_trunc('second', now()) - interval '1 minute'").fetchone()
    assert row is not None
    cutoff = row[0]
    for name, offset in (("older", "-1 second"), ("exact", "0"), ("younger", "1 second")):
        conn.execute(f"INSERT INTO aged SELECT %s, {value} FROM (SELECT CAST(%s AS timestamptz)"
                     f" - CAST(%s AS interval) + CAST(%s AS interval) AS t) x", (name, cutoff, min_age, offset))
    conn.execute("SELECT ttl.enable_orphans('aged', '{hash}', 'metadata', min_age => %s, age_column => 'made',"
                 " age_unit => %s)", (min_age, unit))
    [res] = expire(dsn, ["aged"], cutoff=cutoff)
    assert res.status == "ok", res.error
    assert conn.execute("SELECT hash FROM aged").fetchall() == [("younger",)]


def test_a_date_age_counts_from_the_end_of_its_day_with_months_too(conn: Conn, dsn: str) -> None:
    """A row dated Jan 28 may have been written at 23:59: a month old only at Feb 28
    23:59 (2025: the month ends on the 28th), so a run at Feb 28 12:00 keeps it; one
    dated Jan 27 is a month old by Feb 27 23:59 and goes."""
    conn.execute("CREATE TABLE daily (hash text, day date)")
    conn.execute("INSERT INTO daily VALUES ('27', '2025-01-27'), ('28', '2025-01-28'), ('30', '2025-01-30'),"
                 " ('31', '2025-01-31')")
    conn.execute("SELECT ttl.enable_orphans('daily', '{hash}', 'metadata', min_age => '1 month', age_column => 'day')")
    [res] = expire(dsn, ["daily"], cutoff=datetime(2025, 2, 28, 12, tzinfo=UTC))
    assert res.status == "ok", res.error
    assert sorted(r[0] for r in conn.execute("SELECT hash FROM daily")) == ["28", "30", "31"]


def test_a_child_with_several_parents_is_an_orphan_when_none_has_its_key(conn: Conn, dsn: str, cli: Any) -> None:
    from pg_ttl.ddl.apply import apply
    from pg_ttl.ddl.dump import dump

    conn.execute("CREATE TABLE archive (h text PRIMARY KEY)")
    conn.execute("INSERT INTO metadata (hash) VALUES ('m'), ('both')")
    conn.execute("INSERT INTO archive VALUES ('a'), ('both')")
    conn.execute("INSERT INTO data (hash, created_at) SELECT k, now() - interval '1 day'"
                 " FROM unnest('{m, a, both, none}'::text[]) k")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', parents => '{metadata, archive}',"
                 " parent_key => '{{hash}, {h}}', age_column => 'created_at')")
    described = dict(conn.execute("SELECT option, value FROM ttl.describe('data')").fetchall())
    assert described["ttl_orphan_of"] == "public.metadata(hash), public.archive(h)"
    # the anti-join: one probe of each parent's unique index, no scan of either
    row = conn.execute("SELECT ttl.orphans_sql('data'::regclass, now())").fetchone()
    assert row is not None
    plan = "\n".join(r[0] for r in conn.execute("EXPLAIN SELECT 1 FROM data WHERE " + row[0]).fetchall())
    assert "metadata_pkey" in plan and "archive_pkey" in plan and "Seq Scan on metadata" not in plan, plan
    assert "Seq Scan on archive" not in plan, plan
    [res] = expire(dsn, ["data"])
    assert res.status == "ok" and res.orphans_deleted == 1
    assert sorted(r[0] for r in conn.execute("SELECT hash FROM data")) == ["a", "both", "m"]

    # TTL DDL spells it 'a(x), b(y)'; the dump gives it back
    text = dump(conn)
    assert "ttl_orphan_of = 'public.metadata(hash), public.archive(h)'" in text
    apply(conn, "ALTER TABLE data RESET (ttl_orphan_of);", "reset.sql")
    assert conn.execute("SELECT count(*) FROM ttl.orphan_policy").fetchone() == (0,)
    apply(conn, text, "dump.sql")
    assert conn.execute("SELECT parent_relids::regclass[]::text, parent_attnums FROM ttl.orphan_policy"
                        ).fetchone() == ("{metadata,archive}", [1, 1])
    apply(conn, "ALTER TABLE data SET (ttl_orphan_of = 'archive(h), metadata');", "two.sql")
    assert conn.execute("SELECT parent_relids::regclass[]::text FROM ttl.orphan_policy").fetchone() == (
        "{archive,metadata}",)

    # the command line: --parent once per parent
    res2 = cli("orphans", "set", "data", "--key", "hash", "--parent", "metadata", "--parent", "archive",
               "--parent-key", "hash", "--parent-key", "h", "--age-column", "created_at", "--dsn", dsn)
    assert res2.returncode == 0, res2.stderr
    assert "children of metadata, archive" in res2.stdout
    bad = cli("orphans", "set", "data", "--key", "hash", "--parent", "metadata", "--parent", "archive",
              "--parent-key", "hash", "--parent-key", "h", "--parent-key", "x", "--age-column", "created_at",
              "--dsn", dsn)
    assert bad.returncode == 2 and "2 --parent but 3 --parent-key" in bad.stderr

    # a column of the second parent's key cannot go; dropping that parent takes the policy
    with pytest.raises(psycopg.errors.DependentObjectsStillExist, match=r"orphan policy of public\.data"):
        conn.execute("ALTER TABLE archive DROP COLUMN h")
    conn.execute("DROP TABLE archive")
    assert conn.execute("SELECT count(*) FROM ttl.orphan_policy").fetchone() == (0,)


def test_children_follow_their_parents_in_the_same_pass(conn: Conn, dsn: str) -> None:
    conn.execute("INSERT INTO metadata (hash, created_at) VALUES ('old', now() - interval '60 days'),"
                 " ('new', now())")
    conn.execute("INSERT INTO data (hash, created_at) VALUES ('old', now() - interval '60 days'),"
                 " ('new', now() - interval '60 days')")
    conn.execute("SELECT ttl.enable('metadata', expire_after => '30 days', column_name => 'created_at')")
    conn.execute("SELECT ttl.enable_orphans('data', key => '{hash}', parent => 'metadata', min_age => '1 hour',"
                 " age_column => 'created_at')")
    results = expire(dsn, ["metadata"])  # the parent's run; its children follow
    assert [(r.table, r.rows_deleted, r.orphans_deleted) for r in results] == [("metadata", 1, 0), ("data", 1, 1)]
    assert conn.execute("SELECT hash FROM data").fetchall() == [("new",)]


BAD = [
    ("SELECT ttl.enable_orphans('data', '{hash}', 'nope', min_age => '1 hour', age_column => 'created_at')",
     ['relation "nope" does not exist']),
    ("SELECT ttl.enable_orphans('data', '{missing}', 'metadata', '{hash}', age_column => 'created_at')",
     ['column "missing" of table public.data does not exist', '"ttl_orphan_key"']),
    ("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', '{created_at}', age_column => 'created_at')",
     ['key column "hash" is text, but "created_at" of public.metadata is timestamp with time zone']),
    ("SELECT ttl.enable_orphans('data', '{id}', 'metadata', '{hash}', age_column => 'created_at')",
     ['key column "id" is bigint']),
    ("SELECT ttl.enable_orphans('data', '{body}', 'data', '{body}', age_column => 'created_at')",
     ["table public.data has no unique index on (body)", "CREATE UNIQUE INDEX ON public.data (body)"]),
    ("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', min_age => '-1 hour', age_column => 'created_at')",
     ['"ttl_orphan_min_age" must not be negative']),
    ("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_unit => 'seconds')",
     ['"ttl_orphan_age_unit" applies to an age column, and none is set']),
    ("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'body')",
     ['column "body" of table public.data has type text, which cannot be an age column']),
    ("SELECT ttl.enable_orphans('data', '{}', 'metadata', age_column => 'created_at')",
     ['"ttl_orphan_key" must name at least one column']),
    ("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at', job_cron => 'often')",
     ['invalid cron expression for "ttl_orphan_job_cron"']),
    ("SELECT ttl.disable_orphans('data')", ["table public.data has no orphan policy"]),
]


# Several parents: the same rules for each of them, and the lists must match.
SECOND_PARENT = "CREATE TABLE archive (h text, n int, at timestamptz)"
BAD_PARENTS = [
    ("SELECT ttl.enable_orphans('data', '{hash}', parents => '{metadata, nope}', age_column => 'created_at')",
     ['relation "nope" does not exist']),
    ("SELECT ttl.enable_orphans('data', '{hash}', parents => '{metadata, archive}', parent_key => '{{hash}, {h}}',"
     " age_column => 'created_at')",
     ["table public.archive has no unique index on (h)", "CREATE UNIQUE INDEX ON public.archive (h)"]),
    ("SELECT ttl.enable_orphans('data', '{hash}', parents => '{metadata, archive}', parent_key => '{{hash}, {n}}',"
     " age_column => 'created_at')", ['key column "hash" is text, but "n" of public.archive is integer']),
    ("SELECT ttl.enable_orphans('data', '{hash}', parents => '{metadata, archive}', parent_key => '{{hash}}',"
     " age_column => 'created_at')", ["2 parent tables but 1 lists of parent key columns"]),
    ("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', parents => '{archive}', age_column => 'created_at')",
     ["give the parent table (parent) or the parent tables (parents), not both"]),
    ("SELECT ttl.enable_orphans('data', '{hash}', parents => '{}', age_column => 'created_at')",
     ['"ttl_orphan_of" must name the parent table']),
    ("""SELECT ttl.set_orphan_options('data', '{"ttl_orphan_of": "metadata(hash), archive(h, n)",
        "ttl_orphan_key": "hash", "ttl_orphan_age_column": "created_at"}')""",
     ['"ttl_orphan_key" has 1 columns, but the key of parent public.archive in "ttl_orphan_of" has 2']),
    ("""SELECT ttl.set_orphan_options('data', '{"ttl_orphan_of": "metadata(hash), ",
        "ttl_orphan_key": "hash", "ttl_orphan_age_column": "created_at"}')""",
     ['value of "ttl_orphan_of" must name the parent tables', "'a(x), b(y)'"]),
    ("""SELECT ttl.set_orphan_options('data', '{"ttl_orphan_of": "metadata(hash, archive(h)",
        "ttl_orphan_key": "hash", "ttl_orphan_age_column": "created_at"}')""",
     ['value of "ttl_orphan_of" must name the parent tables']),
]
BAD += BAD_PARENTS


@pytest.mark.parametrize(("call", "expected"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_refused_and_changes_nothing(conn: Conn, call: str, expected: list[str]) -> None:
    conn.execute(SECOND_PARENT)
    before = catalog_state(conn)
    with pytest.raises(psycopg.Error) as info:
        conn.execute(call)
    text = str(info.value) + " " + (info.value.diag.message_hint or "")
    for fragment in expected:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    assert catalog_state(conn) == before
    assert conn.execute("SELECT count(*) FROM ttl.orphan_policy").fetchone() == (0,)


def test_only_the_owner_may_and_the_owner_must_read_the_parent(conn: Conn, dsn: str, connect: Any) -> None:
    conn.execute("CREATE ROLE orphan_owner LOGIN")
    conn.execute("CREATE TABLE mine (hash text, created_at timestamptz)")
    conn.execute("ALTER TABLE mine OWNER TO orphan_owner")
    conn.execute("GRANT USAGE ON SCHEMA public TO orphan_owner")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"cannot read table public\.metadata"):
        conn.execute("SELECT ttl.enable_orphans('mine', '{hash}', 'metadata', age_column => 'created_at')")
    other = connect(user="orphan_owner")
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"must be owner of table public\.data"):
        other.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at')")


def test_a_dropped_parent_takes_its_childrens_orphan_policies_with_it(conn: Conn, dsn: str) -> None:
    conn.execute("INSERT INTO data (hash, created_at) VALUES ('x', now() - interval '1 day')")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at')")
    with pytest.raises(psycopg.errors.DependentObjectsStillExist, match=r"orphan policy of public\.data"):
        conn.execute("ALTER TABLE data DROP COLUMN created_at")
    conn.execute("DROP TABLE metadata")
    assert conn.execute("SELECT count(*) FROM ttl.orphan_policy").fetchone() == (0,)
    conn.execute("CREATE TABLE metadata (hash text PRIMARY KEY)")  # recreated: its old children are not orphans
    assert expire(dsn) == [] and conn.execute("SELECT count(*) FROM data").fetchone() == (1,)


RANGES = """
SELECT o.run_id, o.range_no, o.first_block, o.end_block, o.next_block, o.status, o.rows_examined, o.rows_deleted
  FROM ttl.block_range o WHERE o.run_id = %s ORDER BY o.range_no
"""


def test_a_stopped_pass_resumes_from_its_checkpoint(conn: Conn, dsn: str) -> None:
    conn.execute("INSERT INTO data (hash, body, created_at) SELECT 'gone' || g, repeat('x', 200),"
                 " now() - interval '1 day' FROM generate_series(1, 20000) g")
    conn.execute("ANALYZE data")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
                 " delete_batch_size => 200, range_bytes => 262144)")
    stop = threading.Event()

    [first] = expire(dsn, ["data"], stop=stop, progress=StopAfter(stop, 7))
    assert first.status == "partial" and 0 < first.orphans_deleted < 20000
    ranges = conn.execute(RANGES, (first.run_id,)).fetchall()
    # ranges of 32 blocks (256 kB), done in order; the last one stopped part-way (about 6
    # blocks a DELETE: 200 orphans)
    assert [r[1] for r in ranges] == list(range(len(ranges))) and len(ranges) > 1
    assert all(r[5] == "ok" and r[4] == r[3] == (r[1] + 1) * 32 for r in ranges[:-1])
    stopped = ranges[-1]
    assert stopped[5] == "partial" and stopped[2] < stopped[4] < stopped[3]
    assert sum(r[7] for r in ranges) == first.orphans_deleted
    assert sum(r[6] for r in ranges) == first.rows_selected  # every row of the blocks, examined
    # nothing left before the checkpoint, everything after it still there
    below = conn.execute("SELECT count(*) FROM data WHERE ctid < %s::tid", (f"({stopped[4]},0)",)).fetchone()
    above = conn.execute("SELECT count(*) FROM data WHERE ctid >= %s::tid", (f"({stopped[4]},0)",)).fetchone()
    assert below == (0,) and above == (20000 - first.orphans_deleted,)
    [second] = expire(dsn, ["data"])
    resumed = conn.execute(RANGES, (second.run_id,)).fetchall()
    # the second pass started in the range the first stopped in, where it stopped, and
    # did none of the ranges before it again
    assert resumed[0][1:3] == (stopped[1], stopped[4])
    assert [r[1] for r in resumed] == list(range(stopped[1], stopped[1] + len(resumed)))
    assert all(r[5] == "ok" for r in resumed)
    assert second.status == "ok" and first.orphans_deleted + second.orphans_deleted == 20000


def _wait_for_range_progress(conn: Conn, rows: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        row = conn.execute("SELECT coalesce(sum(rows_deleted), 0) FROM ttl.block_range").fetchone()
        if row and row[0] >= rows:
            return
        time.sleep(0.02)
    raise AssertionError("the pass never got that far")


def _wait_for_engines_gone(conn: Conn) -> None:
    for _ in range(200):  # until their server sessions have gone too
        if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl engine'"
                        " AND datname = current_database()").fetchone() == (0,):
            return
        time.sleep(0.05)


@pytest.mark.slow
def test_a_killed_pass_resumes_where_its_last_range_committed(conn: Conn, dsn: str) -> None:
    conn.execute("INSERT INTO data (hash, body, created_at) SELECT 'gone' || g, repeat('x', 200),"
                 " now() - interval '1 day' FROM generate_series(1, 100000) g")
    conn.execute("ANALYZE data")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
                 " delete_batch_size => 20, range_bytes => 65536)")
    proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "run", "data", "--quiet", "--dsn", dsn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    try:
        _wait_for_range_progress(conn, 2000)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    _wait_for_engines_gone(conn)
    killed = conn.execute("SELECT run_id, status, rows_deleted FROM ttl.run_unit WHERE action = 'orphans'"
                          ).fetchone()
    assert killed is not None and killed[1] == "running" and 0 < killed[2] < 100000
    left = conn.execute("SELECT count(*) FROM data").fetchone()
    assert left == (100000 - killed[2],)  # the counters committed with the deletes: exact
    ranges = conn.execute(RANGES, (killed[0],)).fetchall()
    cut = ranges[-1]
    # killed in a range (the usual case), or between two (the last one had just ended)
    assert cut[5] in ("running", "ok") and all(r[5] == "ok" for r in ranges[:-1])
    assert sum(r[7] for r in ranges) == killed[2]
    [res] = expire(dsn, ["data"])
    # the killed run is closed, a range in progress too; the next pass starts in that range
    # at the block its last committed DELETE reached, or at the first block of the range after
    # the last one done
    assert conn.execute("SELECT status FROM ttl.run WHERE run_id = %s", (killed[0],)).fetchone() == ("interrupted",)
    if cut[5] == "running":
        assert conn.execute("SELECT status FROM ttl.block_range WHERE run_id = %s AND range_no = %s",
                            (killed[0], cut[1])).fetchone() == ("interrupted",)
        starts = (cut[1], cut[4])
    else:
        starts = (cut[1] + 1, cut[3])
    resumed = conn.execute(RANGES, (res.run_id,)).fetchall()
    assert resumed[0][1:3] == starts
    assert min(r[1] for r in resumed) == starts[0]
    assert res.status == "ok" and res.orphans_deleted == 100000 - killed[2]
    assert conn.execute("SELECT count(*) FROM data").fetchone() == (0,)


def test_two_processes_share_one_table_and_a_killed_ones_range_is_resumed(conn: Conn, dsn: str) -> None:
    """Two pg-ttl runs on one plain table split its ranges; one is killed with -9
    part-way through a range: that range is taken up at the block its last DELETE
    reached (by the other run, or the next pass), and no range is done twice."""
    conn.execute("INSERT INTO data (hash, body, created_at) SELECT 'gone' || g, repeat('x', 200),"
                 " now() - interval '1 day' FROM generate_series(1, 40000) g")
    conn.execute("ANALYZE data")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
                 " delete_batch_size => 20, range_bytes => 65536)")
    procs = [subprocess.Popen([sys.executable, "-m", "pg_ttl", "run", "data", "--quiet", "--dsn", dsn],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "NO_COLOR": "1"}) for _ in range(2)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both at work on the table's ranges
            row = conn.execute("SELECT count(DISTINCT run_id) FROM ttl.block_range WHERE rows_deleted > 0"
                               ).fetchone()
            if row == (2,):
                break
            time.sleep(0.01)
        os.kill(procs[0].pid, signal.SIGKILL)
        assert procs[1].wait(120) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
    _wait_for_engines_gone(conn)
    conn.execute("SELECT ttl.close_dead_runs()")
    killed_run = conn.execute("SELECT run_id FROM ttl.run WHERE status = 'interrupted'").fetchone()
    assert killed_run is not None
    both = conn.execute("SELECT DISTINCT run_id FROM ttl.block_range").fetchall()
    assert len(both) == 2  # both took part in one sweep
    first = conn.execute("SELECT min(sweep) FROM ttl.block_range").fetchone()
    assert first is not None
    # the next pass takes up what the killed run held, if the other one did not
    [res] = expire(dsn, ["data"])
    assert res.status == "ok" and conn.execute("SELECT count(*) FROM data").fetchone() == (0,)
    # every range of the sweep the two shared done ('ok') exactly once
    twice = conn.execute("SELECT range_no FROM ttl.block_range WHERE status = 'ok' AND sweep = %s"
                         " GROUP BY range_no HAVING count(*) > 1", first).fetchall()
    assert twice == []
    per_range = conn.execute("SELECT count(DISTINCT range_no), max(range_no) + 1, min(sweep_blocks / range_blocks)"
                             " FROM ttl.block_range WHERE status = 'ok' AND sweep = %s", first).fetchone()
    assert per_range is not None and per_range[0] == per_range[1] >= per_range[2] > 1
    # the killed run's range in progress: taken up where its last DELETE got to
    cut = conn.execute("SELECT range_no, next_block FROM ttl.block_range WHERE run_id = %s AND status <> 'ok'",
                       (killed_run[0],)).fetchall()
    for range_no, next_block in cut:
        assert conn.execute("SELECT first_block FROM ttl.block_range WHERE run_id <> %s AND range_no = %s"
                            " AND sweep = %s", (killed_run[0], range_no, first[0])).fetchall() == [(next_block,)]
    # each orphan deleted once: the ranges' counts add up to them all
    assert conn.execute("SELECT sum(rows_deleted) FROM ttl.block_range").fetchone() == (40000,)
    assert conn.execute("SELECT sum(rows_deleted) FROM ttl.block_range WHERE sweep = %s", first
                        ).fetchone() == (40000,)


def test_two_engines_split_the_ranges_of_one_table(conn: Conn, dsn: str) -> None:
    """Two engine connections with one cutoff (a shared scheduled round), held together
    after their first DELETE: both work the table, each range once."""
    conn.execute("INSERT INTO data (hash, body, created_at) SELECT 'gone' || g, repeat('x', 200),"
                 " now() - interval '1 day' FROM generate_series(1, 20000) g")
    conn.execute("ANALYZE data")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
                 " delete_batch_size => 200, range_bytes => 65536)")
    barrier = threading.Barrier(2, timeout=60)

    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    results: list[Any] = []
    engines = [threading.Thread(target=lambda: results.extend(expire(dsn, ["data"], cutoff=row[0],
                                                                     progress=Together(barrier))))
               for _ in range(2)]
    for t in engines:
        t.start()
    for t in engines:
        t.join(120)
    assert len(results) == 2 and all(r.status == "ok" for r in results)
    assert sum(r.orphans_deleted for r in results) == 20000
    done = conn.execute("SELECT run_id, range_no FROM ttl.block_range WHERE status = 'ok'").fetchall()
    assert {run for run, _ in done} == {r.run_id for r in results}  # both did ranges
    numbers = sorted(n for _, n in done)
    assert numbers == list(range(len(numbers)))  # every range once
    assert conn.execute("SELECT count(*) FROM ttl.block_range WHERE status <> 'ok'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM data").fetchone() == (0,)


@pytest.mark.slow
@pytest.mark.parametrize("age_column", ["created_at", None], ids=["age column", "no age column"])
def test_children_written_before_their_parents_survive_concurrent_passes(conn: Conn, dsn: str, connect: Any,
                                                                        age_column: str | None) -> None:
    """A writer inserts child then parent (separate transactions, the parent up to
    0.8 s later) and deletes some parents, while passes with min_age 2 s run: no
    child with a live parent is ever deleted; after the last pass (past min_age)
    every orphan is gone and every child with a parent stays. With an age column,
    and without one (the rows' transactions against the passes' xid clock)."""
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', min_age => '2 seconds',"
                 " age_column => %s, delete_batch_size => 10)", (age_column,))
    stop = threading.Event()
    deleted_parents: set[str] = set()
    errors: list[BaseException] = []

    def writer() -> None:
        rnd = random.Random(7)
        w = connect()
        n = 0
        try:
            while not stop.is_set():
                n += 1
                key = f"w{n}"
                w.execute("INSERT INTO data (hash) VALUES (%s)", (key,))
                if rnd.random() < 0.2:
                    continue  # never gets a parent: an orphan
                time.sleep(rnd.uniform(0, 0.8))
                w.execute("INSERT INTO metadata (hash) VALUES (%s)", (key,))
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    def deleter() -> None:
        d = connect()
        try:
            while not stop.is_set():
                time.sleep(0.3)
                row = d.execute("DELETE FROM metadata WHERE hash = (SELECT hash FROM metadata"
                                " ORDER BY random() LIMIT 1) RETURNING hash").fetchone()
                if row:
                    deleted_parents.add(str(row[0]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=deleter)]
    for t in threads:
        t.start()
    end = time.monotonic() + 8
    passes = 0
    while time.monotonic() < end:
        expire(dsn, ["data"])
        passes += 1
        # invariant at every instant: every child whose parent exists is still there
        missing = conn.execute("SELECT count(*) FROM metadata m WHERE NOT EXISTS"
                               " (SELECT 1 FROM data d WHERE d.hash = m.hash)").fetchone()
        assert missing == (0,), "a child with a live parent was deleted"
    stop.set()
    for t in threads:
        t.join(10)
    assert not errors, errors
    expire(dsn, ["data"])  # (without an age column: a clock sample after the last write)
    time.sleep(2.2)
    expire(dsn, ["data"])
    orphans = conn.execute("SELECT count(*) FROM data d WHERE NOT EXISTS"
                           " (SELECT 1 FROM metadata m WHERE m.hash = d.hash)").fetchone()
    assert orphans == (0,) and passes >= 3
    kept = conn.execute("SELECT count(*) FROM metadata").fetchone()
    assert kept is not None and kept[0] > 0
    assert conn.execute("SELECT count(*) FROM data").fetchone() == kept
    deleted = conn.execute("SELECT sum(rows_deleted) FROM ttl.run_unit WHERE action = 'orphans'").fetchone()
    assert deleted is not None and deleted[0] >= len(deleted_parents)


def test_plan_counts_the_orphans_of_each_partition_and_changes_nothing(conn: Conn, cli: Any, dsn: str) -> None:
    conn.execute("CREATE TABLE parts (hash text, k int, created_at timestamptz) PARTITION BY LIST (k)")
    conn.execute("CREATE TABLE parts_1 PARTITION OF parts FOR VALUES IN (1)")
    conn.execute("CREATE TABLE parts_2 PARTITION OF parts FOR VALUES IN (2)")
    conn.execute("INSERT INTO metadata VALUES ('a')")
    conn.execute("INSERT INTO parts VALUES ('a', 1, now() - interval '1 day'), ('x', 1, now() - interval '1 day'),"
                 " ('y', 2, now() - interval '1 day'), ('z', 2, now() - interval '1 day'), ('w', 2, now())")
    conn.execute("SELECT ttl.enable_orphans('parts', '{hash}', 'metadata', age_column => 'created_at')")
    result = cli("plan", "parts", "--json", "--dsn", dsn)
    assert result.returncode == 0, result.stderr
    planned = {p["unit"]: (p["action"], p["rows"], p["total_rows"]) for p in json.loads(result.stdout)}
    assert planned == {"parts_1": ("orphans", 1, 2), "parts_2": ("orphans", 2, 3)}
    assert conn.execute("SELECT count(*) FROM parts").fetchone() == (5,)
    assert "delete orphans" in cli("plan", "parts", "--dsn", dsn).stdout


def test_two_engines_share_a_partitioned_child_and_no_range_is_done_twice(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE parts (hash text, k int, created_at timestamptz) PARTITION BY LIST (k)")
    for k in range(6):
        conn.execute(f"CREATE TABLE parts_{k} PARTITION OF parts FOR VALUES IN ({k})")
    conn.execute("INSERT INTO parts SELECT 'gone' || g, g % 6, now() - interval '1 day'"
                 " FROM generate_series(1, 60000) g")
    conn.execute("SELECT ttl.enable_orphans('parts', '{hash}', 'metadata', age_column => 'created_at',"
                 " delete_batch_size => 500, range_bytes => 65536)")
    results: list[Any] = []
    # one cutoff for both, as workers sharing a scheduled round have
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    engines = [threading.Thread(target=lambda: results.extend(expire(dsn, ["parts"], cutoff=row[0])))
               for _ in range(2)]
    for t in engines:
        t.start()
    for t in engines:
        t.join(120)
    assert len(results) == 2 and sum(r.orphans_deleted for r in results) == 60000
    # each range of each partition done once, by one engine or the other
    done = conn.execute("SELECT unit_relid::regclass::text, range_no, count(*) FROM ttl.block_range"
                        " WHERE status = 'ok' GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    assert {n for *_, n in done} == {1} and {u for u, *_ in done} == {f"parts_{k}" for k in range(6)}
    sizes = dict(conn.execute("SELECT c.relname::text, pg_relation_size(c.oid) / 8192 FROM pg_class c"
                              " WHERE c.relname LIKE 'parts\\_%'").fetchall())
    assert len(done) == sum(-(-int(b) // 8) for b in sizes.values())
    assert conn.execute("SELECT count(*) FROM parts").fetchone() == (0,)


def test_the_worker_runs_a_table_with_only_an_orphan_policy(conn: Conn, cli: Any, dsn: str) -> None:
    _fill(conn)
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
                 " job_cron => '@daily')")
    assert conn.execute("SELECT job_cron, kind FROM ttl.worker_tables WHERE relid = 'data'::regclass"
                        ).fetchone() == ("@daily", "orphans")
    result = cli("worker", "--once", "--allow-superuser", "--dsn", dsn, timeout=60)
    assert result.returncode == 0, result.stderr
    assert conn.execute("SELECT count(*) FILTER (WHERE hash LIKE 'gone%') FROM data").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM data").fetchone() == (140,)
    status = cli("status", "--json", "--dsn", dsn)
    assert status.returncode == 0, status.stderr
    assert "data" in status.stdout


def test_options_as_ttl_ddl_spells_them(conn: Conn) -> None:
    conn.execute("""SELECT ttl.set_orphan_options('data', '{"ttl_orphan_of": "public.metadata (hash)",
                    "ttl_orphan_key": "hash", "ttl_orphan_min_age": "2 hours",
                    "ttl_orphan_age_column": "created_at"}')""")
    described = dict(conn.execute("SELECT option, value FROM ttl.describe('data')").fetchall())
    assert (described["ttl_orphan_of"], described["ttl_orphan_key"], described["ttl_orphan_min_age"]) == (
        "public.metadata(hash)", "hash", "02:00:00")
    conn.execute("""SELECT ttl.set_orphan_options('data', '{"ttl_orphan_min_age": "5 minutes"}')""")  # merged
    assert conn.execute("SELECT min_age::text, job_cron FROM ttl.orphan_policy").fetchone() == ("00:05:00", None)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown orphan option"):
        conn.execute("""SELECT ttl.set_orphan_options('data', '{"ttl_orphan_nope": "1"}')""")


def test_the_command_line_sets_and_resets_a_policy(conn: Conn, cli: Any, dsn: str) -> None:
    _fill(conn)
    res = cli("orphans", "set", "data", "--key", "hash", "--parent", "metadata", "--age-column", "created_at",
              "--min-age", "30 minutes", "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    assert conn.execute("SELECT min_age::text FROM ttl.orphan_policy").fetchone() == ("00:30:00",)
    assert "ttl_orphan_of" in cli("describe", "data", "--dsn", dsn).stdout
    res = cli("run", "data", "--json", "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["orphans_deleted"] == 60
    bad = cli("orphans", "set", "data", "--key", "hash", "--parent", "metadata", "--age-column", "body",
              "--dsn", dsn)
    assert bad.returncode == 1 and "cannot be an age column" in bad.stderr
    assert cli("orphans", "reset", "data", "--dsn", dsn).returncode == 0
    assert conn.execute("SELECT count(*) FROM ttl.orphan_policy").fetchone() == (0,)
    assert "pg-ttl orphans set" in cli("orphans", "set", "--help").stdout


def test_ttl_ddl_sets_dumps_and_resets_an_orphan_policy(conn: Conn) -> None:
    from pg_ttl.ddl.apply import apply
    from pg_ttl.ddl.dump import dump

    conn.execute("CREATE TABLE parent2 (a int, b text, PRIMARY KEY (a, b))")
    conn.execute("CREATE TABLE kids (pa int, pb text, made timestamptz)")
    apply(conn, """ALTER TABLE data SET (ttl_orphan_of = 'metadata(hash)', ttl_orphan_key = 'hash',
                                        ttl_orphan_min_age = '2 hours', ttl_orphan_age_column = 'created_at');
                   ALTER TABLE kids SET (ttl_orphan_of = 'parent2(a, b)', ttl_orphan_key = 'pa, pb',
                                        ttl_orphan_age_column = 'made', ttl_orphan_delete_batch_size = 10);
                   ALTER TABLE metadata SET (ttl_expire_after = '30 days', ttl_column = 'created_at',
                                            ttl_orphan_of = 'metadata', ttl_orphan_key = 'hash',
                                            ttl_orphan_age_column = 'created_at');""", "orphans.sql")
    before = sorted(conn.execute("SELECT relid::regclass::text, key_attnums, parent_relids::regclass[]::text,"
                                 " parent_attnums, min_age, age_attnum, delete_batch_size FROM ttl.orphan_policy"
                                 ).fetchall())
    assert len(before) == 3
    text = dump(conn)
    assert "ALTER TABLE public.kids SET (ttl_orphan_of = 'public.parent2(a, b)', ttl_orphan_key = 'pa, pb'" in text
    apply(conn, "ALTER TABLE data RESET (ttl_orphan_of); ALTER TABLE kids RESET (ttl);"
                " ALTER TABLE metadata RESET (ttl_orphan_min_age);", "reset.sql")
    assert conn.execute("SELECT relid::regclass::text, min_age::text FROM ttl.orphan_policy").fetchall() == [
        ("metadata", "01:00:00")]  # reset to its default; the others are gone
    assert conn.execute("SELECT count(*) FROM ttl.policy").fetchone() == (1,)  # metadata's own TTL stays
    apply(conn, "ALTER TABLE metadata RESET (ttl);", "reset2.sql")
    apply(conn, text, "dump.sql")  # the dump recreates all three
    after = sorted(conn.execute("SELECT relid::regclass::text, key_attnums, parent_relids::regclass[]::text,"
                                " parent_attnums, min_age, age_attnum, delete_batch_size FROM ttl.orphan_policy"
                                ).fetchall())
    assert after == before


def test_status_shows_each_orphan_policys_sweep(conn: Conn, dsn: str, cli: Any) -> None:
    _fill(conn)
    conn.execute("SELECT ttl.enable_orphans('data', key => '{hash}', parent => 'metadata', min_age => '1 hour',"
                 " age_column => 'created_at')")
    conn.execute("CREATE TABLE logs (id bigserial PRIMARY KEY, hash text NOT NULL)")  # no age column: waits
    conn.execute("SELECT ttl.enable_orphans('logs', key => '{hash}', parent => 'metadata', min_age => '1 hour')")
    conn.execute("SELECT ttl.enable('metadata', expire_after => '30 days', column_name => 'created_at')")
    before = json.loads(cli("status", "--dsn", dsn, "--json", "--no-estimates").stdout)
    by_table = {t["table"]: t for t in before["tables"]}
    assert by_table["data"]["orphans"]["ranges"] == 0  # no sweep yet
    assert by_table["metadata"]["orphans"] is None
    expire(dsn, ["data", "logs"])
    after = json.loads(cli("status", "--dsn", dsn, "--json", "--no-estimates").stdout)
    data = {t["table"]: t for t in after["tables"]}["data"]["orphans"]
    assert (data["done"], data["given_up"], data["failing"], data["last_deleted"]) == (data["ranges"], 0, 0, 60)
    assert data["ranges"] >= 1 and data["waiting"] is None
    logs = {t["table"]: t for t in after["tables"]}["logs"]["orphans"]
    assert logs["waiting"] and "no age column" in logs["waiting"]
    text = cli("status", "--dsn", dsn, "--no-estimates").stdout
    assert f"data: orphans sweep {data['ranges']}/{data['ranges']} ranges done, 60 deleted by the last run" in text
