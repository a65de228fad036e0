"""Orphan sweeps that cannot finish: a range that fails every time, a range held by a
run that is stuck. Neither keeps later sweeps (and the table's other ranges) from
being done, and both are visible in the history and in pg-ttl orphans status; and
pg-ttl plan / pg-ttl orphans plan estimate orphans per range without a scan."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire, orphans, sweeps

Conn = psycopg.Connection[Any]

SCHEMA = """
CREATE TABLE metadata (hash text PRIMARY KEY);
CREATE TABLE data (id bigserial PRIMARY KEY, hash text NOT NULL, body text,
                   created_at timestamptz NOT NULL DEFAULT now() - interval '1 day');
"""
# 8 blocks a range (64 kB); rows of ~250 bytes, about 30 a block: 4 ranges or so
POLICY = ("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
          " delete_batch_size => 50, range_bytes => 65536)")


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.execute(SCHEMA)
    db.commit()
    db.autocommit = True
    return db


def _fill(conn: Conn, rows: int = 1000) -> None:
    # every 10th row has a parent; the others are orphans
    conn.execute("INSERT INTO metadata SELECT 'k' || g FROM generate_series(1, %s) g WHERE g %% 10 = 0", (rows,))
    conn.execute("INSERT INTO data (hash, body) SELECT 'k' || g, repeat('x', 200) FROM generate_series(1, %s) g",
                 (rows,))


def _block_of(conn: Conn, hash_: str) -> int:
    row = conn.execute("SELECT (ctid::text::point)[0]::int FROM data WHERE hash = %s", (hash_,)).fetchone()
    assert row is not None
    return int(row[0])


def _status(cli: Any, dsn: str) -> dict[str, Any]:
    res = cli("orphans", "status", "data", "--json", "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    [report] = json.loads(res.stdout)
    [unit] = report["units"]
    return dict(unit)


def test_a_range_that_always_fails_is_given_up_and_blocks_no_later_sweep(conn: Conn, dsn: str, cli: Any) -> None:
    _fill(conn)
    poison_block = _block_of(conn, "k301")
    poison_range = poison_block // 8
    conn.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS"
                 " $$BEGIN RAISE EXCEPTION 'row % may not go', OLD.hash; END$$")
    conn.execute("CREATE TRIGGER refuse BEFORE DELETE ON data FOR EACH ROW WHEN (OLD.hash = 'k301')"
                 " EXECUTE FUNCTION refuse()")
    conn.execute(POLICY)
    ranges = _block_of(conn, "k1000") // 8 + 1
    assert ranges >= 3 and 0 < poison_range < ranges - 1

    # every run: the other ranges are done; the bad one fails, with its error, and so does the run
    runs = []
    for attempt in range(1, sweeps.RANGE_ATTEMPTS + 1):
        [res] = expire(dsn, ["data"])
        runs.append(res)
        assert res.status == "failed" and "row k301 may not go" in (res.error or "")
        state = _status(cli, dsn)
        assert state["last_status"] == "failed" and "row k301 may not go" in state["last_error"]
        if attempt < sweeps.RANGE_ATTEMPTS:
            assert state["ranges_failing"] == [{"range": poison_range, "failures": attempt,
                                                "error": "row k301 may not go"}]
            assert state["ranges_done"] == state["ranges"] - 1 and state["ranges_given_up"] == []
    # the first run did every other range: the orphans there are gone, those of the bad range stay
    assert runs[0].orphans_deleted > 0
    left = conn.execute("SELECT count(*) FILTER (WHERE (ctid::text::point)[0]::int / 8 <> %s),"
                        " count(*) FILTER (WHERE (ctid::text::point)[0]::int / 8 = %s)"
                        " FROM data d WHERE NOT EXISTS (SELECT 1 FROM metadata m WHERE m.hash = d.hash)",
                        (poison_range, poison_range)).fetchone()
    assert left is not None and left[0] == 0 and left[1] > 0
    failed = conn.execute("SELECT run_id, status, error FROM ttl.block_range WHERE range_no = %s ORDER BY run_id",
                          (poison_range,)).fetchall()
    assert [(r, s) for r, s, _ in failed] == [(res.run_id, "failed") for res in runs]
    assert all("row k301 may not go" in e for *_, e in failed)
    # after RANGE_ATTEMPTS runs the range is given up: the sweep is finished
    state = _status(cli, dsn)
    first_sweep = state["sweep"]
    assert state["ranges_given_up"] == [{"range": poison_range, "error": "row k301 may not go"}]
    assert state["ranges_done"] == state["ranges"] - 1 and state["ranges_failing"] == []
    text = cli("orphans", "status", "data", "--dsn", dsn)
    assert "row k301 may not go" in text.stdout and "finished" in text.stdout

    # the next run begins a new sweep: new orphans in the other ranges go, the bad range is tried again
    conn.execute("DELETE FROM metadata WHERE hash IN ('k10', 'k990')")
    [res] = expire(dsn, ["data"])
    assert res.status == "failed" and res.orphans_deleted == 2
    state = _status(cli, dsn)
    assert state["sweep"] == res.run_id != first_sweep
    assert state["ranges_failing"] == [{"range": poison_range, "failures": 1, "error": "row k301 may not go"}]
    assert conn.execute("SELECT count(*) FROM data WHERE hash IN ('k10', 'k990')").fetchone() == (0,)


def test_a_range_held_by_a_stuck_run_is_given_up_and_a_new_sweep_begins(conn: Conn, dsn: str, cli: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stops answering while it holds the first range (its session alive, as with
    a client gone without the server knowing): the other runs do the other ranges,
    count the held range as a failed attempt once it was held STALE_HOLD_SECONDS, give
    it up after RANGE_ATTEMPTS, and begin a new sweep without it."""
    _fill(conn)
    conn.execute(POLICY)
    held = threading.Event()
    release = threading.Event()

    class Stuck:
        def unit_started(self, *a: Any) -> None:
            pass

        def batch_done(self, *a: Any) -> None:
            if not held.is_set():
                held.set()
                release.wait(120)

        def unit_finished(self, result: Any) -> None:
            pass

    stuck_results: list[Any] = []
    stuck = threading.Thread(target=lambda: stuck_results.extend(expire(dsn, ["data"], progress=Stuck())))
    stuck.start()
    try:
        assert held.wait(60)
        holder = conn.execute("SELECT run_id, range_no FROM ttl.block_range WHERE status = 'running'").fetchone()
        assert holder is not None and holder[1] == 0
        # held for less than STALE_HOLD_SECONDS: the range is another run's, nothing more
        [res] = expire(dsn, ["data"])
        assert res.status == "ok" and _status(cli, dsn)["ranges_failing"] == []
        monkeypatch.setattr(sweeps, "STALE_HOLD_SECONDS", 0.0)
        for attempt in range(1, sweeps.RANGE_ATTEMPTS):
            [res] = expire(dsn, ["data"])
            assert res.status == "partial"
            state = _status(cli, dsn)
            assert state["ranges_failing"] == [{"range": 0, "failures": attempt, "error": state["ranges_failing"][0]
                                                ["error"]}]
            assert f"held by run {holder[0]}" in state["ranges_failing"][0]["error"]
        [res] = expire(dsn, ["data"])
        state = _status(cli, dsn)
        assert state["ranges_given_up"][0]["range"] == 0 and state["ranges_done"] == state["ranges"] - 1
        # a new sweep, though its first range is held still
        conn.execute("DELETE FROM metadata WHERE hash = 'k990'")
        [res] = expire(dsn, ["data"])
        state = _status(cli, dsn)
        new_sweep = res.run_id
        assert state["sweep"] == new_sweep and res.orphans_deleted == 1 and res.status == "partial"
        assert conn.execute("SELECT count(*) FROM data WHERE hash = 'k990'").fetchone() == (0,)
        # held still, by the run of the sweep before: given up in this one too, and the next begins
        for _ in range(sweeps.RANGE_ATTEMPTS - 1):
            [res] = expire(dsn, ["data"])
        state = _status(cli, dsn)
        assert state["sweep"] == new_sweep and [r["range"] for r in state["ranges_given_up"]] == [0]
        [res] = expire(dsn, ["data"])
        assert _status(cli, dsn)["sweep"] == res.run_id != new_sweep
    finally:
        release.set()
        stuck.join(120)
    # the stuck run, let go, finishes its range
    assert stuck_results and stuck_results[0].status == "ok"
    assert conn.execute("SELECT count(*) FROM data d WHERE NOT EXISTS"
                        " (SELECT 1 FROM metadata m WHERE m.hash = d.hash)").fetchone() == (0,)


def test_plan_estimates_orphans_per_range_from_a_few_blocks(conn: Conn, dsn: str, cli: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """pg-ttl orphans plan: per range of the sweep a run would make, the rows and orphans,
    counted whole in a small range, estimated from SAMPLE_BLOCKS blocks in a larger one
    (and said to be); pg-ttl plan shows their sum; nothing changes."""
    conn.execute("INSERT INTO metadata SELECT 'k' || g FROM generate_series(1, 20000) g WHERE g % 2 = 0")
    conn.execute("INSERT INTO data (hash, body) SELECT 'k' || g, repeat('x', 200) FROM generate_series(1, 20000) g")
    conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', age_column => 'created_at',"
                 " range_bytes => 524288)")  # 64 blocks a range: estimated from 8 of them
    res = cli("orphans", "plan", "data", "--json", "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    [report] = json.loads(res.stdout)
    ranges = report["ranges"]
    blocks = conn.execute("SELECT pg_relation_size('data') / 8192").fetchone()
    assert blocks is not None and len(ranges) == -(-int(blocks[0]) // 64) >= 3
    assert [r["range"] for r in ranges] == list(range(len(ranges)))
    assert all(not r["exact"] for r in ranges[:-1])
    for r in ranges:
        exact = conn.execute("SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM metadata m"
                             " WHERE m.hash = d.hash)) FROM data d WHERE ctid >= %s::tid AND ctid < %s::tid",
                             (f"({r['first_block']},0)", f"({r['end_block']},0)")).fetchone()
        assert exact is not None
        # half the rows of every block are orphans: a sample of 8 blocks is close
        assert abs(r["rows"] - exact[0]) <= 0.1 * exact[0] and abs(r["orphans"] - exact[1]) <= 0.1 * exact[1]
    # the same, the ranges sampled one statement each (as a large table's are, 64 a statement)
    monkeypatch.setattr(orphans, "SAMPLE_RANGES_PER_STATEMENT", 1)
    with psycopg.connect(dsn, autocommit=True) as other:
        relid = other.execute("SELECT 'data'::regclass::oid").fetchone()
        assert relid is not None
        [rep] = orphans.report(other, [int(relid[0])], estimate=True)
    assert [(e.range_no, e.rows, e.orphans) for e in rep.ranges["data"]] == [
        (r["range"], r["rows"], r["orphans"]) for r in ranges]
    planned = json.loads(cli("plan", "data", "--json", "--dsn", dsn).stdout)
    assert [(p["action"], p["rows"]) for p in planned] == [("orphans", sum(r["orphans"] for r in ranges))]
    assert "estimated" in cli("orphans", "plan", "data", "--dsn", dsn).stdout
    assert conn.execute("SELECT count(*) FROM data").fetchone() == (20000,)
    assert conn.execute("SELECT count(*) FROM ttl.run").fetchone() == (0,)


def test_status_before_any_run_and_for_a_table_without_a_policy(conn: Conn, dsn: str, cli: Any) -> None:
    conn.execute(POLICY)
    state = _status(cli, dsn)
    assert state["sweep"] is None and state["last_run"] is None
    assert "none yet" in cli("orphans", "status", "--dsn", dsn).stdout
    bad = cli("orphans", "status", "metadata", "--dsn", dsn)
    assert bad.returncode != 0 and "metadata" in bad.stderr
