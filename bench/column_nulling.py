"""Column TTL against a hand-written UPDATE (python -m bench.column_nulling).

A table of ROWS rows (~100 B) with a column TTL of 30 days on ``payload``,
``created_at`` spread over 60 days with an index on it, so about half the
values are due. Two contenders, each on a fresh copy of the same data in one
run: one pg_ttl pass (the table's own TTL is 10 years, so only values go), and
``UPDATE t SET payload = NULL WHERE created_at + interval '30 days' <= now()
AND payload IS NOT NULL``. Reported: seconds, values nulled per second, the
longest transaction (sampled every 5 ms; the UPDATE is one), and a check that
exactly the due values were nulled.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import psycopg
from psycopg import sql

from bench.orphans import LongestTransaction
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


def run_pg_ttl(dsn: str) -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # A table TTL far away (no row is due) gives the column TTL its base: created_at.
        conn.execute("SELECT ttl.enable('t', expire_after => '3650 days', column_name => 'created_at')")
        conn.execute("SELECT ttl.enable_column('t', 'payload', '30 days', 'row')")
    with LongestTransaction(dsn, "pg-ttl engine") as watch:
        [result] = expire(dsn, ["t"])
    assert result.status == "ok" and result.rows_deleted == 0, result
    return result.values_nulled, watch.longest


def run_update(dsn: str) -> tuple[int, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.perf_counter()
        n = conn.execute(f"UPDATE t SET payload = NULL WHERE {DUE}").rowcount
        return n, time.perf_counter() - started


CONTENDERS = {"pg_ttl": run_pg_ttl, "one UPDATE … SET payload = NULL": run_update}


def measure(server: LocalServer, rows: int) -> dict[str, dict[str, float]]:
    template = server.create_database(f"nulling_{rows}")
    with psycopg.connect(template, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": rows})
        conn.execute("VACUUM (FREEZE, ANALYZE) t")
        due = conn.execute(f"SELECT count(*) FROM t WHERE {DUE}").fetchone()
        assert due is not None
        expected = int(due[0])
    install.upgrade(template)
    out: dict[str, dict[str, float]] = {}
    for i, (name, contender) in enumerate(CONTENDERS.items()):
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(f"nulling_{rows}_{i}"), sql.Identifier(f"nulling_{rows}")))
        copy = server.dsn(f"nulling_{rows}_{i}")
        started = time.perf_counter()
        nulled, longest = contender(copy)
        wall = time.perf_counter() - started
        with psycopg.connect(copy, autocommit=True) as conn:
            left = conn.execute(f"SELECT count(*) FROM t WHERE {DUE}").fetchone()
            kept = conn.execute("SELECT count(*) FROM t WHERE payload IS NOT NULL").fetchone()
        assert nulled == expected and left == (0,) and kept == (rows - expected,), (name, nulled, expected, left)
        out[name] = {"rows": rows, "due": expected, "seconds": wall, "values_per_second": nulled / wall,
                     "longest_transaction_seconds": longest}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[500_000, 1_000_000, 2_000_000])
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "1GB",
                                   "max_wal_size": "8GB", "autovacuum": "off"})
    server.start()
    results: dict[int, dict[str, dict[str, float]]] = {}
    try:
        for rows in args.rows:
            results[rows] = measure(server, rows)
    finally:
        server.cleanup()
    print(f"{server.version}; rows ~100 B, half the values due, btree on the TTL column\n")
    print("| rows | contender | seconds | values/s | vs the UPDATE | longest transaction |")
    print("|---|---|---|---|---|---|")
    for rows, by in results.items():
        base = by["one UPDATE … SET payload = NULL"]["values_per_second"]
        for name, r in by.items():
            print(f"| {rows:,} | {name} | {r['seconds']:.2f} | {r['values_per_second']:,.0f} | "
                  f"{r['values_per_second'] / base:.2f} x | {r['longest_transaction_seconds'] * 1000:.0f} ms |")
    if args.json:
        args.json.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2))


if __name__ == "__main__":
    main()
