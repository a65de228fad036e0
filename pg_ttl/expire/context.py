"""What one unit of work needs: connection, policy, predicate, limits, listeners."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from pg_ttl.expire.history import UnitEnd
from pg_ttl.expire.pace import Pace
from pg_ttl.expire.predicate import EnginePolicy, Predicate
from pg_ttl.expire.results import UnitResult
from pg_ttl.expire.units import Unit
from pg_ttl.wakeup import StopRequest


class ProgressListener(Protocol):
    """Callbacks of a run (the CLI draws progress bars, the worker counts metrics)."""

    def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None: ...

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None: ...

    def unit_finished(self, result: UnitResult) -> None: ...


class NullProgress:
    def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
        pass

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        pass

    def unit_finished(self, result: UnitResult) -> None:
        pass


# What a pass reads of the settings, once (ttl._pass_settings() s): by pg-ttl run with the
# cutoff, by the worker with each run's start (in the statement that begins it).
PASS_SETTINGS = "s.settings, s.replica_lag_bytes, s.row_range_blocks, s.shared_sweep_blocks, s.transaction_seconds"


@dataclass
class EngineSettings:
    lock_timeout: str = "1s"
    statement_timeout: str = "30s"
    row_lock_timeout: str = "50ms"
    row_strategy: str = "auto"  # 'auto' | 'index' | 'ctid'
    throttle: bool = True  # the adaptive throttle (pace.py)
    throttle_target: float = 1.25
    # row_range_bytes in blocks (ttl.row_range_blocks()), and the size from which a unit
    # swept in ctid order is shared range by range with other runs (ttl.shared_sweep_blocks(),
    # sweeps.py); 0: never
    row_range_blocks: int = 0
    shared_sweep_blocks: int = 0
    # the WAL a replica may have left to replay before the throttle slows down (bytes; None: no limit)
    replica_lag_bytes: int | None = None
    # how long one transaction of expiry aims to take (ttl.transaction_seconds()); read with
    # each pass's settings (None: not read, as by ``load``)
    transaction_seconds: float | None = None

    @classmethod
    def load(cls, conn: psycopg.Connection[Any]) -> EngineSettings:
        return cls.from_values(dict(conn.execute("SELECT name, value FROM ttl.settings").fetchall()))

    @classmethod
    def from_pass_row(cls, row: Sequence[Any]) -> EngineSettings:
        """From the columns PASS_SETTINGS names (``ttl._pass_settings()``), as a pass reads them."""
        settings = cls.from_values(row[0] or {})
        settings.replica_lag_bytes = None if row[1] is None else int(row[1])
        settings.row_range_blocks, settings.shared_sweep_blocks = int(row[2] or 0), int(row[3] or 0)
        settings.transaction_seconds = float(row[4])
        return settings

    @property
    def transaction_target(self) -> float:
        """How long one transaction of expiry aims to take, as the pass read it."""
        assert self.transaction_seconds is not None, "settings not read with a pass (from_pass_row)"
        return self.transaction_seconds

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> EngineSettings:
        """From ``ttl.settings`` rows as name -> value."""
        return cls(
            lock_timeout=str(values.get("lock_timeout", cls.lock_timeout)),
            statement_timeout=str(values.get("statement_timeout", cls.statement_timeout)),
            row_lock_timeout=str(values.get("row_lock_timeout", cls.row_lock_timeout)),
            row_strategy=str(values.get("row_strategy", cls.row_strategy)),
            throttle=str(values.get("throttle", "on")) == "on",
            throttle_target=float(values.get("throttle_target", cls.throttle_target)),
        )


class RateLimiter:
    """At most ``rate`` rows per second per table, and the adaptive throttle's rests
    (``pace``); waits between transactions only."""

    def __init__(self, rate: int, stop: StopRequest | None, pace: Pace | None = None) -> None:
        self.rate = rate
        self.stop = stop
        self.pace = pace
        self.count = 0
        self.start = time.monotonic()

    @property
    def paced(self) -> bool:
        """Waits come between transactions: keep each one small."""
        return self.rate > 0 or (self.pace is not None and self.pace.slowed)

    def add(self, rows: int) -> None:
        """``rows`` committed: rest as the throttle says, then as the rate limit says."""
        if self.pace is not None:
            self.pace.between_transactions(rows)
        if self.rate <= 0 or rows <= 0:
            return
        self.count += rows
        delay = self.start + self.count / self.rate - time.monotonic()
        if delay > 0:
            if self.stop is not None:
                self.stop.wait(delay)
            else:
                time.sleep(delay)
            if self.pace is not None:  # a rest for the throttle too
                self.pace.resumed()


@dataclass
class UnitContext:
    conn: psycopg.Connection[Any]  # autocommit: one statement = one short transaction
    policy: EnginePolicy
    pred: Predicate
    unit: Unit
    run_id: int
    settings: EngineSettings
    progress: ProgressListener
    select_limiter: RateLimiter
    delete_limiter: RateLimiter
    stop: StopRequest | None = None
    checkpoint: dict[str, Any] | None = None
    selected: int = 0  # rows, committed (rows.py)
    deleted: int = 0
    values_nulled: int = 0  # column values, committed (columns.py)
    removed: str | None = None  # 'drop' | 'detach': a partition exported whole went (tiers/exports.py)
    lock_timeout: str | None = None  # the session's lock_timeout when rows.py changed it
    block_delete: dict[bool, str] = field(default_factory=dict)  # rows.py: DELETE by skip_locked
    key_rows: str | None = None  # ranges.py: a key's first and last row (ttl.key_rows_sql)
    # (blocks now, reltuples, relpages) as read when the unit's strategy was chosen (rows.py)
    size: tuple[int, float, int] | None = None
    # the strategy and the estimate of expired rows, when chosen before the unit was claimed
    chosen: tuple[str, int | None] | None = None
    # Rows expired by the cutoff may be left in the unit: some were held by the application
    # or kept moving, or another run (of this pass or an earlier one) did part of the unit.
    # Without it, the unit's work met every such row and deleted it (engine: the lag metric).
    rows_may_remain: bool = False
    # the unit's end, left to the statement that ends its run (engine.run_unit's defer_end)
    unit_end: UnitEnd | None = None

    def stopping(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def paced(self) -> bool:
        """A rate limit or the throttle slows the pass: its waits fall between transactions,
        so each transaction is kept to delete_batch_size rows (rows.py)."""
        return self.delete_limiter.paced or self.select_limiter.rate > 0


__all__ = ["EngineSettings", "NullProgress", "ProgressListener", "RateLimiter", "UnitContext", "UnitResult"]
