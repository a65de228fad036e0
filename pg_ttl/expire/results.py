"""What a pass reports: per unit and per table, typed; the engine returns these, the worker,
the CLI and the bench read them (nothing re-reads the run history for what is here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import psycopg

if TYPE_CHECKING:
    from pg_ttl.expire.pace import PaceState


@dataclass
class UnitResult:
    """One leaf partition (or the table itself)."""

    table: str
    unit: str
    action: str  # 'delete' | 'drop' | 'detach' | 'orphans' | 'skip'
    rows_selected: int
    rows_deleted: int
    status: str  # 'ok' | 'partial' | 'timeout' | 'failed' | 'skipped'
    error: str | None
    duration: float
    strategy: str | None = None  # 'index' | 'ctid' for row deletion; how a partition was detached
    relid: int | None = None
    values_nulled: int = 0  # column values expired (set to NULL or the column DEFAULT) in this unit
    rows_may_remain: bool = False  # the unit's context's (UnitContext.rows_may_remain)

    @property
    def removed_partition(self) -> bool:
        """The whole partition went (dropped or detached)."""
        return self.action in ("drop", "detach") and self.status == "ok"


@dataclass
class TableResult:
    """One table's run. Counters are the sums of ``units``; ``status`` is the one recorded in
    ``ttl.run`` (judged from the units by the database: ttl._finish_run)."""

    table: str
    run_id: int | None
    status: str  # 'ok' | 'partial' | 'failed' | 'paused' | 'busy' | 'interrupted' (table dropped meanwhile)
    units: list[UnitResult] = field(default_factory=list)
    rows_selected: int = 0
    rows_deleted: int = 0
    partitions_dropped: int = 0
    partitions_detached: int = 0
    values_nulled: int = 0
    orphans_deleted: int = 0  # of rows_deleted, those deleted as orphans
    rows_archived: int = 0  # of rows_deleted, those moved to storage by a tier first
    duration: float = 0.0
    error: str | None = None
    # The expiry of the oldest row expired by the run's cutoff that the run left (the lag
    # metric's number), when the run measured it at its end (oldest_measured).
    oldest_left: datetime | None = None
    oldest_measured: bool = False
    pace: PaceState | None = None  # the adaptive throttle's pace as the run ended (pace.py)

    def add(self, unit: UnitResult) -> None:
        """Count one finished unit in."""
        self.units.append(unit)
        self.rows_selected += unit.rows_selected
        self.rows_deleted += unit.rows_deleted
        self.values_nulled += unit.values_nulled
        if unit.action == "orphans":
            self.orphans_deleted += unit.rows_deleted
        if unit.action == "archive" or unit.strategy == "export":  # moved to storage (whole, for an export)
            self.rows_archived += unit.rows_deleted
        if unit.removed_partition:
            if unit.action == "drop":
                self.partitions_dropped += 1
            else:
                self.partitions_detached += 1

    def first_failure(self) -> str | None:
        """The error of the first failed unit (what the database records as a failed run's error)."""
        return next((u.error for u in self.units if u.status == "failed"), None)


def error_text(exc: BaseException) -> str:
    """One line for a result's ``error``: the server's primary message, else the exception's first line."""
    if isinstance(exc, psycopg.Error) and exc.diag.message_primary:
        return exc.diag.message_primary
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["TableResult", "UnitResult", "error_text"]
