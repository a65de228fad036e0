"""One measured run of one contender on a fresh clone, shared by the expiry workloads."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.contenders import ContenderTimeout, Outcome, Unavailable
from bench.measure import Measured, measuring, reset_statements, statement_profile
from bench.server import CONTENDER_APP, BenchServer

RUN_DB = "bench_run"
ROOT_FOR_SUBPROCESS = str(Path(__file__).resolve().parent.parent)


@dataclass
class Config:
    """Sizes and limits of one bench invocation (all derived from --scale unless given)."""

    scale: float = 1.0
    reps: int = 3
    plain_rows: int = 2_000_000
    part_sizes: tuple[int, ...] = (10_000, 100_000)
    fg_rate: int = 400
    fg_clients: int = 4
    fg_baseline_s: float = 15.0  # p99 of a 5 s window (2,000 transactions) moved 0.41-0.65 ms between repetitions
    fg_warmup_s: float = 1.5
    # Load measured just before and just after each contender's window, on the same copy and
    # load generator (under the same transaction sampler): a baseline taken next to it.
    fg_adjacent_s: float = 5.0
    fg_rate_limit: int = 200_000  # delete_rate_limit of the pg_ttl_limited contender, rows/s
    trigger_rows: int = 500_000
    trigger_pgbench_s: float = 3.0
    idle_policies: int = 1000
    idle_warmup_s: float = 5.0
    idle_window_s: float = 30.0
    idle_first_pass_limit_s: float = 150.0
    limit_s: float = 180.0
    pgttl_entry: str = "cli"
    pgttl_startup_s: float = 0.0
    workloads: tuple[str, ...] = ("plain_indexed", "plain_noindex", "partitioned", "foreground", "trigger",
                                  "idle_worker")

    @classmethod
    def scaled(cls, scale: float, reps: int) -> Config:
        s = scale
        return cls(
            scale=s, reps=reps,
            plain_rows=max(2_000, int(2_000_000 * s)),
            part_sizes=(max(100, int(10_000 * s)), max(1_000, int(100_000 * s))),
            fg_baseline_s=max(1.0, 15.0 * min(1.0, s * 4)),
            fg_warmup_s=0.3 if s < 0.1 else 1.5,
            fg_adjacent_s=max(0.5, 5.0 * min(1.0, s * 4)),
            fg_rate_limit=max(1_000, int(200_000 * s)),
            trigger_rows=max(2_000, int(500_000 * s)),
            trigger_pgbench_s=max(1.0, 3.0 * min(1.0, s * 4)),
            idle_policies=max(10, int(1000 * min(1.0, s * 4))),
            idle_warmup_s=max(1.0, 5.0 * min(1.0, s * 4)),
            idle_window_s=max(2.0, 30.0 * min(1.0, s * 4)),
            idle_first_pass_limit_s=max(20.0, 150.0 * min(1.0, s * 4)),
            limit_s=max(30.0, 180.0 * min(1.0, s * 2)),
        )


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def rotated(items: list[Any], rep: int) -> list[Any]:
    """A different contender goes first in each repetition, so order effects average out."""
    k = rep % len(items) if items else 0
    return items[k:] + items[:k]


@contextmanager
def fresh(server: BenchServer, template: str, setup: Callable[[str], None] | None = None) -> Iterator[str]:
    """A clone of ``template``, set up, prewarmed and checkpointed; dropped afterwards."""
    with server.database(template, RUN_DB) as db:
        if setup is not None:
            setup(db)
        server.prepare_measurement(db)
        yield db


def measured_run(server: BenchServer, db: str, contender: Callable[[str], Outcome],
                 sample_txns: bool = True) -> tuple[dict[str, Any], Measured | None]:
    """Run ``contender`` on ``db`` under measurement; return the run record and the raw measurement."""
    record: dict[str, Any] = {"status": "ok"}
    m: Measured | None = None
    with server.admin() as conn:
        reset_statements(conn, db)
    try:
        with measuring(server.dsn(db), sample_txns=sample_txns) as m:
            outcome = contender(server.dsn(db, CONTENDER_APP))
    except ContenderTimeout as exc:
        record.update(status="timeout", error=str(exc))
        outcome = Outcome()
    except Unavailable as exc:
        record.update(status="unavailable", error=str(exc))
        return record, None
    assert m is not None
    record.update(
        wall_s=m.wall_s,
        wal_bytes=m.wal_bytes,
        longest_txn_s=m.txn.get("longest_txn_s"),
        txns_sampled=m.txn.get("txns_sampled"),
        txns_exact=m.txn.get("txns_exact"),
        transactions=outcome.transactions or None,
        partitions_dropped_reported=outcome.partitions_dropped or None,
        **outcome.extra,
    )
    with server.admin() as conn:
        record["statement_profile"] = statement_profile(conn, db)
    return record, m
