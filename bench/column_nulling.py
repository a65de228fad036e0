"""Column TTL against a hand-written UPDATE (python -m bench.column_nulling).

A table of ROWS rows (~100 B) with a column TTL of 30 days on ``payload``,
``created_at`` spread over 60 days with an index on it, so about half the
values are due. Two contenders, each on a fresh copy of the same data in one
run: one pg_ttl pass (the table's own TTL is 10 years, so only values go), and
``UPDATE t SET payload = NULL WHERE created_at + interval '30 days' <= now()
AND payload IS NOT NULL``. ``--reps`` rounds, each both contenders in
alternating order after a CHECKPOINT (pg_ttl's policies are set up before its
clock starts). Reported: the median seconds, values nulled per second, each
round's ratio, the longest transaction (sampled every 5 ms; the UPDATE is
one), and a check that exactly the due values were nulled.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import plots
from bench.orphans import LongestTransaction
from bench.plots import Panel
from bench.runner import rotated
from bench.server import loadavg_text
from pg_ttl import install
from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer

SCHEMA = """
CREATE TABLE t (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, payload text);
CREATE INDEX ON t (created_at);
"""
FILL = """
INSERT INTO t SELECT g, now() - (g %% 60) * interval '1 day' - interval '1 hour', repeat('x', 60)
  FROM generate_series(1, %(rows)s) g
"""
DUE = "created_at + interval '30 days' <= now() AND payload IS NOT NULL"


def setup_pg_ttl(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # A table TTL far away (no row is due) gives the column TTL its base: created_at.
        conn.execute("SELECT ttl.enable('t', expire_after => '3650 days', column_name => 'created_at')")
        conn.execute("SELECT ttl.enable_column('t', 'payload', '30 days', 'row')")


def run_pg_ttl(dsn: str) -> tuple[int, float]:
    with LongestTransaction(dsn, "pg-ttl engine") as watch:
        [result] = expire(dsn, ["t"])
    assert result.status == "ok" and result.rows_deleted == 0, result
    return result.values_nulled, watch.longest


def run_update(dsn: str) -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        n = conn.execute(f"UPDATE t SET payload = NULL WHERE {DUE}").rowcount
        return n, time.perf_counter() - started


UPDATE = "one UPDATE … SET payload = NULL"
CONTENDERS = {"pg_ttl": (setup_pg_ttl, run_pg_ttl), UPDATE: (None, run_update)}


def measure(server: LocalServer, rows: int, reps: int) -> dict[str, dict[str, Any]]:
    template = server.create_database(f"nulling_{rows}")
    with psycopg.connect(template, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": rows})
        conn.execute("VACUUM (FREEZE, ANALYZE) t")
        due = conn.execute(f"SELECT count(*) FROM t WHERE {DUE}").fetchone()
        assert due is not None
        expected = int(due[0])
    install.upgrade(template)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in CONTENDERS}
    names = list(CONTENDERS)
    copies = 0
    for rep in range(reps):
        for name in rotated(names, rep):  # the order alternates
            setup, contender = CONTENDERS[name]
            copies += 1
            copy_name = f"nulling_{rows}_{copies}"
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                    sql.Identifier(copy_name), sql.Identifier(f"nulling_{rows}")))
                conn.execute("CHECKPOINT")
            copy = server.dsn(copy_name)
            if setup is not None:
                setup(copy)
            started = time.perf_counter()
            nulled, longest = contender(copy)
            wall = time.perf_counter() - started
            with psycopg.connect(copy, autocommit=True) as conn:
                left = conn.execute(f"SELECT count(*) FROM t WHERE {DUE}").fetchone()
                kept = conn.execute("SELECT count(*) FROM t WHERE payload IS NOT NULL").fetchone()
            assert nulled == expected and left == (0,) and kept == (rows - expected,), (name, nulled, expected, left)
            runs[name].append({"seconds": wall, "longest_transaction_seconds": longest})
            with psycopg.connect(server.dsn(), autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(copy_name)))
    out: dict[str, dict[str, Any]] = {}
    for name, rs in runs.items():
        seconds = statistics.median(r["seconds"] for r in rs)
        out[name] = {"rows": rows, "due": expected, "seconds": seconds, "values_per_second": expected / seconds,
                     "longest_transaction_seconds": max(r["longest_transaction_seconds"] for r in rs), "runs": rs}
    # each repetition's pair: pg_ttl's rate over the UPDATE's, in the same round
    ratios = [u["seconds"] / p["seconds"] for p, u in zip(runs["pg_ttl"], runs[UPDATE], strict=True)]
    out["pg_ttl"]["vs_update_per_round"] = ratios
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[500_000, 1_000_000, 2_000_000])
    parser.add_argument("--reps", type=int, default=3,
                        help="rounds; each runs both contenders on fresh copies, in alternating order")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    plots.add_options(parser, "seconds per million due values and the longest transaction against the rows")
    args = parser.parse_args()
    if args.from_json is not None:
        _report(json.loads(args.from_json.read_text()), args.plot)
        return
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "1GB",
                                   "max_wal_size": "8GB", "autovacuum": "off"})
    server.start()
    results: dict[int, dict[str, dict[str, Any]]] = {}
    try:
        for rows in args.rows:
            results[rows] = measure(server, rows, args.reps)
    finally:
        server.cleanup()
    saved = {"server": server.version, "load_average": loadavg_text(), "reps": args.reps, "results": results}
    if args.json:
        args.json.write_text(json.dumps(saved, indent=2))
    _report(json.loads(json.dumps(saved)), args.plot)  # (as --from-json reads it: sizes as text)


def _report(saved: dict[str, Any], plot: Path | None) -> None:
    """The table of a run's results (as --json writes them; before 2026-11-29, the results
    alone), and its plot."""
    results: dict[str, dict[str, dict[str, Any]]] = saved.get("results", saved)
    print(f"{saved.get('server', 'PostgreSQL')}; rows ~100 B, half the values due, btree on the TTL column; "
          f"median of {saved.get('reps', '?')} rounds; load average {saved.get('load_average', '?')}\n")
    print("| rows | contender | seconds | values/s | vs the UPDATE (rounds) | longest transaction |")
    print("|---|---|---|---|---|---|")
    cost = Panel("rows in the table", "seconds per million due values", logx=True)
    ratio = Panel("rows in the table", "pg_ttl values/s over the UPDATE's", goal=(0.8, "goal (0.8x)"), logx=True)
    longest = Panel("rows in the table", "longest transaction (ms)", goal=(200, "goal (200 ms, pg_ttl)"), logx=True)
    for rows, by in sorted(results.items(), key=lambda item: int(item[0])):
        base = by[UPDATE]["values_per_second"]
        for name, r in by.items():
            rounds = r.get("vs_update_per_round")
            spread = f" ({min(rounds):.2f}-{max(rounds):.2f})" if rounds else ""
            print(f"| {int(rows):,} | {name} | {r['seconds']:.2f} | {r['values_per_second']:,.0f} | "
                  f"{r['values_per_second'] / base:.2f} x{spread} | {r['longest_transaction_seconds'] * 1000:.0f} ms |")
            cost.add(name, int(rows), r["seconds"] / r["due"] * 1e6)
            if name != UPDATE:
                ratio.add(name, int(rows), r["values_per_second"] / base)
                longest.add(name, int(rows), r["longest_transaction_seconds"] * 1000)
    if plot is not None:
        plots.save(plot, "Column TTL: half the values of a table nulled", [cost, ratio, longest])


if __name__ == "__main__":
    main()
