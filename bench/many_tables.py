"""The worker's first pass over many small TTL tables (python -m bench.many_tables).

For each table count N, a fresh database with N tables of ROWS rows each (half of them
expired, a primary key, a TTL on ``created_at`` with ``job_cron`` '@daily'): a table that
never ran is due at once, so ``pg-ttl worker --once`` runs every one of them. Beside it,
in the same run on the same server, the hand-written way: one session running
``DELETE FROM t WHERE created_at < now() - interval '30 days'`` for every table.

Reported per N: the worker's pass (from its first run's start to its last run's end, as
``ttl.run`` records them: Python's start-up is left out, shown apart), milliseconds per
table, statements per table (``pg_stat_statements``, top level: every statement the worker
sent, its scheduling session included), the hand loop's milliseconds per table, and a check
that exactly the expired rows went. Prints a markdown table; ``--json FILE`` also writes
the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import plots
from bench.plots import Panel
from bench.server import loadavg_text, statement_calls
from pg_ttl import install
from pg_ttl.localserver import LocalServer

ROWS = 10
TABLE = "CREATE TABLE {} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, body text NOT NULL)"
FILL = "INSERT INTO {} SELECT g, now() - CASE WHEN g %% 2 = 0 THEN interval '40 days' ELSE interval '1 day' END, " \
       "'x' FROM generate_series(1, %s) g"
HAND = "DELETE FROM {} WHERE created_at < now() - interval '30 days'"


def _make_tables(dsn: str, n: int, with_ttl: bool) -> None:
    with psycopg.connect(dsn) as conn:
        for i in range(n):
            ident = sql.Identifier(f"t_{i:05d}")
            conn.execute(sql.SQL(TABLE).format(ident))
            conn.execute(sql.SQL(FILL).format(ident), (ROWS,))
            if with_ttl:
                conn.execute("SELECT ttl.enable(%s::regclass, expire_after => '30 days', column_name => 'created_at', "
                             "job_cron => '@daily')", (f"t_{i:05d}",))
            if i % 1000 == 999:
                conn.commit()


def _rows_left(dsn: str, n: int) -> tuple[int, int]:
    """(rows left, expired rows left) over every table."""
    with psycopg.connect(dsn) as conn:
        left = expired = 0
        for i in range(n):
            row = conn.execute(sql.SQL("SELECT count(*), count(*) FILTER (WHERE created_at < now() - interval "
                                       "'30 days') FROM {}").format(sql.Identifier(f"t_{i:05d}"))).fetchone()
            assert row is not None
            left, expired = left + int(row[0]), expired + int(row[1])
        return left, expired


def measure(server: LocalServer, n: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    out: dict[str, Any] = {"tables": n, "rows_per_table": ROWS}
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        for db in (f"worker_{n}", f"hand_{n}"):
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(db)))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        worker_dsn, hand_dsn = server.dsn(f"worker_{n}"), server.dsn(f"hand_{n}")
        install.upgrade(worker_dsn)
        t0 = time.monotonic()
        _make_tables(worker_dsn, n, with_ttl=True)
        _make_tables(hand_dsn, n, with_ttl=False)
        out["setup_seconds"] = time.monotonic() - t0
        for dsn in (worker_dsn, hand_dsn):
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
        admin.execute("SELECT pg_stat_statements_reset()")
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pg_ttl", "worker", "--once", "--allow-superuser",
                               "--dsn", worker_dsn, "--log-level", "warning"], env=env, capture_output=True,
                              text=True)
        wall = time.monotonic() - t0
        statements = statement_calls(admin, f"worker_{n}")
        evicted = admin.execute("SELECT dealloc FROM pg_stat_statements_info").fetchone()
        if proc.returncode != 0:
            raise RuntimeError(f"pg-ttl worker --once exited {proc.returncode}: {proc.stderr[-2000:]}")
        with psycopg.connect(worker_dsn) as conn:
            row = conn.execute("SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)), "
                               "count(*) FILTER (WHERE status <> 'ok'), sum(rows_deleted) FROM ttl.last_run").fetchone()
        assert row is not None
        runs, pass_seconds, not_ok, deleted = int(row[0]), float(row[1]), int(row[2]), int(row[3] or 0)
        left, expired_left = _rows_left(worker_dsn, n)
        out["worker"] = {
            "runs": runs, "not_ok": not_ok, "rows_deleted": deleted, "pass_seconds": pass_seconds,
            "ms_per_table": pass_seconds / n * 1000, "process_seconds": wall,
            "startup_and_exit_seconds": wall - pass_seconds, "statements": statements,
            "statements_per_table": statements / n,
            # entries pg_stat_statements evicted since its reset (their calls are not counted): 0 = exact
            "statement_entries_evicted": int(evicted[0]) if evicted else None,
            "correct": runs == n and not_ok == 0 and expired_left == 0 and left == n * (ROWS - ROWS // 2),
        }
        with psycopg.connect(hand_dsn, autocommit=True) as conn:
            t0 = time.monotonic()
            for i in range(n):
                conn.execute(sql.SQL(HAND).format(sql.Identifier(f"t_{i:05d}")))
            hand = time.monotonic() - t0
        left, expired_left = _rows_left(hand_dsn, n)
        out["hand_loop"] = {"seconds": hand, "ms_per_table": hand / n * 1000,
                            "correct": expired_left == 0 and left == n * (ROWS - ROWS // 2)}
        for db in (f"worker_{n}", f"hand_{n}"):
            admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(db)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, nargs="+", default=[1000, 5000, 10000],
                        help="table counts to measure, each in a database of its own")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    plots.add_options(parser, "ms and statements per table against the table count")
    args = parser.parse_args()
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        _report(saved["results"], " ".join(saved["load_average"]), None, args.plot)
        return
    # Autovacuum on, as in any database: every run leaves dead rows in pg_ttl's own history
    # (ttl.run, ttl.run_unit, ttl.worker_schedule) and, without it, each lookup there slows
    # with every table done (a unit's claim: 0.6 ms a call at 10,000 tables with it, 1.5 ms
    # without). The tables of 10 rows never reach its thresholds. Room in pg_stat_statements
    # for every table's own DELETE: an entry evicted takes its calls with it.
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "512MB",
                                   "max_locks_per_transaction": "256", "autovacuum": "on",
                                   "shared_preload_libraries": "pg_stat_statements",
                                   "pg_stat_statements.track": "top", "pg_stat_statements.max": "50000"})
    server.start()
    results: list[dict[str, Any]] = []
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for n in args.tables:
            results.append(measure(server, n))
            r = results[-1]
            print(f"{n} tables: worker {r['worker']['ms_per_table']:.1f} ms/table, "
                  f"{r['worker']['statements_per_table']:.1f} statements/table; hand loop "
                  f"{r['hand_loop']['ms_per_table']:.2f} ms/table", file=sys.stderr, flush=True)
    finally:
        server.cleanup()
    load = loadavg_text()
    _report(results, load, server.version, args.plot)
    if args.json:
        args.json.write_text(json.dumps({"load_average": load.split(), "results": results}, indent=2))


def _report(results: list[dict[str, Any]], load: str, version: str | None, plot: Path | None) -> None:
    print(f"{version or 'PostgreSQL'}; {ROWS} rows per table, half expired; load average {load}\n")
    print("| tables | worker pass | ms / table | statements / table | hand DELETE loop ms / table | "
          "worker vs hand | correct |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        w, h = r["worker"], r["hand_loop"]
        print(f"| {r['tables']:,} | {w['pass_seconds']:.1f} s | {w['ms_per_table']:.1f} | "
              f"{w['statements_per_table']:.1f} | {h['ms_per_table']:.2f} | "
              f"{w['ms_per_table'] / h['ms_per_table']:.0f} x | {w['correct'] and h['correct']} |")
    if plot is not None:
        _plot(results, plot)


def _plot(results: list[dict[str, Any]], path: Path) -> None:
    ms = Panel("tables", "ms per table", goal=(6, "goal (6 ms)"))
    statements = Panel("tables", "statements per table", goal=(8, "goal (8)"))
    for r in results:
        ms.add("worker", r["tables"], r["worker"]["ms_per_table"])
        ms.add("hand-written DELETE loop", r["tables"], r["hand_loop"]["ms_per_table"])
        statements.add("worker", r["tables"], r["worker"]["statements_per_table"])
    plots.save(path, "pg-ttl worker --once, first pass over N tables of 10 rows", [ms, statements])


if __name__ == "__main__":
    main()
