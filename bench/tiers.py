"""Tiers against the hand-written way (python -m bench.tiers).

A table of ROWS rows (~100 B: id, created_at, amount numeric(12,2), note text) written in
time order over 60 days, all of them past a 30-day tier (the TTL is 400 days, so none is
deleted outright). Contenders, each on a fresh copy of the same data, in every round:

- by hand: ``COPY (SELECT ... WHERE created_at <= now() - '30 days') TO STDOUT`` into a
  CSV file, then one ``DELETE`` of the same rows, in one transaction;
- pg_ttl to a local directory: one pass (Parquet objects per day, each read back and
  verified, manifest rows committed with their DELETE);
- pg_ttl to S3: the same, to a moto server (a real S3-compatible HTTP endpoint, its own
  process) on 127.0.0.1.

The rounds run the contenders in turn (a changing load on the machine hits each alike);
each pg_ttl contender's rows/s is compared with the hand-written way's of the same round,
and the median (min-max) of those ratios is reported. Also: MB written, the longest
transaction (sampled every 5 ms), and, in the first round, rows/s of ``pg-ttl restore``
of the archived rows into the emptied table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
BY_HAND = "by hand: COPY TO file + DELETE"
TO_DIRECTORY = "pg_ttl to a directory"
TO_S3 = "pg_ttl to S3 (moto)"


def run_pg_ttl(dsn: str, url: str, size: Any, *, with_restore: bool) -> dict[str, float]:
    """One pass moving every row to the storage at ``url``; ``size()``: the bytes written."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT ttl.enable('t', expire_after => '400 days', column_name => 'created_at')")
        conn.execute("SELECT ttl.create_storage('cold', %s)", (url,))
        conn.execute("""SELECT ttl.set_tiers('t', '[{"after": "30 days", "to": "cold"}]')""")
    started = time.perf_counter()
    with LongestTransaction(dsn, "pg-ttl engine") as watch:
        results = expire(dsn, ["t"])
    wall = time.perf_counter() - started
    moved = results[0].rows_deleted
    out = {"rows": moved, "seconds": wall, "mb": size() / 1e6, "longest_transaction_seconds": watch.longest}
    if with_restore:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SELECT ttl.pause('t')")
            started = time.perf_counter()
            done = restore(conn, "t")
            out["restore_seconds"] = time.perf_counter() - started
        assert done.rows_inserted == moved, (done, moved)
    return out


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


@contextmanager
def moto_server() -> Iterator[tuple[str, Any]]:
    """A moto S3 server in its own process (not competing for this process's interpreter),
    a bucket on it, and a pyarrow client."""
    from pyarrow import fs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the moto server did not start") from None
                time.sleep(0.1)
        os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench")
        client = fs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", region="us-east-1",
                                 allow_bucket_creation=True)
        client.create_dir("bench-archive")
        yield f"http://127.0.0.1:{port}", client
    finally:
        proc.terminate()
        proc.wait(10)


def measure(server: LocalServer, rows: int, rounds: int) -> dict[str, list[dict[str, float]]]:
    from pyarrow import fs

    template = f"tiers_{rows}"
    dsn = server.create_database(template)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": rows})
        conn.execute("VACUUM (FREEZE, ANALYZE) t")
    install.upgrade(dsn)
    out: dict[str, list[dict[str, float]]] = {BY_HAND: [], TO_DIRECTORY: [], TO_S3: []}
    copies = 0

    def fresh() -> str:
        nonlocal copies
        copies += 1
        name = f"{template}_{copies}"
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(template)))
        return server.dsn(name)

    with moto_server() as (endpoint, client):
        for n in range(rounds):
            first = n == 0
            with tempfile.TemporaryDirectory(prefix="pg-ttl-bench-tiers-") as directory:
                out[BY_HAND].append(run_by_hand(fresh(), Path(directory)))
            with tempfile.TemporaryDirectory(prefix="pg-ttl-bench-tiers-") as directory:
                out[TO_DIRECTORY].append(run_pg_ttl(
                    fresh(), f"file://{directory}",
                    lambda d=directory: sum(p.stat().st_size for p in Path(d).rglob("*.parquet")),
                    with_restore=first))
            prefix = f"bench-archive/round{n}"
            out[TO_S3].append(run_pg_ttl(
                fresh(), f"s3://{prefix}?endpoint={endpoint}&region=us-east-1",
                lambda p=prefix: sum(i.size for i in client.get_file_info(fs.FileSelector(p, recursive=True))
                                     if i.size),
                with_restore=first))
            for name, results in out.items():
                assert results[-1]["rows"] == rows, (name, results[-1])
            print(f"round {n + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]['seconds']:.2f} s" for k, v in out.items()),
                  file=sys.stderr)
    return out


def summarize(results: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Per contender: median seconds, rows/s, and the ratio to the hand-written way of the
    same round (median, min, max)."""
    hand = results[BY_HAND]
    out: dict[str, dict[str, Any]] = {}
    for name, rounds in results.items():
        ratios = [(r["rows"] / r["seconds"]) / (h["rows"] / h["seconds"]) for r, h in zip(rounds, hand, strict=True)]
        out[name] = {
            "seconds_median": statistics.median(r["seconds"] for r in rounds),
            "rows_per_second_median": statistics.median(r["rows"] / r["seconds"] for r in rounds),
            "vs_by_hand_median": statistics.median(ratios), "vs_by_hand_min": min(ratios),
            "vs_by_hand_max": max(ratios),
            "mb_per_second_median": statistics.median(r["mb"] / r["seconds"] for r in rounds),
            "mb": rounds[0]["mb"],
            "longest_transaction_seconds_max": max(r["longest_transaction_seconds"] for r in rounds),
            **({"restore_rows_per_second": rounds[0]["rows"] / rounds[0]["restore_seconds"]}
               if "restore_seconds" in rounds[0] else {}),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every contender, in turn (default 3)")
    parser.add_argument("--json", type=Path, help="also write the numbers (every round, and the summary) here")
    args = parser.parse_args()
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "1GB",
                                   "max_wal_size": "8GB", "autovacuum": "off"})
    server.start()
    try:
        results = measure(server, args.rows, args.rounds)
    finally:
        server.cleanup()
    summary = summarize(results)
    print(f"{server.version}; {args.rows:,} rows ~100 B, all past a 30-day tier; {args.rounds} rounds, medians\n")
    print("| contender | seconds | rows/s | vs by hand (min-max) | MB written | MB/s | longest transaction "
          "| restore rows/s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, s in summary.items():
        restore_rps = f"{s['restore_rows_per_second']:,.0f}" if "restore_rows_per_second" in s else "—"
        print(f"| {name} | {s['seconds_median']:.2f} | {s['rows_per_second_median']:,.0f} | "
              f"{s['vs_by_hand_median']:.2f}x ({s['vs_by_hand_min']:.2f}-{s['vs_by_hand_max']:.2f}) | "
              f"{s['mb']:.1f} | {s['mb_per_second_median']:.1f} | "
              f"{s['longest_transaction_seconds_max'] * 1000:.0f} ms | {restore_rps} |")
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "rounds": results, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
