"""Tiers against the hand-written way (python -m bench.tiers).

A table of ROWS rows (~100 B: id, created_at, amount numeric(12,2), note
text) written in time order over 60 days, all of them past a 30-day tier to a
local directory (the TTL is 400 days, so none is deleted outright). Two contenders on fresh copies of the same
data, in one run:

- pg_ttl: one pass (Parquet objects per day, each read back and verified,
  manifest rows committed with their DELETE);
- by hand: ``COPY (SELECT ... WHERE created_at <= now() - '30 days') TO STDOUT``
  into a CSV file, then one ``DELETE`` of the same rows, in one transaction.

Reported: seconds, rows/s, MB written, the longest transaction (sampled every
5 ms), and rows/s of ``pg-ttl restore`` of the archived rows into the emptied
table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

from bench.orphans import LongestTransaction
from pg_ttl import install
from pg_ttl.archive.restore import restore
from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer

SCHEMA = "CREATE TABLE t (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, amount numeric(12, 2), note text)"
FILL = """
INSERT INTO t SELECT g, now() - interval '91 days' + (g * 60.0 / %(rows)s) * interval '1 day', g * 0.01, repeat('x', 60)
  FROM generate_series(1, %(rows)s) g
"""
DUE = "created_at <= now() - interval '30 days'"


def run_pg_ttl(dsn: str, directory: Path) -> dict[str, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT ttl.enable('t', expire_after => '400 days', column_name => 'created_at')")
        conn.execute("SELECT ttl.create_storage('local', %s)", (f"file://{directory}",))
        conn.execute("""SELECT ttl.set_tiers('t', '[{"after": "30 days", "to": "local"}]')""")
    started = time.perf_counter()
    with LongestTransaction(dsn, "pg-ttl engine") as watch:
        results = expire(dsn, ["t"])
    wall = time.perf_counter() - started
    moved = results[0].rows_deleted
    size = sum(p.stat().st_size for p in directory.rglob("*.parquet"))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT ttl.pause('t')")
        started = time.perf_counter()
        done = restore(conn, "t")
        restore_wall = time.perf_counter() - started
    assert done.rows_inserted == moved
    return {"rows": moved, "seconds": wall, "mb": size / 1e6, "longest_transaction_seconds": watch.longest,
            "restore_seconds": restore_wall}


def run_by_hand(dsn: str, directory: Path) -> dict[str, float]:
    path = directory / "t.csv"
    started = time.perf_counter()
    with LongestTransaction(dsn, "by hand") as watch, psycopg.connect(dsn, application_name="by hand") as conn:
        with conn.cursor().copy(sql.SQL("COPY (SELECT * FROM t WHERE {}) TO STDOUT (FORMAT csv)").format(
                sql.SQL(DUE))) as copy, path.open("wb") as f:
            for block in copy:
                f.write(block)
        moved = conn.execute(f"DELETE FROM t WHERE {DUE}").rowcount
        conn.commit()
    wall = time.perf_counter() - started
    return {"rows": moved, "seconds": wall, "mb": path.stat().st_size / 1e6,
            "longest_transaction_seconds": watch.longest}


def measure(server: LocalServer, rows: int) -> dict[str, dict[str, float]]:
    template = f"tiers_{rows}"
    dsn = server.create_database(template)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": rows})
        conn.execute("VACUUM (FREEZE, ANALYZE) t")
    install.upgrade(dsn)
    out: dict[str, dict[str, float]] = {}
    for i, (name, contender) in enumerate((("pg_ttl", run_pg_ttl), ("COPY TO + DELETE", run_by_hand))):
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(f"{template}_{i}"), sql.Identifier(template)))
        with tempfile.TemporaryDirectory(prefix="pg-ttl-bench-tiers-") as directory:
            result = contender(server.dsn(f"{template}_{i}"), Path(directory))
        assert result["rows"] == rows, (name, result)
        out[name] = result
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "1GB",
                                   "max_wal_size": "8GB", "autovacuum": "off"})
    server.start()
    try:
        results = measure(server, args.rows)
    finally:
        server.cleanup()
    base = results["COPY TO + DELETE"]
    print(f"{server.version}; {args.rows:,} rows ~100 B, all past a 30-day tier to a local directory\n")
    print("| contender | seconds | rows/s | vs by hand | MB written | longest transaction | restore rows/s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        rps = r["rows"] / r["seconds"]
        restore_rps = f"{r['rows'] / r['restore_seconds']:,.0f}" if "restore_seconds" in r else "—"
        print(f"| {name} | {r['seconds']:.2f} | {rps:,.0f} | {rps / (base['rows'] / base['seconds']):.2f}x | "
              f"{r['mb']:.1f} | {r['longest_transaction_seconds'] * 1000:.0f} ms | {restore_rps} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
