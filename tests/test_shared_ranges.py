"""Row expiry of a big table shared by several runs: a table of two ranges of
row_range_bytes or more, swept in ctid order, is swept range by range by every run
that works on it at once (ttl.block_range, work 'delete'), each range done by one of
them; a killed run's range is taken up at the block its last DELETE reached."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire
from tests.helpers import StopAfter, Together, wait_for_engine_gone
from tests.worker_proc import wait_until

Conn = psycopg.Connection[Any]

SCHEMA = """
CREATE TABLE events (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, body text);
SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at');
"""
# every range's DELETE statements take a while: runs started together overlap
SLOW_DELETES = """
CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.01); RETURN NULL; END $$;
CREATE TRIGGER slow AFTER DELETE ON events FOR EACH STATEMENT EXECUTE FUNCTION slow();
"""
RANGES = """
SELECT run_id, range_no, first_block, end_block, next_block, status, rows_examined, rows_deleted
  FROM ttl.block_range WHERE work = 'delete' AND run_id = %s ORDER BY range_no
"""


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.execute(SCHEMA)
    db.commit()
    db.autocommit = True
    # ranges of 8 blocks (64 kB): rows of ~250 bytes, about 30 a block
    db.execute("UPDATE ttl.settings SET value = '64kB' WHERE name = 'row_range_bytes'")
    return db


def _fill(conn: Conn, rows: int) -> int:
    """``rows`` rows, every third one live; returns the expired ones."""
    conn.execute("INSERT INTO events (created_at, body) SELECT now() - CASE WHEN g %% 3 = 0 THEN interval '1 day'"
                 " ELSE interval '40 days' END, repeat('x', 200) FROM generate_series(1, %s) g", (rows,))
    conn.execute("VACUUM ANALYZE events")  # relpages: the size the engine judges the table by
    return rows - rows // 3


def _strategies(conn: Conn) -> list[tuple[int, str]]:
    return conn.execute("SELECT run_id, strategy FROM ttl.run_unit WHERE action = 'delete' ORDER BY run_id"
                        ).fetchall()


def test_two_runs_at_once_split_a_big_tables_ranges(conn: Conn, dsn: str) -> None:
    expired = _fill(conn, 20000)
    conn.execute(SLOW_DELETES)
    barrier = threading.Barrier(2, timeout=60)

    results: list[Any] = []
    runs = [threading.Thread(target=lambda: results.extend(expire(dsn, ["events"], progress=Together(barrier))))
            for _ in range(2)]
    for t in runs:
        t.start()
    for t in runs:
        t.join(120)
    assert len(results) == 2 and all(r.status == "ok" for r in results), results
    assert {s for _, s in _strategies(conn)} == {"ranges"}
    assert sum(r.rows_deleted for r in results) == expired
    done = conn.execute("SELECT run_id, range_no, rows_deleted FROM ttl.block_range"
                        " WHERE work = 'delete' AND status = 'ok'").fetchall()
    assert {run for run, _, _ in done} == {r.run_id for r in results}  # both did ranges
    numbers = sorted(n for _, n, _ in done)
    assert numbers == list(range(len(numbers))) and len(numbers) > 2  # every range once
    assert sum(n for *_, n in done) == expired
    # the units' counters (history) agree with the ranges'
    assert conn.execute("SELECT sum(rows_deleted) FROM ttl.run_unit WHERE action = 'delete'").fetchone() == (expired,)
    assert conn.execute("SELECT count(*), count(*) FILTER (WHERE created_at > now() - interval '30 days')"
                        " FROM events").fetchone() == (20000 - expired, 20000 - expired)


def test_a_stopped_run_is_resumed_where_its_last_delete_committed(conn: Conn, dsn: str, cli: Any) -> None:
    expired = _fill(conn, 20000)
    stop = threading.Event()

    # DELETEs of ~50 rows (~2 blocks: a rate limit keeps them to delete_batch_size), 4 a range
    conn.execute("SELECT ttl.set_options('events', %s)",
                 ('{"delete_batch_size": "50", "delete_rate_limit": "1000000"}',))
    [first] = expire(dsn, ["events"], stop=stop, progress=StopAfter(stop, 9))
    assert first.status == "partial" and 0 < first.rows_deleted < expired
    ranges = conn.execute(RANGES, (first.run_id,)).fetchall()
    assert all(r[5] == "ok" and r[4] == r[3] for r in ranges[:-1])
    stopped = ranges[-1]
    assert stopped[5] == "partial" and stopped[2] < stopped[4] < stopped[3]
    assert sum(r[7] for r in ranges) == first.rows_deleted
    # nothing expired left before the checkpoint; after it, all still there
    left = conn.execute("SELECT count(*) FILTER (WHERE ctid < %(at)s::tid), count(*) FILTER (WHERE ctid >= %(at)s::tid)"
                        " FROM events WHERE created_at < now() - interval '30 days'",
                        {"at": f"({stopped[4]},0)"}).fetchone()
    assert left == (0, expired - first.rows_deleted)
    # pg-ttl status shows the sweep left part-way
    total = conn.execute("SELECT max(ceil(sweep_blocks::numeric / range_blocks))::int FROM ttl.block_range").fetchone()
    assert total is not None and total[0] > len(ranges)
    shown = cli("status", "events", "--json", "--no-estimates", "--dsn", dsn)
    assert shown.returncode == 0, shown.stderr
    [table] = json.loads(shown.stdout)["tables"]
    assert table["row_sweep"] == {"ranges": total[0], "done": len(ranges) - 1, "running": 0}
    shown = cli("status", "events", "--no-estimates", "--dsn", dsn)
    assert f"events: rows swept in shared ranges, {len(ranges) - 1}/{total[0]} ranges done" in shown.stdout
    [second] = expire(dsn, ["events"])
    resumed = conn.execute(RANGES, (second.run_id,)).fetchall()
    # the next run starts in the range the first stopped in, at the block it reached, and
    # does none of the ranges before it again
    assert resumed[0][1:3] == (stopped[1], stopped[4])
    assert min(r[1] for r in resumed) == stopped[1]
    assert second.status == "ok" and first.rows_deleted + second.rows_deleted == expired
    assert conn.execute("SELECT count(*) FROM events WHERE created_at < now() - interval '30 days'"
                        ).fetchone() == (0,)
    shown = cli("status", "events", "--json", "--no-estimates", "--dsn", dsn)
    assert json.loads(shown.stdout)["tables"][0]["row_sweep"] is None  # finished


def test_a_killed_run_is_taken_up_by_the_next_at_its_checkpoint(conn: Conn, dsn: str) -> None:
    expired = _fill(conn, 20000)
    conn.execute(SLOW_DELETES)
    proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "run", "events", "--quiet", "--dsn", dsn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    try:
        wait_until(lambda: conn.execute("SELECT count(*) FROM ttl.block_range WHERE work = 'delete'"
                                        " AND status = 'ok'").fetchone()[0] >= 3,
                   timeout=60, interval=0.01, what="3 ranges done")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    wait_for_engine_gone(conn)  # its server session too
    killed = conn.execute("SELECT run_id, rows_deleted FROM ttl.run_unit WHERE action = 'delete'").fetchone()
    assert killed is not None and 0 < killed[1] < expired
    # the counters committed with the deletes: exact
    assert conn.execute("SELECT count(*) FROM events").fetchone() == (20000 - killed[1],)
    ranges = conn.execute(RANGES, (killed[0],)).fetchall()
    cut = ranges[-1]
    assert cut[5] in ("running", "ok") and all(r[5] == "ok" for r in ranges[:-1])
    [res] = expire(dsn, ["events"])
    assert conn.execute("SELECT status FROM ttl.run WHERE run_id = %s", (killed[0],)).fetchone() == ("interrupted",)
    starts = (cut[1], cut[4]) if cut[5] == "running" else (cut[1] + 1, cut[3])
    resumed = conn.execute(RANGES, (res.run_id,)).fetchall()
    assert resumed[0][1:3] == starts  # where the killed run's last DELETE got to
    done_before = {r[1] for r in ranges if r[5] == "ok"}
    assert not done_before & {r[1] for r in resumed}  # no range done twice
    assert res.status == "ok" and res.rows_deleted == expired - killed[1]


def test_what_is_not_shared(conn: Conn, dsn: str) -> None:
    """A small table, row_range_bytes 0, few expired rows found through an index, and a
    table with column TTLs: each swept by one run as before."""
    conn.execute("INSERT INTO events (created_at, body) SELECT now() - interval '40 days', 'x'"
                 " FROM generate_series(1, 100) g")
    conn.execute("VACUUM ANALYZE events")
    [small] = expire(dsn, ["events"])
    assert small.status == "ok" and _strategies(conn)[-1] == (small.run_id, "ctid")

    _fill(conn, 20000)
    conn.execute("UPDATE ttl.settings SET value = '0' WHERE name = 'row_range_bytes'")
    [off] = expire(dsn, ["events"])
    assert off.status == "ok" and _strategies(conn)[-1] == (off.run_id, "ctid")

    conn.execute("UPDATE ttl.settings SET value = '64kB' WHERE name = 'row_range_bytes'")
    conn.execute("CREATE INDEX ON events (created_at)")
    conn.execute("INSERT INTO events (created_at, body) VALUES (now() - interval '40 days', 'x')")
    conn.execute("ANALYZE events")
    [indexed] = expire(dsn, ["events"])
    assert indexed.rows_deleted == 1 and _strategies(conn)[-1] == (indexed.run_id, "index")

    conn.execute("DROP INDEX events_created_at_idx")
    conn.execute("ALTER TABLE events ADD COLUMN note text")
    conn.execute("SELECT ttl.enable_column('events', 'note', '1 day')")
    _fill(conn, 5000)
    [with_columns] = expire(dsn, ["events"])
    assert with_columns.status == "ok" and _strategies(conn)[-1] == (with_columns.run_id, "ctid")
    assert conn.execute("SELECT count(*) FROM ttl.block_range WHERE work = 'delete'").fetchone() == (0,)


@pytest.mark.parametrize("value", ["-1", "lots", "1 parsec"])
def test_a_bad_row_range_bytes_is_refused(conn: Conn, value: str) -> None:
    with pytest.raises(psycopg.Error):
        conn.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_range_bytes'", (value,))
    assert conn.execute("SELECT value FROM ttl.settings WHERE name = 'row_range_bytes'").fetchone() == ("64kB",)


def test_a_rate_limited_sweep_keeps_each_transaction_to_delete_batch_size(conn: Conn, dsn: str) -> None:
    """Waits come between transactions: a paced sweep (a rate limit here, the throttle
    alike) deletes about delete_batch_size rows a transaction, not ~50 ms' worth."""
    expired = _fill(conn, 20000)
    conn.execute("UPDATE ttl.settings SET value = '1MB' WHERE name = 'row_range_bytes'")  # ranges of 128 blocks
    conn.execute("SELECT ttl.set_options('events', %s)",
                 ('{"delete_batch_size": "200", "delete_rate_limit": "200000"}',))
    batches: list[int] = []

    class Batches:
        def unit_started(self, *a: Any) -> None:
            pass

        def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
            batches.append(deleted)

        def unit_finished(self, result: Any) -> None:
            pass

    [res] = expire(dsn, ["events"], progress=Batches())
    assert res.status == "ok" and res.rows_deleted == expired and _strategies(conn)[-1][1] == "ranges"
    assert sum(batches) == expired and len(batches) >= expired // 250
    assert max(batches) <= 250, batches  # about 200 (the density estimate is off by a block at most)


def test_a_run_stopped_before_the_range_it_claimed_gives_it_back(conn: Conn, dsn: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A run claims a range as it begins a sweep; stopped before it reaches it, it gives
    the range back (its row no longer 'running', its claim released) instead of keeping
    it for as long as its session lives (a worker's, or a reused Engine's)."""
    from pg_ttl.expire import Engine, sweeps

    _fill(conn, 3000)
    stop = threading.Event()
    join = sweeps._join_sweep

    def join_then_stop(*args: Any, **kwargs: Any) -> Any:
        sweep = join(*args, **kwargs)
        stop.set()  # as a SIGTERM arriving just then
        return sweep

    monkeypatch.setattr(sweeps, "_join_sweep", join_then_stop)
    with Engine(dsn) as engine:
        [res] = engine.expire(["events"], stop=stop)
        held = engine.conn.execute("SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_backend_pid()"
                                   " AND locktype = 'advisory'").fetchone()
    assert res.status == "partial" and held == (0,)
    assert conn.execute("SELECT status FROM ttl.block_range WHERE work = 'delete'").fetchall() == [("partial",)]
