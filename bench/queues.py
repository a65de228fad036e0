"""Expiration queues against a sweep and a btree (python -m bench.queues).

A table of ROWS rows (~100 B) whose expiry the application moves on every
UPDATE: ``seen_at`` (last seen), TTL 1 day from it. Three layouts, each on a
fresh copy of the same data, in one run:

- ``sweep``: no index on seen_at; a pass sweeps the table by block ranges;
- ``btree``: a btree on seen_at; a pass reads it (index strategy);
- ``queue``: no index on seen_at, ``ttl_queue_shards = 4`` (filled beforehand:
  the time to fill it is reported apart).

1. One pg_ttl pass with 0.1% and 1% of the rows expired: seconds.
2. UPDATE throughput: pgbench, 4 clients, for SECONDS each: ``UPDATE t SET
   seen_at = now(), hits = hits + 1 WHERE id = random`` (the expiry moves) and
   ``UPDATE t SET hits = hits + 1 ...`` (it does not); tps and the HOT share
   (n_tup_hot_upd / n_tup_upd). The same with no TTL at all.
3. INSERT overhead of the queue's triggers vs none: the server process's CPU
   for single-row INSERT transactions and for one bulk INSERT ... SELECT.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

from bench.row_ttl import timed
from bench.trigger import _run_pgbench
from pg_ttl import install
from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer

SCHEMA = "CREATE TABLE t (id bigint PRIMARY KEY, seen_at timestamptz NOT NULL, hits int NOT NULL DEFAULT 0," \
         " payload text) WITH (fillfactor = 90)"
FILL = """
INSERT INTO t SELECT g, CASE WHEN g %% %(every)s = 0 THEN now() - interval '2 days'
                             ELSE now() - interval '1 hour' END, 0, repeat('x', 60)
  FROM generate_series(1, %(rows)s) g
"""
LAYOUTS = ("sweep", "btree", "queue")
UPDATE_SCRIPTS = {
    "expiry moves": "\\set id random(1, {rows})\nUPDATE t SET seen_at = now(), hits = hits + 1 WHERE id = :id;\n",
    "other column": "\\set id random(1, {rows})\nUPDATE t SET hits = hits + 1 WHERE id = :id;\n",
}


def _layout(dsn: str, layout: str) -> float:
    """Make the layout; returns the seconds spent filling a queue (0 otherwise)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if layout == "none":
            return 0.0
        conn.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'seen_at')")
        if layout == "btree":
            conn.execute("CREATE INDEX ON t (seen_at)")
            conn.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
        elif layout == "sweep":
            conn.execute("UPDATE ttl.settings SET value = 'ctid' WHERE name = 'row_strategy'")
        else:
            conn.execute("SELECT ttl.set_option('t', 'queue_shards', '4')")
            started = time.perf_counter()
            while conn.execute("SELECT ttl.queue_backfill('t', 50000)").fetchone() != (0,):
                pass
            return time.perf_counter() - started
        conn.execute("VACUUM ANALYZE t")
    return 0.0


def _copy(server: LocalServer, template: str, name: str) -> str:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
            sql.Identifier(name), sql.Identifier(template)))
    return server.dsn(name)


def passes(server: LocalServer, rows: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for share, every in (("0.1%", 1000), ("1%", 100)):
        template = f"q_{rows}_{every}"
        dsn = server.create_database(template)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)
            conn.execute(FILL, {"rows": rows, "every": every})
            conn.execute("VACUUM (FREEZE, ANALYZE) t")
        install.upgrade(dsn)
        for layout in LAYOUTS:
            copy = _copy(server, template, f"{template}_{layout}")
            fill = _layout(copy, layout)
            started = time.perf_counter()
            [res] = expire(copy, ["t"])
            wall = time.perf_counter() - started
            assert res.status == "ok" and res.rows_deleted == rows // every, (layout, res)
            out[f"{share} {layout}"] = {"seconds": wall, "rows_deleted": res.rows_deleted, "fill_seconds": fill}
    return out


def _pgbench(server: LocalServer, dsn: str, script_text: str, seconds: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(script_text)
        script.flush()
        return _run_pgbench(server.bindir / "pgbench", script.name, dsn, seconds, clients=4)


def updates(server: LocalServer, rows: int, seconds: int) -> dict[str, dict[str, float]]:
    template = f"u_{rows}"
    dsn = server.create_database(template)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": rows, "every": 1000})
        conn.execute("VACUUM (FREEZE, ANALYZE) t")
    install.upgrade(dsn)
    out: dict[str, dict[str, float]] = {}
    for workload, script in UPDATE_SCRIPTS.items():
        for layout in ("none", "btree", "queue"):
            copy = _copy(server, template, f"{template}_{layout}")
            _layout(copy, layout)
            tps = _pgbench(server, copy, script.format(rows=rows), seconds)
            with psycopg.connect(copy, autocommit=True) as conn:
                conn.execute("SELECT pg_stat_force_next_flush()")
                time.sleep(1.0)
                row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 't'"
                                   ).fetchone()
                assert row is not None
                if layout == "queue":
                    verify = conn.execute("SELECT missing, late FROM ttl.queue_verify('t')").fetchone()
                    assert verify == (0, 0), verify
            out[f"{workload}: {layout}"] = {"tps": tps, "hot_share": (row[1] / row[0]) if row[0] else 0.0}
    return out


def inserts(server: LocalServer, single: int, bulk: int, repeat: int) -> dict[str, dict[str, float]]:
    dsn = server.create_database("ins")
    install.upgrade(dsn)
    runs: dict[str, dict[str, list[float]]] = {k: {"single": [], "bulk": []} for k in ("none", "queue")}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in runs:
            conn.execute(sql.SQL(SCHEMA.replace("TABLE t", "TABLE {}")).format(sql.Identifier(f"t_{name}")))
        conn.execute("SELECT ttl.enable('t_queue', expire_after => '1 day', column_name => 'seen_at')")
        conn.execute("SELECT ttl.set_option('t_queue', 'queue_shards', '4')")
        for _ in range(repeat):
            for name in runs:  # interleaved: drift hits both alike
                table = sql.Identifier(f"t_{name}")
                conn.execute(sql.SQL("TRUNCATE {}").format(table))
                one = sql.SQL("INSERT INTO {} (id, seen_at) VALUES (%s, now())").format(table)

                def work(q: sql.Composed = one) -> None:
                    with conn.pipeline():
                        for i in range(single):
                            conn.execute(q, (i,), prepare=True)

                runs[name]["single"].append(timed(conn, work)[0])
                conn.execute(sql.SQL("TRUNCATE {}").format(table))
                many = sql.SQL("INSERT INTO {} (id, seen_at) SELECT g, now() FROM generate_series(1, %s) g").format(
                    table)
                runs[name]["bulk"].append(timed(conn, lambda q=many: conn.execute(q, (bulk,)))[0])
    return {name: {k: min(v) for k, v in by.items()} for name, by in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the table (default 2M)")
    parser.add_argument("--seconds", type=int, default=20, help="pgbench seconds per layout")
    parser.add_argument("--single", type=int, default=20_000, help="single-row INSERT transactions per run")
    parser.add_argument("--bulk", type=int, default=200_000, help="rows of the bulk INSERT")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved INSERT runs (best is kept)")
    parser.add_argument("--parts", default="passes,updates,inserts",
                        help="which measurements, comma-separated (default: all three)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "1GB",
                                   "max_wal_size": "8GB", "autovacuum": "off"})
    server.start()
    try:
        results = {"passes": passes(server, args.rows) if "passes" in parts else {},
                   "updates": updates(server, args.rows, args.seconds) if "updates" in parts else {},
                   "inserts": inserts(server, args.single, args.bulk, args.repeat) if "inserts" in parts else {}}
    finally:
        server.cleanup()
    print(f"{server.version}; {args.rows:,} rows ~100 B; 2 cores\n")
    print("| expired | layout | pass seconds | vs sweep | filling the queue first |")
    print("|---|---|---|---|---|")
    for share in ("0.1%", "1%") if results["passes"] else ():
        sweep = results["passes"][f"{share} sweep"]["seconds"]
        for layout in LAYOUTS:
            r = results["passes"][f"{share} {layout}"]
            print(f"| {share} ({r['rows_deleted']:,.0f} rows) | {layout} | {r['seconds']:.3f} | "
                  f"{sweep / r['seconds']:.1f}x faster | {r['fill_seconds']:.1f} s |")
    print("\n| UPDATE | layout | tps (4 clients) | vs btree | HOT share |")
    print("|---|---|---|---|---|")
    for key, r in results["updates"].items():
        workload, layout = key.split(": ")
        btree = results["updates"][f"{workload}: btree"]["tps"]
        print(f"| {workload} | {layout} | {r['tps']:,.0f} | {r['tps'] / btree:.2f}x | {r['hot_share']:.0%} |")
    ins = results["inserts"]
    if ins:
        print("\n| INSERT | no queue (CPU s) | queue (CPU s) | overhead |")
        print("|---|---|---|---|")
        for kind, label in (("single", f"{args.single:,} single-row transactions"),
                            ("bulk", f"one of {args.bulk:,} rows")):
            base, queue = ins["none"][kind], ins["queue"][kind]
            print(f"| {label} | {base:.2f} | {queue:.2f} | {queue / base - 1:+.0%} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
