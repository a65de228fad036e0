"""Several workers on one database, a server restart under a running worker, and the idle cost."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from tests.worker_proc import WorkerProcess, wait_until

FAST = ("--poll-interval", "0.5", "--max-backoff", "1")
PARTITIONS = 12
EXPIRED_PER_PARTITION = 1500


def _partitioned(conn: psycopg.Connection[Any], rate: int = 4000) -> None:
    conn.execute("CREATE TABLE pt (id bigint PRIMARY KEY, created_at timestamptz NOT NULL) PARTITION BY HASH (id)")
    for i in range(PARTITIONS):
        conn.execute(f"CREATE TABLE pt_{i:02d} PARTITION OF pt FOR VALUES WITH (MODULUS {PARTITIONS}, REMAINDER {i})")
    # Hash partitions are always row-deletion units: every partition is real work.
    conn.execute("INSERT INTO pt SELECT g, now() - interval '3 days' FROM generate_series(1, %s) g",
                 (PARTITIONS * EXPIRED_PER_PARTITION,))
    conn.execute("INSERT INTO pt SELECT g, now() FROM generate_series(1000001, 1000240) g")
    conn.execute("ANALYZE pt")
    # Slow enough (rate-limited per worker) that the workers overlap.
    conn.execute("SELECT ttl.enable('pt', expire_after => '1 day', column_name => 'created_at', "
                 "delete_batch_size => 100, select_batch_size => 500, delete_rate_limit => %s)", (rate,))


@pytest.mark.parametrize(("workers", "late"), [(2, 0), (3, 1)])
def test_workers_split_a_partitioned_table_without_overlap(dsn: str, connect: Any, workers: int, late: int) -> None:
    """``late`` workers start only once the others have finished a few partitions: they join the
    round and must not redo the finished ones."""
    conn = connect()
    _partitioned(conn, rate=2000 if late else 4000)
    expired_by_partition = dict(conn.execute(
        "SELECT tableoid::regclass::text, count(*) FROM pt WHERE created_at < now() - interval '1 day' "
        "GROUP BY 1").fetchall())
    procs = [WorkerProcess("--dsn", dsn, "--name", f"w{i}", *FAST) for i in range(1, workers - late + 1)]
    try:
        if late:
            wait_until(lambda: conn.execute("SELECT count(*) FROM ttl.run_unit WHERE status = 'ok' "
                                            "AND action = 'delete'").fetchone()[0] >= 4, what="4 partitions done")
            procs += [WorkerProcess("--dsn", dsn, "--name", f"w{i}", *FAST)
                      for i in range(workers - late + 1, workers + 1)]
        for p in procs:
            p.wait_for("run finished", table="pt", timeout=40)
        for p in procs:
            assert p.stop() == 0
    finally:
        for p in procs:
            p.close()
    assert conn.execute("SELECT count(*) FROM pt WHERE created_at < now() - interval '1 day'").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pt").fetchone() == (240,)
    runs = conn.execute("SELECT run_id, worker, cutoff, status, rows_deleted FROM ttl.run ORDER BY run_id").fetchall()
    # One round: one run per worker, all with the round's cutoff.
    assert sorted(r[1] for r in runs) == [f"w{i}" for i in range(1, workers + 1)]
    assert len({r[2] for r in runs}) == 1
    assert sum(r[4] for r in runs) == PARTITIONS * EXPIRED_PER_PARTITION
    # The work was split: every worker deleted rows.
    assert all(r[4] > 0 for r in runs), runs
    units = conn.execute(
        "SELECT u.unit_name, r.worker, u.action, u.status, u.rows_deleted FROM ttl.run_unit u "
        "JOIN ttl.run r USING (run_id) ORDER BY u.unit_name, u.started_at").fetchall()
    worked = {}
    for name, worker, action, status, deleted in units:
        if action == "skip":
            assert status == "skipped"
            continue
        # No unit processed twice: one worker deleted each partition's rows, all of them.
        assert name not in worked, f"{name} processed by {worked.get(name)} and {worker}: {units}"
        worked[name] = worker
        assert status == "ok" and deleted == expired_by_partition[name], (name, deleted)
    assert sorted(worked) == sorted(expired_by_partition)
    if late:
        # The late worker met finished partitions and left them alone.
        done_skips = [u for u in units if u[1] == f"w{workers}" and u[2] == "skip"]
        assert done_skips, units
