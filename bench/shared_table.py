"""Two workers on one big plain table (python -m bench.shared_table).

A plain table of ROWS rows (~100 B each), half of them expired, spread through the
table (no index on the TTL column: a ctid sweep), built once as a template. Four
contenders, each on a fresh copy of it (CREATE DATABASE ... TEMPLATE, prewarmed, after
a CHECKPOINT), in turn, in one run on one server:

- pg_ttl, one worker: one pass through the Python API;
- pg_ttl, two workers: two passes at once (each its own engine and session, as two
  workers on two hosts), sharing the table's block ranges of row_range_bytes;
- pg_ttl, one worker with row_range_bytes 0: the sweep of one run alone (ranges grouped
  into transactions, no range bookkeeping), what a big table got before;
- one ``DELETE ... WHERE created_at < now() - '30 days'``, for reference.

Reported: seconds (median of ``--reps``, min-max), rows per second, the speed-up of two
workers over one (paired per repetition), that every range of the two workers' sweep
was done once and by both, and that exactly the expired rows went. ``--json FILE`` also
writes the numbers, ``--plot PNG`` plots them against the table's rows (``--rows`` takes
several sizes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import plots
from bench.plots import Panel
from bench.runner import rotated
from bench.server import copy_database, loadavg_text, prewarm
from bench.stats import paired, ratio_text
from pg_ttl import install
from pg_ttl.expire import TableResult, expire
from pg_ttl.localserver import LocalServer

SCHEMA = "CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, body text NOT NULL)"
FILL = """
INSERT INTO events SELECT g, now() - CASE WHEN g %% 2 = 0 THEN interval '40 days' ELSE interval '1 day' END,
                          repeat('x', 50)
  FROM generate_series(1, %(rows)s) g
"""
EXPIRED = "created_at < now() - interval '30 days'"


def one_worker(dsn: str) -> dict[str, Any]:
    [res] = expire(dsn, ["events"])
    assert res.status == "ok", res
    return {"deleted": res.rows_deleted, "runs": [res.run_id]}


def one_worker_unshared(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE ttl.settings SET value = '0' WHERE name = 'row_range_bytes'")
    [res] = expire(dsn, ["events"])
    assert res.status == "ok", res
    return {"deleted": res.rows_deleted, "runs": [res.run_id]}


def two_workers(dsn: str) -> dict[str, Any]:
    results: list[TableResult] = []
    passes = [threading.Thread(target=lambda: results.extend(expire(dsn, ["events"]))) for _ in range(2)]
    for t in passes:
        t.start()
    for t in passes:
        t.join()
    assert len(results) == 2 and all(r.status == "ok" for r in results), results
    return {"deleted": sum(r.rows_deleted for r in results), "runs": [r.run_id for r in results]}


def one_delete(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {"deleted": conn.execute(f"DELETE FROM events WHERE {EXPIRED}").rowcount, "runs": []}


CONTENDERS = {"pg_ttl, one worker": one_worker, "pg_ttl, two workers": two_workers,
              "pg_ttl, one worker, row_range_bytes 0": one_worker_unshared, "one DELETE": one_delete}


def _check(dsn: str, name: str, out: dict[str, Any], rows: int) -> dict[str, Any]:
    """Exactly the expired rows went; for pg_ttl, every range of the sweep done once."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        left = conn.execute(f"SELECT count(*), count(*) FILTER (WHERE {EXPIRED}) FROM events").fetchone()
        assert left == (rows - rows // 2, 0), (name, left)
        assert out["deleted"] == rows // 2, (name, out)
        if not out["runs"]:
            return {}
        strategies = {r[0] for r in conn.execute("SELECT strategy FROM ttl.run_unit WHERE run_id = ANY(%s)",
                                                 (out["runs"],))}
        done = conn.execute("SELECT run_id, range_no FROM ttl.block_range WHERE work = 'delete' AND status = 'ok'"
                            ).fetchall()
        numbers = sorted(n for _, n in done)
        assert numbers == list(range(len(numbers))), (name, "a range done twice or not at all")
        per_run = {run: sum(1 for r, _ in done if r == run) for run in out["runs"]}
        return {"strategies": sorted(strategies), "ranges": len(numbers), "ranges_per_run": list(per_run.values())}


def measure(server: LocalServer, rows: int, reps: int) -> dict[str, Any]:
    template = server.create_database(f"shared_table_{rows}")
    with psycopg.connect(template, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": rows})
        conn.execute("VACUUM (FREEZE, ANALYZE) events")
        size = conn.execute("SELECT pg_size_pretty(pg_table_size('events'))").fetchone()
        dbname = conn.info.dbname
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
    names = list(CONTENDERS)
    for rep in range(reps):
        for name in rotated(names, rep):  # the order rotates
            copy = f"shared_table_{rows}_{rep}_{names.index(name)}"
            dsn = copy_database(server, dbname, copy)
            if name.startswith("pg_ttl"):
                install.upgrade(dsn)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at')")
            prewarm(dsn)
            load = loadavg_text()
            started = time.perf_counter()
            out = CONTENDERS[name](dsn)
            wall = time.perf_counter() - started
            checked = _check(dsn, name, out, rows)
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(copy)))
            runs[name].append({"seconds": wall, "rows_per_second": out["deleted"] / wall, "load_before": load,
                               **checked})
            print(f"  {rows:,} rows, rep {rep + 1}: {name}: {wall:.2f} s {checked}", flush=True)
    with psycopg.connect(server.dsn(), autocommit=True) as admin:  # (room for the next size)
        admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(dbname)))
    one, two = runs["pg_ttl, one worker"], runs["pg_ttl, two workers"]
    return {"rows": rows, "expired": rows // 2, "table_size": size[0] if size else None,
            "contenders": {name: {"seconds": statistics.median(r["seconds"] for r in done),
                                  "seconds_min": min(r["seconds"] for r in done),
                                  "seconds_max": max(r["seconds"] for r in done), "runs": done}
                           for name, done in runs.items()},
            "two_over_one": paired(two, one)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000_000],
                        help="rows in the table (half of them expired); several sizes: one table each")
    parser.add_argument("--reps", type=int, default=3, help="runs of each contender, in turn")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    plots.add_options(parser, "seconds per million expired rows and the two workers' speed-up against the table's rows")
    args = parser.parse_args()
    if args.from_json is not None:
        _report(json.loads(args.from_json.read_text()), args.plot)
        return
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "2GB",
                                   "max_wal_size": "16GB", "autovacuum": "off", "jit": "off"})
    server.start()
    try:
        results = [measure(server, rows, args.reps) for rows in args.rows]
    finally:
        server.cleanup()
    saved = {"server": server.version, "load_average": loadavg_text(), "reps": args.reps, "results": results}
    if args.json:
        args.json.write_text(json.dumps(saved, indent=2, default=str))
    _report(saved, args.plot)


def _report(saved: dict[str, Any], plot: Path | None) -> None:
    """The tables of a run's results (as --json writes them; before 2026-11-29, one size's
    result alone), and its plot."""
    results = saved.get("results", [saved])
    cost = Panel("rows in the table", "seconds per million expired rows", logx=True)
    speedup = Panel("rows in the table", "speed-up over one worker", title="two workers (paired median)", logx=True)
    for result in results:
        print(f"\n{saved['server']}; {result['rows']:,} rows ({result['table_size']}), half expired, no index on"
              f" the TTL column; median of {len(result['contenders']['one DELETE']['runs'])}\n")
        print("| contender | seconds (min-max) | rows/s |")
        print("|---|---|---|")
        for name, r in result["contenders"].items():
            print(f"| {name} | {r['seconds']:.2f} ({r['seconds_min']:.2f}-{r['seconds_max']:.2f}) | "
                  f"{result['expired'] / r['seconds']:,.0f} |")
            cost.add(name, result["rows"], r["seconds"] / result["expired"] * 1e6)
        s = result["two_over_one"]
        print(f"\ntwo workers over one (paired per repetition): {ratio_text(s)}")
        speedup.add("pg_ttl, two workers over one", result["rows"], s["median"])
    if plot is not None:
        plots.save(plot, "Two workers sharing one table: half its rows expired, no index", [cost, speedup])


if __name__ == "__main__":
    main()
