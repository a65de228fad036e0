"""Expiring a table of many daily partitions (python -m bench.many_partitions).

A table range-partitioned by day on its TTL column, PARTITIONS partitions of 1,000 rows,
a TTL of PARTITIONS / 2 days: about half the partitions have expired whole. Two
contenders on two databases built alike, in one run on one server:

- pg_ttl: one pass through the Python API (``pg_ttl.expire.expire``), which drops the
  expired partitions and looks at the partition on the edge;
- by hand: ``DROP TABLE`` of the same number of partitions, one autocommit statement each.

Reported: seconds and milliseconds per dropped partition, statements per dropped
partition (``pg_stat_statements``, top level), pg_ttl's time over the hand loop's, and
that the same partitions are left. ``--json FILE`` also writes the numbers, ``--plot PNG`` plots them.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer

ROWS = 1000


def _build(dsn: str, n: int) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE TABLE p (id bigint, created_at timestamptz NOT NULL) PARTITION BY RANGE (created_at)")
        for i in range(n):
            # a partition bound takes no parameters: the day numbers go in as literals
            conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF p FOR VALUES FROM "
                                 "(date_trunc('day', now()) - {} * interval '1 day') "
                                 "TO (date_trunc('day', now()) - {} * interval '1 day')").format(
                sql.Identifier(f"p_{i:05d}"), sql.Literal(n - i), sql.Literal(n - i - 1)))
        conn.execute("INSERT INTO p SELECT g, date_trunc('day', now()) - (g %% %s + 1) * interval '1 day' "
                     "+ interval '1 hour' FROM generate_series(1, %s) g", (n, n * ROWS))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE p")


def _partitions(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                                           "WHERE i.inhparent = 'p'::regclass ORDER BY 1").fetchall()]


def measure(server: LocalServer, n: int, rep: int) -> dict[str, Any]:
    dbs = (f"ttl_{n}_{rep}", f"hand_{n}_{rep}")
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        for db in dbs:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        ttl_dsn, hand_dsn = server.dsn(dbs[0]), server.dsn(dbs[1])
        for dsn in (ttl_dsn, hand_dsn):
            _build(dsn, n)
        install.upgrade(ttl_dsn)
        with psycopg.connect(ttl_dsn, autocommit=True) as conn:
            conn.execute("SELECT ttl.enable('p', expire_after => %s::interval, column_name => 'created_at')",
                         (f"{n // 2} days",))
        admin.execute("CHECKPOINT")
        admin.execute("SELECT pg_stat_statements_reset()")
        started = time.perf_counter()
        [result] = expire(ttl_dsn, ["p"])
        seconds = time.perf_counter() - started
        statements = statement_calls(admin, dbs[0])
        dropped = result.partitions_dropped
        left = _partitions(ttl_dsn)
        doomed = _partitions(hand_dsn)[:dropped]
        with psycopg.connect(hand_dsn, autocommit=True) as conn:
            started = time.perf_counter()
            for name in doomed:
                conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
            hand = time.perf_counter() - started
        hand_left = _partitions(hand_dsn)
        for db in dbs:
            admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(db)))
    return {"partitions": n, "dropped": dropped, "status": result.status, "seconds": seconds,
            "ms_per_dropped": seconds / max(1, dropped) * 1000, "statements": statements,
            "statements_per_dropped": statements / max(1, dropped), "hand_seconds": hand,
            "hand_ms_per_dropped": hand / max(1, dropped) * 1000, "vs_hand": seconds / hand,
            "correct": result.status == "ok" and left == hand_left and dropped >= n // 2 - 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--reps", type=int, default=3, help="rounds per size, each on newly built databases")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    plots.add_options(parser, "ms and statements per dropped partition against the partitions")
    args = parser.parse_args()
    if args.from_json is not None:
        _report(json.loads(args.from_json.read_text()), args.plot)
        return
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "512MB",
                                   "max_locks_per_transaction": "1024", "autovacuum": "off",
                                   "shared_preload_libraries": "pg_stat_statements",
                                   "pg_stat_statements.track": "top"})
    server.start()
    results: dict[int, list[dict[str, Any]]] = {}
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        for n in args.partitions:
            for rep in range(args.reps):
                results.setdefault(n, []).append(measure(server, n, rep))
                r = results[n][-1]
                print(f"{n} partitions, round {rep + 1}: {r['ms_per_dropped']:.2f} ms / dropped partition, "
                      f"{r['vs_hand']:.2f}x the hand loop", file=sys.stderr, flush=True)
    finally:
        server.cleanup()
    saved = {"server": server.version, "load_average": loadavg_text(), "results": results}
    if args.json:
        args.json.write_text(json.dumps(saved, indent=2))
    _report(json.loads(json.dumps(saved)), args.plot)  # (as --from-json reads it: sizes as text)


MEDIANS = ("ms_per_dropped", "statements_per_dropped", "hand_ms_per_dropped", "vs_hand")


def _report(saved: dict[str, Any], plot: Path | None) -> None:
    """The table of a run's results (as --json writes them), and its plot."""
    results: dict[str, list[dict[str, Any]]] = saved["results"]
    reps = max((len(rs) for rs in results.values()), default=0)
    print(f"{saved.get('server', 'PostgreSQL')}; {ROWS} rows per partition; median of {reps} rounds; "
          f"load average {saved['load_average']}\n")
    print("| partitions | dropped | pg_ttl ms / dropped | statements / dropped | hand DROP ms / dropped | "
          "pg_ttl vs hand (rounds) | correct |")
    print("|---|---|---|---|---|---|---|")
    ms = Panel("partitions", "ms per dropped partition", goal=(2, "goal (2 ms)"), logx=True)
    statements = Panel("partitions", "statements per dropped partition", goal=(4, "goal (4)"), logx=True)
    ratio = Panel("partitions", "pg_ttl's time over the hand loop's", goal=(1.5, "goal (1.5x)"), logx=True)
    for n, rs in sorted(results.items(), key=lambda item: int(item[0])):
        med = {k: statistics.median(r[k] for r in rs) for k in MEDIANS}
        print(f"| {int(n):,} | {rs[0]['dropped']} | {med['ms_per_dropped']:.2f} | "
              f"{med['statements_per_dropped']:.1f} | {med['hand_ms_per_dropped']:.2f} | {med['vs_hand']:.2f}x "
              f"({min(r['vs_hand'] for r in rs):.2f}-{max(r['vs_hand'] for r in rs):.2f}) | "
              f"{all(r['correct'] for r in rs)} |")
        ms.add("pg_ttl (API)", int(n), med["ms_per_dropped"])
        ms.add("hand-written DROP loop", int(n), med["hand_ms_per_dropped"])
        statements.add("pg_ttl (API)", int(n), med["statements_per_dropped"])
        ratio.add("pg_ttl (API)", int(n), med["vs_hand"])
    if plot is not None:
        plots.save(plot, f"Dropping expired partitions of {ROWS:,} rows (median of {reps} rounds)",
                   [ms, statements, ratio])


if __name__ == "__main__":
    main()
