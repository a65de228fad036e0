"""Workers sharing a round (one that ends first does not close it for one that then dies),
and a renamed table's metrics."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from tests.worker_proc import WorkerProcess, wait_until

FAST = ("--poll-interval", "0.5", "--max-backoff", "1")


def _expired(conn: psycopg.Connection[Any], table: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table} WHERE created_at < now() - interval '1 day'").fetchone()[0])


def test_joiner_ending_first_does_not_close_the_round_of_a_worker_that_then_dies(dsn: str, connect: Any) -> None:
    """Worker B joins worker A's round of a partitioned table, does its share and ends first.
    ttl.worker_end_run (sql/60_worker.sql) then sets finished_at for the whole round although A is
    still at it. When A dies (kill -9, lost server) the round looks finished ('ok'), so nobody
    resumes it: the partition A was on keeps its expired rows until the next cron tick (a day
    with '@daily'), against docs/worker.md ("a round whose worker died ... is taken up again").
    """
    conn = connect()
    conn.execute("CREATE TABLE pt (id bigint, k int NOT NULL, created_at timestamptz NOT NULL) PARTITION BY LIST (k)")
    conn.execute("CREATE TABLE pt_1 PARTITION OF pt FOR VALUES IN (1)")
    conn.execute("CREATE TABLE pt_2 PARTITION OF pt FOR VALUES IN (2)")
    conn.execute("INSERT INTO pt SELECT g, 1, now() - interval '3 days' FROM generate_series(1, 3000) g")
    conn.execute("INSERT INTO pt SELECT g, 2, now() - interval '3 days' FROM generate_series(1, 20) g")
    conn.execute("ANALYZE pt")
    conn.execute("SELECT ttl.enable('pt', expire_after => '1 day', column_name => 'created_at', "
                 "delete_batch_size => 50, select_batch_size => 50, delete_rate_limit => 150)")
    a = WorkerProcess("--dsn", dsn, "--name", "wa", *FAST)
    b = None
    try:
        wait_until(lambda: conn.execute("SELECT count(*) FROM ttl.run_unit WHERE unit_name LIKE '%pt_1' "
                                        "AND status = 'running'").fetchone()[0], what="A at pt_1")
        b = WorkerProcess("--dsn", dsn, "--name", "wb", *FAST)
        b.wait_for("run finished", table="pt", timeout=20)
        assert a.proc.poll() is None and not a.find("run finished", table="pt"), "A finished first: too fast"
        a.proc.kill()  # A dies mid-partition
        a.proc.wait()
        # B (still up) must take the interrupted round up again and finish pt_1.
        wait_until(lambda: _expired(conn, "pt") == 0, timeout=30,
                   what="the rest of pt_1 expired by the surviving worker")
    finally:
        a.close()
        if b is not None:
            b.close()


def test_renamed_table_leaves_no_stale_metric_series(dsn: str, connect: Any) -> None:
    """``ALTER TABLE ev RENAME TO ev2`` while the worker runs: the policy keeps its relid, so
    Scheduler.sync only relabels the entry and never calls metrics.forget_table for the old name.
    The old series (next run, expiration lag, run counters) stay exported forever under a
    table that no longer exists: a lag alert on it can never clear, and dashboards show a
    phantom table whose next run is always in the past."""
    from tests.worker_proc import scrape

    conn = connect()
    conn.execute("CREATE TABLE ev (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute("INSERT INTO ev (created_at) SELECT now() - interval '3 days' FROM generate_series(1, 5)")
    conn.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'created_at')")
    w = WorkerProcess("--dsn", dsn, "--metrics-addr", "127.0.0.1:0", *FAST)
    try:
        port = w.metrics_port
        w.wait_for("run finished", table="ev")
        db = conn.info.dbname
        old = f'{{database="{db}",table="ev"}}'
        new = f'{{database="{db}",table="ev2"}}'
        wait_until(lambda: f"pg_ttl_expiration_lag_seconds{old}" in scrape(port), what="lag of ev")
        conn.execute("ALTER TABLE ev RENAME TO ev2")
        wait_until(lambda: f"pg_ttl_next_run_timestamp_seconds{new}" in scrape(port), what="ev2's series")
        time.sleep(1.5)
        stale = sorted(k for k in scrape(port) if 'table="ev"' in k)
        assert stale == [], stale
        assert w.stop() == 0
    finally:
        w.close()
