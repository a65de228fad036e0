"""Expiration lag: after each run (read by the run itself, at its end, when it could), and for
the stalest tables at a slow background pace, the expiry of each table's oldest expired row,
handed to the metrics (which turn it into a lag)."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from pg_ttl.worker.schedule import Entry, Scheduler
from pg_ttl.worker.session import Conn, connection_lost
from pg_ttl.worker.shared import LoopState, one_line


class LagMeter:
    """Looks up the oldest expired row of one database's tables, at most
    ``lag_queries_per_second`` on average in the background."""

    def __init__(self, loop: LoopState, scheduler: Scheduler) -> None:
        self.loop = loop
        self.scheduler = scheduler
        self.next_at = 0.0  # monotonic time of the next background measurement

    def measure(self, conn: Conn, entry: Entry) -> None:
        try:
            oldest = self.loop.shared.oldest_expired(conn, entry.relid)
        except Exception as exc:
            if connection_lost(exc, conn):
                raise
            # The table is locked, went away meanwhile (the next poll drops it), ...: measured next time.
            entry.lag_checked = time.monotonic()
            self.loop.log(logging.DEBUG, "lag not measured", table=entry.table, error=one_line(exc))
            return
        self.record(entry, oldest)

    def record(self, entry: Entry, oldest: datetime | None) -> None:
        """The expiry of the table's oldest expired row, as just read (by a run, at its end)."""
        entry.lag_checked = time.monotonic()
        self.loop.shared.metrics.lag.set(self.loop.db.name, entry.table, oldest)

    def candidates(self) -> list[Entry]:
        cfg = self.loop.shared.config
        if cfg.lag_queries_per_second <= 0:
            return []
        mono = time.monotonic()
        every = cfg.lag_refresh_interval
        stale = [e for e in self.scheduler.entries.values() if not e.running and (
            e.lag_checked == 0.0 or (every > 0 and mono - e.lag_checked >= every))]
        stale.sort(key=lambda e: e.lag_checked)
        return stale

    def pending(self) -> bool:
        return bool(self.candidates())

    def refresh(self, conn: Conn) -> None:
        """Measure the stalest tables, at most lag_queries_per_second on average."""
        rate = self.loop.shared.config.lag_queries_per_second
        if rate <= 0 or time.monotonic() < self.next_at:
            return
        for entry in self.candidates()[:1]:
            self.measure(conn, entry)
            self.next_at = time.monotonic() + 1.0 / rate
