"""Per-row TTL and strict visibility: what they cost (python -m bench.row_ttl).

1. INSERT cost, same table without pg_ttl / with per-row TTL (two columns
   filled by DEFAULTs) / with the same expiry set by a plpgsql BEFORE INSERT
   trigger instead (the alternative the DEFAULT replaces):
   - bulk: one INSERT ... SELECT of ROWS rows;
   - pgbench-style: SINGLE single-row INSERT transactions (autocommit, prepared, pipelined).
2. Read overhead of strict visibility for an ordinary (non-owner) role:
   point lookups and 1,000-row range scans by primary key, strict off vs on.

Measured as the server process's own CPU time (from /proc), and wall time: on a
machine shared with other jobs, wall time mostly measures the other jobs. Best
of REPEAT interleaved runs. Runs on its own throwaway server (fsync off, like
the tests). Prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl import install
from pg_ttl.localserver import LocalServer

TABLE = "CREATE TABLE {} (id bigint PRIMARY KEY, v int, payload text)"
TRIGGER_FN = """
CREATE FUNCTION set_expiry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.expires_at := now() + coalesce(nullif(current_setting('pg_ttl.row_ttl', true), '')::interval,
                                       interval '1 day');
    NEW.written_at := now();
    RETURN NEW;
END $$
"""


def setup_tables(conn: psycopg.Connection[Any]) -> None:
    for name in ("plain", "two_columns", "per_row", "by_trigger"):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL(TABLE).format(sql.Identifier(name)))
    conn.execute("SELECT ttl.enable('per_row', expire_after => '1 day')")
    conn.execute("ALTER TABLE by_trigger ADD COLUMN expires_at timestamptz, ADD COLUMN written_at timestamptz")
    # the floor: the same two columns, left NULL (what the wider row alone costs)
    conn.execute("ALTER TABLE two_columns ADD COLUMN expires_at timestamptz, ADD COLUMN written_at timestamptz")
    conn.execute("DROP FUNCTION IF EXISTS set_expiry() CASCADE")
    conn.execute(TRIGGER_FN)
    conn.execute("CREATE TRIGGER set_expiry BEFORE INSERT ON by_trigger FOR EACH ROW EXECUTE FUNCTION set_expiry()")


CONTENDERS = ("plain", "two_columns", "per_row", "by_trigger")


def backend_cpu(conn: psycopg.Connection[Any]) -> float:
    """CPU seconds (user + system) the connection's server process has used so far.

    Wall time on a machine shared with other jobs mostly measures the other jobs;
    the server process's own CPU time is what the table definition costs.
    """
    pid = conn.info.backend_pid
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def timed(conn: psycopg.Connection[Any], work: Any) -> tuple[float, float]:
    """(backend CPU seconds, wall seconds) of work()."""
    cpu, wall = backend_cpu(conn), time.perf_counter()
    work()
    return backend_cpu(conn) - cpu, time.perf_counter() - wall


def bulk_insert(conn: psycopg.Connection[Any], rows: int, repeat: int) -> dict[str, tuple[float, float]]:
    """Per contender: (CPU s, wall s) of one INSERT ... SELECT of ``rows`` rows, best of ``repeat``."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in CONTENDERS}
    for _ in range(repeat):
        for name in runs:  # interleaved, so drift hits every contender alike
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(name)))
            conn.execute("CHECKPOINT")
            query = sql.SQL("INSERT INTO {} (id, v, payload) SELECT g, g, 'payload ' || g "
                            "FROM generate_series(1, %s) g").format(sql.Identifier(name))
            runs[name].append(timed(conn, lambda q=query: conn.execute(q, (rows,))))
    return {name: (min(r[0] for r in t), min(r[1] for r in t)) for name, t in runs.items()}


def single_row_inserts(conn: psycopg.Connection[Any], count: int, repeat: int) -> dict[str, tuple[float, float]]:
    """pgbench-style: ``count`` single-row INSERT transactions (autocommit, prepared);
    per contender (CPU s, wall s), best of ``repeat``."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in CONTENDERS}
    for _ in range(repeat):
        for name in runs:
            conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(name)))
            query = sql.SQL("INSERT INTO {} (id, v, payload) VALUES (%s, 1, 'payload')").format(
                sql.Identifier(name))

            def work(q: sql.Composed = query) -> None:
                with conn.pipeline():
                    for i in range(count):
                        conn.execute(q, (i,), prepare=True)

            runs[name].append(timed(conn, work))
    return {name: (min(r[0] for r in t), min(r[1] for r in t)) for name, t in runs.items()}


def read_overhead(conn: psycopg.Connection[Any], app: psycopg.Connection[Any], rows: int, lookups: int,
                  scans: int, repeat: int) -> dict[str, tuple[float, float]]:
    """As a non-owner role: ``lookups`` point lookups and ``scans`` 1,000-row range scans by
    primary key, strict off and on; per case (CPU s, wall s), best of ``repeat``."""
    conn.execute("TRUNCATE per_row")
    conn.execute("INSERT INTO per_row (id, v, payload) SELECT g, g, 'payload ' || g FROM generate_series(1, %s) g",
                 (rows,))
    # one row in ten already expired (and not yet removed)
    conn.execute("UPDATE per_row SET ttl_expires_at = now() - interval '1 minute' WHERE id % 10 = 0")
    conn.execute("VACUUM ANALYZE per_row")
    rng = random.Random(7)
    ids = [rng.randint(1, rows) for _ in range(lookups)]
    starts = [rng.randint(1, rows - 1000) for _ in range(scans)]

    def points() -> None:
        with app.pipeline():
            for i in ids:
                app.execute("SELECT v FROM per_row WHERE id = %s", (i,), prepare=True)

    def ranges() -> None:
        with app.pipeline():
            for s in starts:
                app.execute("SELECT count(*), sum(v) FROM per_row WHERE id BETWEEN %s AND %s + 999", (s, s),
                            prepare=True)

    out: dict[str, list[tuple[float, float]]] = {k: [] for k in ("point_off", "point_on", "range_off", "range_on")}
    for _ in range(repeat):
        for strict in ("off", "on"):
            conn.execute("SELECT ttl.set_option('per_row', 'strict', %s)", ("true" if strict == "on" else "false",))
            app.execute("DISCARD PLANS")
            out[f"point_{strict}"].append(timed(app, points))
            out[f"range_{strict}"].append(timed(app, ranges))
    return {k: (min(r[0] for r in v), min(r[1] for r in v)) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=300_000, help="rows of the bulk insert and the read table")
    parser.add_argument("--single", type=int, default=60_000, help="single-row INSERT transactions per run")
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--scans", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=7, help="interleaved runs per contender (best is kept)")
    args = parser.parse_args()
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "256MB",
                                   "max_wal_size": "4GB", "autovacuum": "off"})
    server.start()
    try:
        dsn = server.create_database("bench_row_ttl")
        install.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            setup_tables(conn)
            bulk = bulk_insert(conn, args.rows, args.repeat)
            single = single_row_inserts(conn, args.single, args.repeat)
            conn.execute("DO $$ BEGIN CREATE ROLE bench_app LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
            conn.execute("GRANT SELECT ON per_row TO bench_app")
            with psycopg.connect(dsn, user="bench_app", autocommit=True) as app:
                reads = read_overhead(conn, app, args.rows, args.lookups, args.scans, args.repeat)
            conn.execute("DROP OWNED BY bench_app")
            conn.execute("DROP ROLE bench_app")
    finally:
        server.cleanup()

    def cell(case: tuple[float, float], base: tuple[float, float] | None = None) -> str:
        text = f"{case[0]:.3f} s CPU, {case[1]:.3f} s wall"
        if base is not None:
            text += f" (CPU {(case[0] / base[0] - 1) * 100:+.0f}%)"
        return text

    print(f"{server.version}; best of {args.repeat} interleaved runs; CPU = the server process's own CPU time\n")
    print("| INSERT | plain table | + 2 NULL timestamptz columns | per-row TTL (DEFAULTs) "
          "| same expiry set by a plpgsql trigger |")
    print("|---|---|---|---|---|")
    for label, data in ((f"bulk INSERT … SELECT, {args.rows:,} rows", bulk),
                        (f"{args.single:,} single-row INSERT transactions", single)):
        print(f"| {label} | {cell(data['plain'])} | " + " | ".join(
            cell(data[name], data["plain"]) for name in CONTENDERS[1:]) + " |")
    print()
    print("| read as a non-owner role | strict off | strict on |")
    print("|---|---|---|")
    print(f"| {args.lookups:,} point lookups by primary key | {cell(reads['point_off'])} | "
          f"{cell(reads['point_on'], reads['point_off'])} |")
    print(f"| {args.scans:,} range scans of 1,000 rows by primary key | {cell(reads['range_off'])} | "
          f"{cell(reads['range_on'], reads['range_off'])} |")


if __name__ == "__main__":
    main()
