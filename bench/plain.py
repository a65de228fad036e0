"""Workloads 1 and 2: bulk expiry of half a plain table, with and without a btree on the TTL column."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from psycopg import sql

from bench import contenders as c
from bench.data import PLAIN_EXPIRE_AFTER, PLAIN_INDEX, PLAIN_TABLE, PlainData
from bench.measure import dead_tuples, wait_for_other_backends
from bench.runner import Config, fresh, log, measured_run, rotated
from bench.server import BenchServer
from bench.stats import ratio, summarize_runs

SUMMARY_KEYS = ("wall_s", "rows_per_s", "rows_per_s_excl_startup", "wal_bytes", "longest_txn_s", "dead_tuples")


def _contenders(limit_s: float, entry: str) -> dict[str, Callable[[str], c.Outcome]]:
    args = (PLAIN_TABLE, "created_at", PLAIN_EXPIRE_AFTER, limit_s)
    return {
        "raw_delete": lambda dsn: c.raw_delete(dsn, *args),
        "batched_loop": lambda dsn: c.batched_loop(dsn, *args),
        "pg_ttl": lambda dsn: c.pgttl_run(dsn, [PLAIN_TABLE], limit_s, entry),
    }


def _drop_index(server: BenchServer, db: str) -> None:
    server.execute(db, sql.SQL("DROP INDEX {}").format(sql.Identifier(PLAIN_INDEX)))


def verify(server: BenchServer, db: str, data: PlainData) -> dict[str, Any]:
    """Count what is left, independently of what the contender says it did."""
    with server.admin(db) as conn:
        wait_for_other_backends(conn)
        dead = dead_tuples(conn, [PLAIN_TABLE])
    rows = server.execute(db, sql.SQL(
        "SELECT count(*), count(*) FILTER (WHERE created_at < now() - {}::interval) FROM {}").format(
        sql.Literal(PLAIN_EXPIRE_AFTER), sql.Identifier(PLAIN_TABLE)))
    left, expired_left = int(rows[0][0]), int(rows[0][1])
    return {
        "rows_deleted": data.rows - left,
        "rows_left": left,
        "expired_left": expired_left,
        "correct": expired_left == 0 and left == data.rows - data.expired,
        "dead_tuples": dead,
    }


def run(server: BenchServer, cfg: Config, data: PlainData, ttl_template: str | None, indexed: bool,
        pgttl_missing: str | None) -> dict[str, Any]:
    name = "plain_indexed" if indexed else "plain_noindex"
    runners = _contenders(cfg.limit_s, cfg.pgttl_entry)
    result: dict[str, Any] = {
        "description": ("bulk expiry of half a plain table "
                        + ("with a btree on the TTL column" if indexed else "without an index on the TTL column")),
        "params": {"rows": data.rows, "expired": data.expired, "payload_bytes": 100,
                   "expire_after": PLAIN_EXPIRE_AFTER, "batched_loop_batch": c.BATCH_LOOP_SIZE,
                   "index_on_ttl_column": indexed, "reps": cfg.reps},
        "contenders": {},
    }
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in runners}
    for rep in range(cfg.reps):
        for contender in rotated(list(runners), rep):
            if contender == "pg_ttl" and (pgttl_missing or ttl_template is None):
                continue
            template = ttl_template if contender == "pg_ttl" else data.template
            assert template is not None
            setup = None if indexed else partial(_drop_index, server)
            with fresh(server, template, setup) as db:
                record, _ = measured_run(server, db, runners[contender])
                record.update(verify(server, db, data), rep=rep)
                if contender == "pg_ttl":
                    with server.admin(db) as conn:
                        record["engine_history"] = c.pgttl_history(conn)
                    record["wall_excl_startup_s"] = record.get("wall_s", 0.0) - cfg.pgttl_startup_s
            if record["status"] == "ok" and not record["correct"]:
                record["status"] = "incorrect"
            if record.get("wall_s"):
                record["rows_per_s"] = record["rows_deleted"] / record["wall_s"]
            if record.get("wall_excl_startup_s"):
                record["rows_per_s_excl_startup"] = record["rows_deleted"] / max(record["wall_excl_startup_s"], 1e-6)
            runs[contender].append(record)
            log(f"{name} rep {rep} {contender}: {record['status']} wall={record.get('wall_s', 0):.2f}s "
                f"deleted={record['rows_deleted']} wal={record.get('wal_bytes', 0) / 1e6:.1f}MB "
                f"longest_txn={record.get('longest_txn_s') or 0:.3f}s dead={record['dead_tuples']}")
    for contender, rs in runs.items():
        entry: dict[str, Any] = {"runs": rs, "summary": summarize_runs(rs, SUMMARY_KEYS)}
        if contender == "pg_ttl" and pgttl_missing:
            entry = {"available": False, "reason": pgttl_missing, "runs": []}
        else:
            entry["available"] = True
        result["contenders"][contender] = entry
    result["ratios"] = _ratios(result["contenders"])
    return result


def _median(entry: dict[str, Any], key: str) -> float | None:
    summary = entry.get("summary") or {}
    value = (summary.get(key) or {}).get("median")
    return float(value) if value is not None else None


def _ratios(contenders: dict[str, Any]) -> dict[str, float | None]:
    ttl = contenders.get("pg_ttl", {})
    raw = contenders.get("raw_delete", {})
    loop = contenders.get("batched_loop", {})
    return {
        "pg_ttl_rows_per_s_vs_raw_delete": ratio(_median(ttl, "rows_per_s"), _median(raw, "rows_per_s")),
        "pg_ttl_rows_per_s_vs_batched_loop": ratio(_median(ttl, "rows_per_s"), _median(loop, "rows_per_s")),
        "pg_ttl_excl_startup_rows_per_s_vs_raw_delete": ratio(_median(ttl, "rows_per_s_excl_startup"),
                                                              _median(raw, "rows_per_s")),
        "pg_ttl_excl_startup_rows_per_s_vs_batched_loop": ratio(_median(ttl, "rows_per_s_excl_startup"),
                                                                _median(loop, "rows_per_s")),
        "batched_loop_rows_per_s_vs_raw_delete": ratio(_median(loop, "rows_per_s"), _median(raw, "rows_per_s")),
        "pg_ttl_wal_vs_raw_delete": ratio(_median(ttl, "wal_bytes"), _median(raw, "wal_bytes")),
    }
