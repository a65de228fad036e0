"""When each table's runs are due: croniter over ``job_cron``, in UTC.

A table is due when the latest cron tick at or before now has not been run
yet. The tick (not the wall time) names the run, so several workers agree on
which run they are in, and ticks missed while no worker was up collapse into
one run instead of a burst. A table that never ran is due at once (enabling a
TTL on a table with a backlog acts right away). Unless ``job_cron_override``
is set, two runs are at least ``min_job_interval`` apart: the next run is the
first tick at or after ``last tick + min_job_interval``.

A run still going (here or on another worker) is not started again: that
tick is skipped, as CockroachDB skips overlapping runs.

A run nobody's worker made (``pg-ttl run``, the Python API, ``CALL
ttl.run()``) that succeeded counts as the run of the latest tick at or before
its start: the worker does not repeat it, and ``pg-ttl status`` says when the
next one is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from croniter import croniter

DEFAULT_CRON = "@hourly"
_EPS = timedelta(microseconds=1)


class Clock:
    """Wall clock in UTC, optionally shifted (tests move it next to a cron tick)."""

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = timedelta(seconds=offset)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def to_monotonic(self, when: datetime) -> float:
        """The time.monotonic() value at which this clock shows ``when``."""
        return time.monotonic() + (when - self.now()).total_seconds()


def cron_error(expr: str) -> str | None:
    """None when croniter accepts ``expr``, else why not."""
    if not croniter.is_valid(expr.strip()):
        return f"invalid cron expression {expr!r} (5 fields: minute hour day-of-month month day-of-week, or @hourly...)"
    return None


def latest_tick(expr: str, now: datetime) -> datetime:
    """The last tick at or before ``now``."""
    prev: datetime = croniter(expr.strip(), now + _EPS).get_prev(datetime)
    return prev


def first_tick_from(expr: str, start: datetime) -> datetime:
    """The first tick at or after ``start``."""
    nxt: datetime = croniter(expr.strip(), start - _EPS).get_next(datetime)
    return nxt


def next_due(expr: str, last_due: datetime | None, min_interval: timedelta, override: bool) -> datetime | None:
    """When the run after the one for tick ``last_due`` is due; None = at once (never ran)."""
    if last_due is None:
        return None
    gap = timedelta(0) if override else max(min_interval, timedelta(0))
    return first_tick_from(expr, max(last_due + _EPS, last_due + gap))


def due_tick(expr: str, last_due: datetime | None, now: datetime, min_interval: timedelta,
             override: bool) -> datetime | None:
    """The tick to run now, or None when nothing is due."""
    tick = latest_tick(expr, now)
    nd = next_due(expr, last_due, min_interval, override)
    if nd is None or nd <= now:
        return tick
    return None


@dataclass
class Entry:
    """What the scheduler knows about one TTL table."""

    relid: int
    table: str
    qualified: str = ""                  # schema-qualified, quoted: what the engine is given
    cron: str = DEFAULT_CRON
    override: bool = False
    paused: bool = False
    last_due: datetime | None = None     # latest tick any worker started (ttl.worker_schedule)
    skipped_due: datetime | None = None  # latest tick this worker decided about (ran, joined, skipped, found done)
    shared: bool = False                 # workers split its units: partitions, or a big table's ranges
    running_elsewhere: bool = False      # another worker holds the run lock (its round may be joined)
    interrupted: bool = False            # the latest round never finished (resumed when nobody is at it)
    running: bool = False
    error: str | None = None             # cron croniter cannot read: never due, reported
    manual_run_at: datetime | None = None  # start of the latest run, if no worker made it and it succeeded
    refused: str | None = None           # why this worker cannot act on the table (never due here), or None
    lag_checked: float = 0.0             # monotonic time of the last lag measurement
    _cache: tuple[object, datetime | None] | None = field(default=None, repr=False, compare=False)
    _manual: tuple[object, datetime] | None = field(default=None, repr=False, compare=False)

    def next_due(self, min_interval: timedelta) -> datetime | None:
        """Cached ``next_due``: croniter is slow enough to matter with thousands of idle tables."""
        key = (self.cron, self.effective_last, self.override, min_interval)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, next_due(self.cron, self.effective_last, min_interval, self.override))
        return self._cache[1]

    @property
    def manual_due(self) -> datetime | None:
        """The tick a manual run covers (see the module's docstring); cached per run."""
        if self.manual_run_at is None or self.error:
            return None
        key = (self.cron, self.manual_run_at)
        if self._manual is None or self._manual[0] != key:
            self._manual = (key, latest_tick(self.cron, self.manual_run_at))
        return self._manual[1]

    @property
    def effective_last(self) -> datetime | None:
        known = [t for t in (self.last_due, self.skipped_due, self.manual_due) if t is not None]
        return max(known) if known else None


@dataclass
class Scheduler:
    min_interval: timedelta = timedelta(minutes=15)
    entries: dict[int, Entry] = field(default_factory=dict)
    # cron expression -> (its latest tick, the tick after): one croniter call per expression and
    # tick, not one per table and loop (thousands of tables share a few schedules)
    _ticks: dict[str, tuple[datetime, datetime]] = field(default_factory=dict, repr=False)

    def latest_tick(self, expr: str, now: datetime) -> datetime:
        """``latest_tick(expr, now)``, cached until the next tick."""
        known = self._ticks.get(expr)
        if known is None or not known[0] <= now < known[1]:
            tick = latest_tick(expr, now)
            known = (tick, first_tick_from(expr, tick + _EPS))
            if len(self._ticks) > 10_000:  # expressions of tables long gone
                self._ticks.clear()
            self._ticks[expr] = known
        return known[0]

    def sync(self, rows: list[Entry]) -> tuple[list[Entry], list[Entry]]:
        """Replace the policy set with ``rows`` (fresh from the catalog); keep local state. Returns (added, removed)."""
        fresh = {r.relid: r for r in rows}
        removed = [e for relid, e in self.entries.items() if relid not in fresh]
        added = []
        for relid, row in fresh.items():
            old = self.entries.get(relid)
            row.error = cron_error(row.cron)
            if old is None:
                added.append(row)
                self.entries[relid] = row
                continue
            old.table, old.qualified, old.cron = row.table, row.qualified, row.cron
            old.override, old.paused, old.error = row.override, row.paused, row.error
            old.shared, old.running_elsewhere = row.shared, row.running_elsewhere
            old.interrupted, old.manual_run_at, old.refused = row.interrupted, row.manual_run_at, row.refused
            # Another worker may have run it meanwhile: the catalog's tick only moves forward.
            if row.last_due is not None and (old.last_due is None or row.last_due > old.last_due):
                old.last_due = row.last_due
        for e in removed:
            del self.entries[e.relid]
        return added, removed

    @staticmethod
    def joinable(e: Entry) -> bool:
        """The latest round needs this worker: another worker runs it on a table whose units workers
        split (partitions, a big table's ranges) and this worker has not decided about it (take part:
        the engine's claims split them), or it was interrupted and nobody is at it (take it up again)."""
        if e.last_due is None:
            return False
        if e.interrupted and not e.running_elsewhere:
            return True
        return e.shared and e.running_elsewhere and (e.skipped_due is None or e.skipped_due < e.last_due)

    def due(self, now: datetime) -> list[tuple[Entry, datetime]]:
        """Tables due now with the tick each run is for, oldest tick first."""
        out = []
        for e in self.entries.values():
            if e.running or e.error or e.refused:
                continue
            nd = e.next_due(self.min_interval)
            if nd is None or nd <= now:
                out.append((e, self.latest_tick(e.cron, now)))
            elif self.joinable(e):
                assert e.last_due is not None
                out.append((e, e.last_due))
        out.sort(key=lambda pair: (pair[1], pair[0].table))
        return out

    def still_due(self, e: Entry, tick: datetime, now: datetime) -> bool:
        """Whether ``e`` (listed by :meth:`due` for ``tick`` earlier in this pass) is still to run for it."""
        if self.entries.get(e.relid) is not e or e.running or e.error or e.refused:
            return False
        if e.skipped_due is not None and e.skipped_due >= tick:
            return False  # decided about already
        nd = e.next_due(self.min_interval)
        return nd is None or nd <= now or self.joinable(e)

    def next_run(self, e: Entry, now: datetime) -> datetime | None:
        """When ``e`` runs next (now if it is due); None if never (bad cron, or refused here)."""
        if e.error or e.refused:
            return None
        nd = e.next_due(self.min_interval)
        return now if nd is None or nd <= now or self.joinable(e) else nd

    def next_wake(self, now: datetime) -> datetime | None:
        """The earliest time any idle table becomes due."""
        times = [t for e in self.entries.values() if not e.running and (t := self.next_run(e, now)) is not None]
        return min(times) if times else None
