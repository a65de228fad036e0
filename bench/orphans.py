"""Orphan collection against the hand-written ways (python -m bench.orphans).

A child table of ROWS rows (~100 B each), ORPHAN_SHARE of them without a
parent, and a parent of ROWS / 5 keys (btree primary key). Three contenders,
each on a fresh copy of the same data (CREATE DATABASE ... TEMPLATE), in one
run on one server:

- pg_ttl: an orphan policy (min_age 0: every child is old) and one pass;
- pg_ttl with two workers: two passes at once on the same table, sharing its
  ranges (each range done by one of them);
- pg_ttl without an age column: the rows' transactions against the passes'
  clock (docs/orphans.md), the same pass otherwise;
- one statement: ``DELETE FROM data d WHERE NOT EXISTS (SELECT 1 FROM
  metadata m WHERE m.hash = d.hash)``;
- a batched loop: ``DELETE FROM data WHERE ctid IN (SELECT ctid FROM data d
  WHERE NOT EXISTS (...) LIMIT 10000)`` until it deletes nothing.

Reported: wall seconds (the median of ``--reps`` runs of each, the contenders
in turn), orphans deleted per second, the longest transaction
(sampled every 5 ms from pg_stat_activity for pg_ttl; each statement for the
others: the single DELETE is one transaction), and a check that exactly the
orphans went. Prints a markdown table; ``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.server import copy_database
from pg_ttl import install
from pg_ttl.expire import TableResult, expire
from pg_ttl.localserver import LocalServer

SCHEMA = """
CREATE TABLE metadata (hash text PRIMARY KEY);
CREATE TABLE data (id bigint PRIMARY KEY, hash text NOT NULL, created_at timestamptz NOT NULL,
                   body text NOT NULL);
"""
PARENTS = "INSERT INTO metadata SELECT 'k' || g FROM generate_series(1, %(parents)s) g"
FILL = """
INSERT INTO data
SELECT g, CASE WHEN g %% %(every)s = 0 THEN 'gone' || g ELSE 'k' || (1 + g %% %(parents)s) END,
       now() - interval '1 day', repeat('x', 40)
  FROM generate_series(1, %(rows)s) g
"""
ANTI = "NOT EXISTS (SELECT 1 FROM metadata m WHERE m.hash = d.hash)"


class LongestTransaction:
    """The longest open transaction of sessions named ``app`` seen while running (5 ms samples)."""

    def __init__(self, dsn: str, app: str) -> None:
        self.dsn, self.app, self.longest = dsn, app, 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        # The bench's own observer, not a workload: named like pg_ttl's own sessions, which
        # pg_ttl's throttle does not count as foreground (polled every 5 ms, it would slow
        # the pass it measures, as a busy application would).
        with psycopg.connect(self.dsn, autocommit=True, application_name="pg-ttl bench observer") as conn:
            while not self.stop.is_set():
                row = conn.execute("SELECT max(extract(epoch FROM clock_timestamp() - xact_start))"
                                   " FROM pg_stat_activity WHERE application_name = %s AND state <> 'idle'",
                                   (self.app,)).fetchone()
                if row and row[0] is not None:
                    self.longest = max(self.longest, float(row[0]))
                time.sleep(0.005)

    def __enter__(self) -> LongestTransaction:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def run_pg_ttl(dsn: str, workers: int = 1, age_column: str | None = "created_at") -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # (without an age column, min_age 0 lets the pass use the clock entry this call makes)
        conn.execute("SELECT ttl.enable_orphans('data', '{hash}', 'metadata', min_age => '0',"
                     " age_column => %s)", (age_column,))
    results: list[TableResult] = []
    with LongestTransaction(dsn, "pg-ttl engine") as watch:
        # each worker a pass of its own, as workers on several hosts run them
        threads = [threading.Thread(target=lambda: results.extend(expire(dsn, ["data"]))) for _ in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == workers and all(r.status == "ok" for r in results), results
    return sum(r.orphans_deleted for r in results), watch.longest


def run_pg_ttl_two(dsn: str) -> tuple[int, float]:
    return run_pg_ttl(dsn, workers=2)


def run_pg_ttl_no_age(dsn: str) -> tuple[int, float]:
    return run_pg_ttl(dsn, age_column=None)


def run_single(dsn: str) -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        n = conn.execute(f"DELETE FROM data d WHERE {ANTI}").rowcount
        return n, time.perf_counter() - started


def run_loop(dsn: str) -> tuple[int, float]:
    total, longest = 0, 0.0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            started = time.perf_counter()
            n = conn.execute(f"DELETE FROM data WHERE ctid IN (SELECT ctid FROM data d WHERE {ANTI} LIMIT 10000)"
                             ).rowcount
            longest = max(longest, time.perf_counter() - started)
            total += n
            if n == 0:
                return total, longest


LOOP = "batched DELETE … ctid IN (… LIMIT 10000) loop"
SINGLE = "one DELETE … NOT EXISTS"
CONTENDERS = {"pg_ttl": run_pg_ttl, "pg_ttl, 2 workers": run_pg_ttl_two, "pg_ttl, no age column": run_pg_ttl_no_age,
              SINGLE: run_single, LOOP: run_loop}


def measure(server: LocalServer, rows: int, share: float, reps: int,
            names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    every = max(1, round(1 / share))
    template = server.create_database(f"orphans_{rows}")
    install.upgrade(template)
    with psycopg.connect(template, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(PARENTS, {"parents": max(1, rows // 5)})
        conn.execute(FILL, {"parents": max(1, rows // 5), "every": every, "rows": rows})
        conn.execute("VACUUM (FREEZE, ANALYZE)")
        # A second VACUUM sets the visibility map PostgreSQL 15 leaves unset right after the
        # load, as autovacuum would on tables at rest: without it every lookup that finds
        # its parent also reads the parent's row, which no table under autovacuum does.
        conn.execute("VACUUM")
        orphans = conn.execute(f"SELECT count(*) FROM data d WHERE {ANTI}").fetchone()
        assert orphans is not None
        expected = int(orphans[0])
        dbname = conn.info.dbname
    chosen = {name: c for name, c in CONTENDERS.items() if names is None or name in names}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in chosen}
    for rep in range(reps):  # the contenders in turn, rep after rep: load that comes and goes hits all
        for i, (name, contender) in enumerate(chosen.items()):
            if rep > 0 and name == LOOP:
                continue  # 15-30 times slower than the others: one run says enough
            copy = copy_database(server, dbname, f"orphans_{rows}_{rep}_{i}")
            with psycopg.connect(copy, autocommit=True) as conn:
                conn.execute("CHECKPOINT")
            load = os.getloadavg()[0]  # other jobs on the machine, for the record
            started = time.perf_counter()
            deleted, longest = contender(copy)
            wall = time.perf_counter() - started
            with psycopg.connect(copy, autocommit=True) as conn:
                left = conn.execute(f"SELECT count(*), count(*) FILTER (WHERE {ANTI}) FROM data d").fetchone()
            assert left is not None
            assert deleted == expected and left == (rows - expected, 0), (name, deleted, expected, left)
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(f"orphans_{rows}_{rep}_{i}")))
            runs[name].append({"seconds": wall, "longest_transaction_seconds": longest, "load_average_before": load})
    out: dict[str, dict[str, Any]] = {}
    for name, done in runs.items():
        wall = statistics.median(r["seconds"] for r in done)
        out[name] = {"rows": rows, "orphans": expected, "seconds": wall, "orphans_per_second": expected / wall,
                     "longest_transaction_seconds": max(r["longest_transaction_seconds"] for r in done),
                     "runs": done}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 5_000_000],
                        help="child table sizes to measure (each a separate run of every contender)")
    parser.add_argument("--orphans", type=float, default=0.10, help="share of children without a parent")
    parser.add_argument("--reps", type=int, default=1,
                        help="runs of each contender (the loop: one), in turn; the median is reported")
    parser.add_argument("--contenders", nargs="+", choices=list(CONTENDERS), metavar="NAME",
                        help=f"only these (default: all): {', '.join(repr(n) for n in CONTENDERS)}")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    if args.contenders is not None and SINGLE not in args.contenders:
        parser.error(f"--contenders must include {SINGLE!r}: every result is compared with it")
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "1GB",
                                   "max_wal_size": "8GB", "autovacuum": "off"})
    server.start()
    results: dict[int, dict[str, dict[str, Any]]] = {}
    try:
        for rows in args.rows:
            results[rows] = measure(server, rows, args.orphans, args.reps, args.contenders)
    finally:
        server.cleanup()
    print(f"{server.version}; child rows ~100 B, {args.orphans:.0%} orphans, parent = rows / 5 keys (btree)\n")
    print("| child rows | contender | seconds | orphans/s | vs one DELETE | vs loop | longest transaction |")
    print("|---|---|---|---|---|---|---|")
    for rows, by in results.items():
        single = by[SINGLE]["orphans_per_second"]
        loop = by[LOOP]["orphans_per_second"] if LOOP in by else None
        for name, r in by.items():
            vs_loop = f"{r['orphans_per_second'] / loop:.2f} x" if loop else "—"
            print(f"| {rows:,} | {name} | {r['seconds']:.2f} | {r['orphans_per_second']:,.0f} | "
                  f"{r['orphans_per_second'] / single:.2f} x | {vs_loop} | "
                  f"{r['longest_transaction_seconds'] * 1000:.0f} ms |")
    if args.json:
        args.json.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2))


if __name__ == "__main__":
    main()
