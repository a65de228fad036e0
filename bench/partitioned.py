"""Workload 3: a table partitioned by day; drop the expired days (pg_partman, a hand-written DROP, pg_ttl).

Run at two sizes (rows per partition) to show whether the cost of removing a
partition grows with what is in it: for a DROP it should not.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from psycopg import sql

from bench import contenders as c
from bench.data import (
    PART_EXPIRE_AFTER,
    PART_RETENTION_DAYS,
    PART_TABLE,
    PartData,
    partition_name,
)
from bench.measure import dead_tuples, wait_for_other_backends
from bench.runner import Config, fresh, log, measured_run, rotated
from bench.server import BenchServer
from bench.stats import ratio, summarize_runs

SUMMARY_KEYS = ("wall_s", "wall_excl_startup_s", "wal_bytes", "wal_bytes_per_partition", "longest_txn_s",
                "partitions_dropped")
CONTENDERS = ("pg_partman", "hand_drop", "pg_ttl")


def verify(server: BenchServer, db: str, data: PartData) -> dict[str, Any]:
    """Count what is left, independently of what the contender says it did."""
    leaves = [str(r[0]) for r in server.execute(
        db, "SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass) WHERE isleaf", [PART_TABLE])]
    with server.admin(db) as conn:
        wait_for_other_backends(conn)
        dead = dead_tuples(conn, leaves)
    rows = server.execute(db, sql.SQL(
        "SELECT count(*), count(*) FILTER (WHERE created_at < now() - {}::interval) FROM {}").format(
        sql.Literal(PART_EXPIRE_AFTER), sql.Identifier(PART_TABLE)))
    left, expired_left = int(rows[0][0]), int(rows[0][1])
    expired_names = [partition_name(data.first_day + timedelta(days=i)) for i in range(data.expired_partitions)]
    present = server.execute(db, "SELECT count(*) FROM unnest(%s::text[]) AS n WHERE to_regclass(n) IS NOT NULL",
                             [expired_names])
    dropped = data.expired_partitions - int(present[0][0])
    return {
        "rows_deleted": data.rows - left,
        "rows_left": left,
        "expired_left": expired_left,
        "partitions_dropped": dropped,
        "correct": expired_left == 0 and left == data.rows - data.expired and dropped == data.expired_partitions,
        "dead_tuples": dead,
    }


def run_size(server: BenchServer, cfg: Config, data: PartData, ttl_template: str | None,
             pgttl_missing: str | None, partman_missing: str | None) -> dict[str, Any]:
    today = data.first_day + timedelta(days=20)
    hand_names = c.expired_partition_names(data.first_day, today, PART_RETENTION_DAYS, partition_name)
    runners: dict[str, Callable[[str], c.Outcome]] = {
        "pg_partman": lambda dsn: c.partman_retention(dsn, PART_TABLE, cfg.limit_s),
        "hand_drop": lambda dsn: c.hand_drop(dsn, hand_names, cfg.limit_s),
        "pg_ttl": lambda dsn: c.pgttl_run(dsn, [PART_TABLE], cfg.limit_s, cfg.pgttl_entry),
    }
    missing = {"pg_ttl": pgttl_missing, "pg_partman": partman_missing, "hand_drop": None}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in runners}
    partman_version: str | None = None
    for rep in range(cfg.reps):
        for contender in rotated(list(CONTENDERS), rep):
            if missing[contender]:
                continue
            template = ttl_template if contender == "pg_ttl" else data.template
            assert template is not None

            def setup(db: str, contender: str = contender) -> None:
                nonlocal partman_version
                if contender == "pg_partman":
                    partman_version = c.partman_setup(server.dsn(db), PART_TABLE, data.first_day,
                                                      PART_RETENTION_DAYS)

            with fresh(server, template, setup) as db:
                record, _ = measured_run(server, db, runners[contender])
                record.update(verify(server, db, data), rep=rep)
                if contender == "pg_ttl":
                    with server.admin(db) as conn:
                        record["engine_history"] = c.pgttl_history(conn)
                    record["wall_excl_startup_s"] = record.get("wall_s", 0.0) - cfg.pgttl_startup_s
            if record["status"] == "ok" and not record["correct"]:
                record["status"] = "incorrect"
            if record.get("partitions_dropped"):
                record["wal_bytes_per_partition"] = record["wal_bytes"] / record["partitions_dropped"]
            runs[contender].append(record)
            log(f"partitioned {data.rows_per_partition}/part rep {rep} {contender}: {record['status']} "
                f"wall={record.get('wall_s', 0):.3f}s dropped={record['partitions_dropped']} "
                f"wal={record.get('wal_bytes', 0) / 1e3:.0f}kB longest_txn={record.get('longest_txn_s') or 0:.3f}s")
    out: dict[str, Any] = {
        "params": {"rows_per_partition": data.rows_per_partition, "rows": data.rows, "expired": data.expired,
                   "expired_partitions": data.expired_partitions, "partitions": data.partitions,
                   "retention": PART_EXPIRE_AFTER, "reps": cfg.reps, "pg_partman_version": partman_version},
        "contenders": {},
    }
    for contender, rs in runs.items():
        if missing[contender]:
            out["contenders"][contender] = {"available": False, "reason": missing[contender], "runs": []}
        else:
            out["contenders"][contender] = {"available": True, "runs": rs, "summary": summarize_runs(rs, SUMMARY_KEYS)}
    return out


def run(server: BenchServer, cfg: Config, sizes: list[tuple[PartData, str | None]], pgttl_missing: str | None,
        partman_missing: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "description": "daily range partitions; remove the 10 fully expired days (retention 10 days)",
        "sizes": [run_size(server, cfg, data, tpl, pgttl_missing, partman_missing) for data, tpl in sizes],
    }
    result["growth"] = _growth(result["sizes"])
    return result


def _growth(sizes: list[dict[str, Any]]) -> dict[str, Any]:
    """Large size over small size, per contender: ~1 means the cost does not grow with rows per partition."""
    if len(sizes) < 2:
        return {}
    small, large = sizes[0], sizes[-1]
    out: dict[str, Any] = {"rows_per_partition_ratio": ratio(large["params"]["rows_per_partition"],
                                                             small["params"]["rows_per_partition"])}
    for contender in CONTENDERS:
        a = large["contenders"].get(contender, {}).get("summary", {})
        b = small["contenders"].get(contender, {}).get("summary", {})
        out[contender] = {
            key: ratio((a.get(key) or {}).get("median"), (b.get(key) or {}).get("median"))
            for key in ("wall_s", "wal_bytes_per_partition")
        }
    return out
