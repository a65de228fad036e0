"""Workload 5: what per-row TTL costs on writes.

Three variants of one table, same server, same run: no TTL at all; a
hand-written ``expire_at DEFAULT now() + '1 day'`` column (the cheapest thing
a user could do, no trigger); and pg_ttl's per-row TTL
(``ttl.enable(tbl, expire_after => '1 day')`` without a column, whatever it
installs: column DEFAULT and/or triggers). Measured: one bulk
``INSERT … SELECT`` of N rows, single-row INSERTs from pgbench (closed loop,
2 clients), and one bulk UPDATE of every row (per-row TTL is refreshed on
UPDATE).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.runner import RUN_DB, Config, log, rotated
from bench.server import CONTENDER_APP, BenchServer
from bench.stats import ratio, summarize

TABLE_DDL = "CREATE TABLE ev (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload text NOT NULL)"
VARIANTS = ("no_ttl", "hand_default", "pg_ttl_row_ttl")
PGBENCH_SCRIPT = "INSERT INTO ev (payload) VALUES (repeat('x', 100));\n"


def row_ttl_available(server: BenchServer, ttl_template: str) -> str | None:
    """None when ``ttl.enable(tbl, expire_after => '1 day')`` without a column works, else the error."""
    with server.database(ttl_template, RUN_DB) as db, server.admin(db) as conn:
        conn.execute(TABLE_DDL)
        try:
            conn.execute("SELECT ttl.enable('ev', expire_after => '1 day')")
        except psycopg.Error as exc:
            return f"per-row TTL (ttl.enable without a column) is not available yet: {str(exc).strip()}"
    return None


def _setup(conn: psycopg.Connection[Any], variant: str) -> dict[str, Any]:
    conn.execute(TABLE_DDL)
    if variant == "hand_default":
        conn.execute("ALTER TABLE ev ADD COLUMN expire_at timestamptz DEFAULT now() + interval '1 day'")
    elif variant == "pg_ttl_row_ttl":
        conn.execute("SELECT ttl.enable('ev', expire_after => '1 day')")
    # Describe what the variant really installed, for the results.
    cols = conn.execute("SELECT attname, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
                        "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                        "WHERE attrelid = 'ev'::regclass AND attnum > 0 AND NOT attisdropped "
                        "ORDER BY attnum").fetchall()
    trigs = conn.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'ev'::regclass AND NOT tgisinternal "
                         "ORDER BY 1").fetchall()
    conn.execute("CHECKPOINT")
    return {"columns": [f"{n} DEFAULT {d}" if d else str(n) for n, d in cols], "triggers": [t for (t,) in trigs]}


def _pgbench_tps(server: BenchServer, db: str, seconds: float) -> float:
    pgbench = server.local.bindir / "pgbench"
    with tempfile.NamedTemporaryFile("w", suffix=".sql", prefix="bench-insert-") as script:
        script.write(PGBENCH_SCRIPT)
        script.flush()
        return _run_pgbench(pgbench, script.name, server.dsn(db, CONTENDER_APP), seconds)


def _run_pgbench(pgbench: Path, script: str, dsn: str, seconds: float, clients: int = 2) -> float:
    """tps of ``clients`` pgbench clients (2 threads) running ``script`` for ``seconds``."""
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    proc = subprocess.run(
        [str(pgbench), "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T", str(max(1, round(seconds))),
         "-f", script, "-h", str(info["host"]), "-p", str(info["port"]),
         "-U", str(info["user"]), str(info["dbname"])],
        capture_output=True, text=True, timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed: {proc.stderr.strip()}")
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", proc.stdout)
    if not m:
        raise RuntimeError(f"pgbench printed no tps: {proc.stdout[-500:]}")
    return float(m.group(1))


def run(server: BenchServer, cfg: Config, ttl_template: str | None, missing: str | None) -> dict[str, Any]:
    n = cfg.trigger_rows
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    installed: dict[str, Any] = {}
    for rep in range(cfg.reps):
        for variant in rotated(list(VARIANTS), rep):
            if variant == "pg_ttl_row_ttl" and missing:
                continue
            assert ttl_template is not None
            with server.database(ttl_template, RUN_DB) as db:
                with server.admin(db) as conn:
                    installed[variant] = _setup(conn, variant)
                with psycopg.connect(server.dsn(db, CONTENDER_APP), autocommit=True) as conn:
                    # Untimed warm-up: caches, plans and the first relation extension, as in a running app.
                    conn.execute("INSERT INTO ev (payload) SELECT 'w' FROM generate_series(1, 1000)")
                    conn.execute("CHECKPOINT")
                    t0 = time.perf_counter()
                    conn.execute("INSERT INTO ev (payload) SELECT rpad(md5(i::text), 100, 'x') "
                                 "FROM generate_series(1, %s) AS i", [n])
                    insert_s = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    conn.execute("UPDATE ev SET payload = md5(payload)")
                    update_s = time.perf_counter() - t0
                tps = _pgbench_tps(server, db, cfg.trigger_pgbench_s)
            record = {"status": "ok", "rep": rep, "bulk_insert_rows_per_s": n / insert_s, "bulk_insert_s": insert_s,
                      "bulk_update_rows_per_s": n / update_s, "single_insert_tps": tps}
            runs[variant].append(record)
            log(f"trigger rep {rep} {variant}: bulk insert {record['bulk_insert_rows_per_s']:.0f} rows/s, "
                f"update {record['bulk_update_rows_per_s']:.0f} rows/s, single-row insert {tps:.0f} tps")
    keys = ("bulk_insert_rows_per_s", "bulk_update_rows_per_s", "single_insert_tps")
    result: dict[str, Any] = {
        "description": "write throughput with and without per-row TTL",
        "params": {"bulk_rows": n, "pgbench_seconds": cfg.trigger_pgbench_s, "pgbench_clients": 2,
                   "reps": cfg.reps, "cores": "pgbench (2 threads) and the 2 server backends share the 2 cores"},
        "contenders": {},
    }
    for variant, rs in runs.items():
        if variant == "pg_ttl_row_ttl" and missing:
            result["contenders"][variant] = {"available": False, "reason": missing, "runs": []}
            continue
        result["contenders"][variant] = {
            "available": True, "installed": installed.get(variant), "runs": rs,
            "summary": {k: summarize([r[k] for r in rs]) for k in keys}}
    base = result["contenders"]["no_ttl"]["summary"]
    for entry in result["contenders"].values():
        if entry.get("available"):
            entry["overhead_vs_no_ttl"] = {
                k: (1 - r) if (r := ratio(entry["summary"][k]["median"], base[k]["median"])) is not None else None
                for k in keys}
    return result
