"""Expiration queues against a sweep and a btree (python -m bench.queues).

A table of ROWS rows (~100 B) whose expiry the application moves on every
UPDATE: ``seen_at`` (last seen), TTL 1 day from it; the expired rows are spread
evenly over the table (every 1000th, every 100th), each seen at its own instant
(as rows are: no two share one, so a btree pass reads plain key windows). Three
layouts, each a copy of the same data:

- ``sweep``: no index on seen_at; a pass sweeps the table by block ranges;
- ``btree``: a btree on seen_at; a pass reads it (index strategy);
- ``queue``: no index on seen_at, ``ttl_queue_shards = 4`` (filled beforehand:
  the time to fill it is reported apart).

1. One pg_ttl pass with 0.1% and 1% of the rows expired: seconds, ROUNDS rounds,
   the layouts in turn (rotated each round), each pass on a fresh copy of its
   layout's database (its pages in the OS cache, not in shared_buffers: the
   same start for every layout; the server's shared_buffers touched once
   beforehand, as a server that has run a while has them: see
   bench.server.touch_shared_buffers); the median is reported, every round in --json.
2. UPDATE throughput: pgbench, 4 clients, SECONDS per slice: ``UPDATE t SET
   seen_at = now(), hits = hits + 1 WHERE id = random`` (the expiry moves) and
   ``UPDATE t SET hits = hits + 1 ...`` (it does not), on one database per
   layout (no TTL at all, btree, queue) copied from the same table. The layouts
   take turns for ROUNDS rounds, each continuing on its own database, so the
   btree's dead index entries accumulate as in one long run while drift hits
   every layout alike (autovacuum is off: nothing cleans them between slices).
   Per layout: every slice's tps, the median, the HOT share
   (n_tup_hot_upd / n_tup_upd) and its indexes' size at the end.
3. INSERT overhead vs no queue, the server process's CPU, best of REPEAT
   interleaved runs, for single-row INSERT transactions and one bulk INSERT ...
   SELECT; beside the queue, where it goes: a bare statement trigger (transition
   table, SECURITY DEFINER with its search_path pinned, empty body) and the
   queue's entries inserted alone (the same number of rows into a table shaped
   like the queue, no main table).

Final runs (a quiet machine: nothing else on its cores; about 15 minutes and
12 GB of disk at 5M rows):

    python -m bench.queues --rows 5000000 --rounds 3 --seconds 30 \
        --json bench/results/queues-$(date +%F).json

and, at the same size, the passes alone on a larger table when the machine
builds it in a few minutes (``--rows 20000000 --parts passes``). A quick check
while others share the machine: ``--rows 1000000 --rounds 3 --seconds 10``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.row_ttl import timed
from bench.server import touch_shared_buffers
from bench.trigger import _run_pgbench
from pg_ttl import install
from pg_ttl.expire import expire
from pg_ttl.localserver import LocalServer

SCHEMA = "CREATE TABLE t (id bigint PRIMARY KEY, seen_at timestamptz NOT NULL, hits int NOT NULL DEFAULT 0," \
         " payload text) WITH (fillfactor = 90)"
FILL = """
INSERT INTO t SELECT g, CASE WHEN g %% %(every)s = 0 THEN now() - interval '2 days' - g * interval '1 ms'
                             ELSE now() - interval '1 hour' END, 0, repeat('x', 60)
  FROM generate_series(1, %(rows)s) g
"""
LAYOUTS = ("sweep", "btree", "queue")
UPDATE_SCRIPTS = {
    "expiry moves": "\\set id random(1, {rows})\nUPDATE t SET seen_at = now(), hits = hits + 1 WHERE id = :id;\n",
    "other column": "\\set id random(1, {rows})\nUPDATE t SET hits = hits + 1 WHERE id = :id;\n",
}


def _layout(dsn: str, layout: str) -> float:
    """Make the layout; returns the seconds spent filling a queue (0 otherwise). The
    table and a queue's shards are vacuumed and analyzed afterwards, as autovacuum
    would have done by the time of a pass."""
    fill = 0.0
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
            fill = time.perf_counter() - started
        conn.execute("VACUUM ANALYZE")
    return fill


def _copy(server: LocalServer, template: str, name: str) -> str:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
            sql.Identifier(name), sql.Identifier(template)))
    return server.dsn(name)


def _drop(server: LocalServer, name: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def _base(server: LocalServer, name: str, rows: int, every: int) -> str:
    """A database with the table, every ``every``-th row expired, and pg_ttl."""
    dsn = server.create_database(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": rows, "every": every})
        conn.execute("VACUUM (FREEZE, ANALYZE) t")
    install.upgrade(dsn)
    return dsn


def rotated(items: list[str], n: int) -> list[str]:
    return items[n % len(items):] + items[:n % len(items)]


def passes(server: LocalServer, rows: int, rounds: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for share, every in (("0.1%", 1000), ("1%", 100)):
        base = f"q_{rows}_{every}"
        _base(server, base, rows, every)
        fills: dict[str, float] = {}
        for layout in LAYOUTS:  # each layout made once; every pass runs on a fresh copy of it
            fills[layout] = _layout(_copy(server, base, f"{base}_{layout}"), layout)
        _drop(server, base)
        seconds: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        for r in range(rounds):
            for layout in rotated(list(LAYOUTS), r):
                copy = _copy(server, f"{base}_{layout}", f"{base}_run")
                with psycopg.connect(copy, autocommit=True) as conn:
                    conn.execute("CHECKPOINT")
                started = time.perf_counter()
                [res] = expire(copy, ["t"])
                seconds[layout].append(time.perf_counter() - started)
                assert res.status == "ok" and res.rows_deleted == rows // every, (layout, res)
                _drop(server, f"{base}_run")
        for layout in LAYOUTS:
            _drop(server, f"{base}_{layout}")
            out[f"{share} {layout}"] = {"seconds": statistics.median(seconds[layout]), "rounds": seconds[layout],
                                        "rows_deleted": rows // every, "fill_seconds": fills[layout]}
    return out


def _pgbench(server: LocalServer, dsn: str, script_text: str, seconds: int) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write(script_text)
        script.flush()
        return _run_pgbench(server.bindir / "pgbench", script.name, dsn, seconds, clients=4)


def updates(server: LocalServer, rows: int, seconds: int, rounds: int) -> dict[str, dict[str, Any]]:
    base = f"u_{rows}"
    _base(server, base, rows, 1000)
    layouts = ["none", "btree", "queue"]
    dsns = {layout: _copy(server, base, f"{base}_{layout}") for layout in layouts}
    for layout, dsn in dsns.items():
        _layout(dsn, layout)
    _drop(server, base)
    tps: dict[str, list[float]] = {f"{w}: {layout}": [] for w in UPDATE_SCRIPTS for layout in layouts}
    hot: dict[str, list[int]] = {key: [0, 0] for key in tps}  # updates, HOT updates
    for r in range(rounds):
        for workload, script in UPDATE_SCRIPTS.items():
            for layout in rotated(layouts, r):
                key = f"{workload}: {layout}"
                before = _updated(dsns[layout])
                tps[key].append(_pgbench(server, dsns[layout], script.format(rows=rows), seconds))
                after = _updated(dsns[layout])
                hot[key] = [hot[key][0] + after[0] - before[0], hot[key][1] + after[1] - before[1]]
    out: dict[str, dict[str, Any]] = {}
    for layout, dsn in dsns.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_indexes_size('t')").fetchone()
            assert row is not None
            if layout == "queue":
                verify = conn.execute("SELECT missing, late FROM ttl.queue_verify('t')").fetchone()
                assert verify == (0, 0), verify
        for workload in UPDATE_SCRIPTS:
            key = f"{workload}: {layout}"
            out[key] = {"tps": statistics.median(tps[key]), "rounds": tps[key],
                        "hot_share": hot[key][1] / hot[key][0] if hot[key][0] else 0.0, "index_bytes": int(row[0])}
        _drop(server, f"{base}_{layout}")
    return out


def _updated(dsn: str) -> tuple[int, int]:
    """The table's (updates, HOT updates) so far; pgbench's sessions report theirs as they end."""
    time.sleep(0.5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 't'").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


BARE_TRIGGER = """
CREATE FUNCTION bare() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp
AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER bare AFTER INSERT ON t_trigger REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bare()
"""
ENTRIES = """
CREATE TABLE entries (shard smallint NOT NULL, expires_at timestamptz NOT NULL, k1 bigint NOT NULL,
                      PRIMARY KEY (shard, expires_at, k1)) PARTITION BY LIST (shard);
CREATE TABLE entries_0 PARTITION OF entries FOR VALUES IN (0);
CREATE TABLE entries_1 PARTITION OF entries FOR VALUES IN (1);
CREATE TABLE entries_2 PARTITION OF entries FOR VALUES IN (2);
CREATE TABLE entries_3 PARTITION OF entries FOR VALUES IN (3)
"""
# The entry of row g, as the queue's trigger computes it (its shard: the hash of the key); %% as
# the statements have parameters.
ENTRY = "((hashint8(g) & 2147483647) %% 4)::int2, now() + interval '1 day', g"
INSERT_KINDS = ("none", "queue", "trigger", "entries")


def inserts(server: LocalServer, single: int, bulk: int, repeat: int) -> dict[str, dict[str, float]]:
    """Server CPU seconds, best of ``repeat``: ``none`` (no queue), ``queue``, ``trigger`` (a
    bare statement trigger like the queue's, empty) and ``entries`` (the queue's entries
    inserted alone, no main table)."""
    dsn = server.create_database("ins")
    install.upgrade(dsn)
    runs: dict[str, dict[str, list[float]]] = {k: {"single": [], "bulk": []} for k in INSERT_KINDS}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in ("none", "queue", "trigger"):
            conn.execute(sql.SQL(SCHEMA.replace("TABLE t", "TABLE {}")).format(sql.Identifier(f"t_{name}")))
        conn.execute("SELECT ttl.enable('t_queue', expire_after => '1 day', column_name => 'seen_at')")
        conn.execute("SELECT ttl.set_option('t_queue', 'queue_shards', '4')")
        conn.execute(BARE_TRIGGER)
        conn.execute(ENTRIES)
        for r in range(repeat):
            for name in rotated(list(INSERT_KINDS), r):  # interleaved: drift hits all alike
                table = sql.Identifier("entries" if name == "entries" else f"t_{name}")
                if name == "entries":
                    one = sql.SQL(f"INSERT INTO {{}} SELECT {ENTRY} FROM (SELECT %s::int8 AS g) s").format(table)
                    many = sql.SQL(f"INSERT INTO {{}} SELECT {ENTRY} FROM generate_series(1, %s::int8) g").format(table)
                else:
                    one = sql.SQL("INSERT INTO {} (id, seen_at) VALUES (%s, now())").format(table)
                    many = sql.SQL("INSERT INTO {} (id, seen_at) SELECT g, now() FROM generate_series(1, %s) g"
                                   ).format(table)
                conn.execute(sql.SQL("TRUNCATE {}").format(table))

                def work(q: sql.Composed = one) -> None:
                    with conn.pipeline():
                        for i in range(single):
                            conn.execute(q, (i,), prepare=True)

                runs[name]["single"].append(timed(conn, work)[0])
                conn.execute(sql.SQL("TRUNCATE {}").format(table))
                runs[name]["bulk"].append(timed(conn, lambda q=many: conn.execute(q, (bulk,)))[0])
    return {name: {k: min(v) for k, v in by.items()} for name, by in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows of the table (default 2M)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of passes and of UPDATE slices, the layouts in turn (default 3)")
    parser.add_argument("--seconds", type=int, default=20, help="pgbench seconds per UPDATE slice (default 20)")
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
    touch_shared_buffers(server)
    load = os.getloadavg()
    try:
        results: dict[str, Any] = {
            "rows": args.rows, "rounds": args.rounds, "seconds": args.seconds,
            "passes": passes(server, args.rows, args.rounds) if "passes" in parts else {},
            "updates": updates(server, args.rows, args.seconds, args.rounds) if "updates" in parts else {},
            "inserts": inserts(server, args.single, args.bulk, args.repeat) if "inserts" in parts else {}}
    finally:
        server.cleanup()
    results["load_average"] = {"start": load, "end": os.getloadavg()}
    print(f"{server.version}; {args.rows:,} rows ~100 B; {os.cpu_count()} cores; load average "
          f"{load[0]:.2f} at the start, {results['load_average']['end'][0]:.2f} at the end\n")
    print(f"| expired | layout | pass seconds (median of {args.rounds}) | vs sweep | filling the queue first |")
    print("|---|---|---|---|---|")
    for share in ("0.1%", "1%") if results["passes"] else ():
        sweep = results["passes"][f"{share} sweep"]["seconds"]
        for layout in LAYOUTS:
            r = results["passes"][f"{share} {layout}"]
            print(f"| {share} ({r['rows_deleted']:,.0f} rows) | {layout} | {r['seconds']:.3f} | "
                  f"{sweep / r['seconds']:.1f}x faster | {r['fill_seconds']:.1f} s |")
    print(f"\n| UPDATE | layout | tps (4 clients, median of {args.rounds} x {args.seconds} s) | vs btree | HOT share |"
          " indexes at the end |")
    print("|---|---|---|---|---|---|")
    for key, r in results["updates"].items():
        workload, layout = key.split(": ")
        btree = results["updates"][f"{workload}: btree"]["tps"]
        print(f"| {workload} | {layout} | {r['tps']:,.0f} | {r['tps'] / btree:.2f}x | {r['hot_share']:.0%} | "
              f"{r['index_bytes'] / 2**20:,.0f} MB |")
    ins = results["inserts"]
    if ins:
        print("\n| INSERT, server CPU s | no queue | queue | overhead | bare statement trigger | entries alone |")
        print("|---|---|---|---|---|---|")
        for kind, label in (("single", f"{args.single:,} single-row transactions"),
                            ("bulk", f"one of {args.bulk:,} rows")):
            base = ins["none"][kind]
            print(f"| {label} | {base:.2f} | {ins['queue'][kind]:.2f} | {ins['queue'][kind] / base - 1:+.0%} | "
                  f"{ins['trigger'][kind]:.2f} ({ins['trigger'][kind] / base - 1:+.0%}) | "
                  f"{ins['entries'][kind]:.2f} ({ins['entries'][kind] / base:.0%} of no queue) |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
