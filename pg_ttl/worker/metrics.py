"""Prometheus metrics of the worker (prometheus-client), served on ``--metrics-addr``.

Counters follow what the engine reports per run. The expiration lag (age of
the oldest expired row still present: what an operator pages on) is measured
after each run and at a slow background pace, and computed at scrape time
from the remembered expiry instant, so it keeps growing between measurements
without any query.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from pg_ttl import __version__
from pg_ttl.expire.pace import REASONS as PACE_REASONS

if TYPE_CHECKING:
    from pg_ttl.expire.results import TableResult

DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, float("inf"))
BATCH_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf"))


class LagCollector(Collector):
    """``pg_ttl_expiration_lag_seconds``: now minus the expiry of the oldest expired row still present."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._oldest: dict[tuple[str, str], datetime | None] = {}
        self._measured: dict[tuple[str, str], float] = {}

    def set(self, db: str, table: str, oldest_expired: datetime | None) -> None:
        with self._lock:
            self._oldest[(db, table)] = oldest_expired
            self._measured[(db, table)] = time.time()

    def forget(self, db: str, table: str | None = None) -> None:
        with self._lock:
            for key in [k for k in self._oldest if k[0] == db and (table is None or k[1] == table)]:
                self._oldest.pop(key, None)
                self._measured.pop(key, None)

    def lag(self, db: str, table: str, now: datetime | None = None) -> float | None:
        """Seconds of lag, 0 when nothing is expired, None when never measured."""
        with self._lock:
            if (db, table) not in self._oldest:
                return None
            oldest = self._oldest[(db, table)]
        if oldest is None:
            return 0.0
        if oldest.tzinfo is None:  # timestamp without time zone is read as UTC, like the engine does
            oldest = oldest.replace(tzinfo=UTC)
        return max(0.0, ((now or datetime.now(UTC)) - oldest).total_seconds())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily("pg_ttl_expiration_lag_seconds",
                                "Age of the oldest expired row still present (0: nothing expired)",
                                labels=["database", "table"])
        measured = GaugeMetricFamily("pg_ttl_expiration_lag_measured_timestamp_seconds",
                                     "When the lag's oldest expired row was last looked up",
                                     labels=["database", "table"])
        now = datetime.now(UTC)
        with self._lock:
            keys = sorted(self._oldest)
            stamps = dict(self._measured)
        for db, table in keys:
            value = self.lag(db, table, now)
            if value is not None:
                lag.add_metric([db, table], value)
                measured.add_metric([db, table], stamps[(db, table)])
        yield lag
        yield measured


class StallCollector(Collector):
    """``pg_ttl_loop_stalled_seconds``: per database, how long its loop has shown no progress
    while not asleep by design (pg_ttl/worker/shared.py, LoopState.stalled_for). A loop blocked
    in a statement or a bug grows it; a healthy one keeps it near 0 (one batch, one statement).
    Read at scrape time from ``source`` (the worker's loops)."""

    def __init__(self) -> None:
        self.source: Callable[[], dict[str, float]] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("pg_ttl_loop_stalled_seconds",
                                   "Seconds since the database's loop last showed progress (a batch, a unit, a "
                                   "run, a pass of its loop), 0 while it sleeps until its next poll or run",
                                   labels=["database"])
        for db, seconds in sorted((self.source() if self.source else {}).items()):
            family.add_metric([db], seconds)
        yield family


class WorkerMetrics:
    """Every metric of one worker process, in its own registry."""

    def __init__(self, worker_name: str = "") -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        by_table = ["database", "table"]
        self.rows_selected = Counter("pg_ttl_rows_selected", "Expired rows selected as candidates", by_table,
                                     registry=r)
        self.rows_deleted = Counter("pg_ttl_rows_deleted", "Expired rows deleted", by_table, registry=r)
        self.rows_nulled = Counter("pg_ttl_rows_nulled", "Rows whose expired column values were nulled", by_table,
                                   registry=r)
        self.orphans_deleted = Counter("pg_ttl_orphans_deleted",
                                       "Orphan rows deleted (parent gone; also counted in pg_ttl_rows_deleted)",
                                       by_table, registry=r)
        self.rows_archived = Counter("pg_ttl_rows_archived",
                                     "Rows moved to storage by a tier (and deleted: also in pg_ttl_rows_deleted)",
                                     by_table, registry=r)
        by_tier = [*by_table, "storage", "tier"]
        self.archive_bytes = Counter("pg_ttl_archive_bytes", "Bytes a tier wrote to storage (Parquet objects; "
                                     "0 for a PostgreSQL storage)", by_tier, registry=r)
        self.archive_objects = Counter("pg_ttl_archive_objects", "Objects a tier wrote to storage (Parquet "
                                       "objects; batches for a PostgreSQL storage)", by_tier, registry=r)
        self._tier_series: dict[tuple[str, str], set[tuple[str, str]]] = {}  # (db, table) -> {(storage, tier)}
        self._tables: dict[str, set[str]] = {}  # database -> tables with series, for forget_database
        self.partitions_dropped = Counter("pg_ttl_partitions_dropped", "Expired partitions dropped", by_table,
                                          registry=r)
        self.partitions_detached = Counter("pg_ttl_partitions_detached", "Expired partitions detached", by_table,
                                           registry=r)
        self.runs = Counter("pg_ttl_runs", "Runs by final status (ok, partial, failed, paused, busy)",
                            [*by_table, "status"], registry=r)
        self.run_failures = Counter("pg_ttl_run_failures", "Runs that failed (status failed or an error)", by_table,
                                    registry=r)
        self.units = Counter("pg_ttl_units", "Units of work (table or partition) processed", by_table, registry=r)
        self.run_duration = Histogram("pg_ttl_run_duration_seconds", "Duration of table runs", ["database"],
                                      buckets=DURATION_BUCKETS, registry=r)
        self.batch_duration = Histogram("pg_ttl_batch_duration_seconds",
                                        "Duration of one unit of work (partition or table batch loop)",
                                        ["database"], buckets=BATCH_BUCKETS, registry=r)
        self.last_run_duration = Gauge("pg_ttl_last_run_duration_seconds", "Duration of the last run", by_table,
                                       registry=r)
        self.last_run = Gauge("pg_ttl_last_run_timestamp_seconds", "When the last run finished", by_table,
                              registry=r)
        self.next_run = Gauge("pg_ttl_next_run_timestamp_seconds", "When the next run is due", by_table, registry=r)
        self.tables = Gauge("pg_ttl_tables", "TTL tables known to the worker", ["database"], registry=r)
        self.up = Gauge("pg_ttl_database_up", "1 while the worker is connected to the database", ["database"],
                        registry=r)
        self.standby = Gauge("pg_ttl_database_standby", "1 while the database is a standby (nothing is deleted)",
                             ["database"], registry=r)
        self.reconnects = Counter("pg_ttl_reconnects", "Connection losses followed by a reconnect attempt",
                                  ["database"], registry=r)
        self.pace = Gauge("pg_ttl_pace", "Share of the time the engine works (1: full speed; below 1: the "
                          "adaptive throttle slows it down), as the latest run ended", ["database"], registry=r)
        self.pace_slowdown = Gauge("pg_ttl_pace_slowdown", "How much slower other sessions' statements ran while "
                                   "the engine worked than while it rested (90th percentile), last measured",
                                   ["database"], registry=r)
        self.pace_reason = Gauge("pg_ttl_pace_reason", "1 for why the pace is what it is (off, idle, healthy, "
                                 "throttled, replica_lag, measuring, blind, unmeasured)", ["database", "reason"],
                                 registry=r)
        self.info = Gauge("pg_ttl_worker_info", "Worker identity", ["worker", "version"], registry=r)
        self.info.labels(worker_name, __version__).set(1)
        self.lag = LagCollector()
        r.register(self.lag)
        self.stalls = StallCollector()
        r.register(self.stalls)
        self._server: Any = None

    _TABLE_METRICS = ("rows_selected", "rows_deleted", "rows_nulled", "orphans_deleted", "rows_archived",
                      "partitions_dropped",
                      "partitions_detached", "run_failures", "units", "last_run_duration", "last_run", "next_run")

    def _seen(self, db: str, table: str) -> None:
        self._tables.setdefault(db, set()).add(table)

    def set_next_run(self, db: str, table: str, when: datetime | None) -> None:
        """When ``table`` runs next; no series when it never does (bad cron, refused)."""
        if when is None:
            with contextlib.suppress(KeyError):
                self.next_run.remove(db, table)
            return
        self._seen(db, table)
        self.next_run.labels(db, table).set(when.timestamp())

    def record_run(self, db: str, table: str, result: TableResult) -> None:
        """Account one engine result; ``table`` is the name the series are labelled with."""
        self._seen(db, table)
        labels = (db, table)
        self.rows_selected.labels(*labels).inc(result.rows_selected)
        self.rows_deleted.labels(*labels).inc(result.rows_deleted)
        self.rows_nulled.labels(*labels).inc(result.values_nulled)
        self.orphans_deleted.labels(*labels).inc(result.orphans_deleted)
        self.rows_archived.labels(*labels).inc(result.rows_archived)
        archive_units = [u.relid for u in result.units if u.action == "archive"]
        if archive_units:
            from pg_ttl.expire.tiers import moved

            for m in moved(result.run_id, archive_units):  # per storage tier (pg_ttl/expire/tiers/objects.py)
                tier = (m.storage, str(m.tier))
                self._tier_series.setdefault(labels, set()).add(tier)
                self.archive_bytes.labels(*labels, *tier).inc(m.bytes)
                self.archive_objects.labels(*labels, *tier).inc(m.objects)
        self.partitions_dropped.labels(*labels).inc(result.partitions_dropped)
        self.partitions_detached.labels(*labels).inc(result.partitions_detached)
        self.runs.labels(*labels, result.status).inc()
        if result.status == "failed":
            self.run_failures.labels(*labels).inc()
        self.run_duration.labels(db).observe(result.duration)
        self.last_run_duration.labels(*labels).set(result.duration)
        self.last_run.labels(*labels).set(time.time())
        if result.pace is not None:
            self.pace.labels(db).set(result.pace.duty)
            if result.pace.slowdown is not None:
                self.pace_slowdown.labels(db).set(result.pace.slowdown)
            for reason in PACE_REASONS:
                self.pace_reason.labels(db, reason).set(1 if reason == result.pace.reason else 0)

    def record_failure(self, db: str, table: str, duration: float) -> None:
        """A run that raised instead of returning a result."""
        self._seen(db, table)
        self.runs.labels(db, table, "failed").inc()
        self.run_failures.labels(db, table).inc()
        self.run_duration.labels(db).observe(duration)
        self.last_run_duration.labels(db, table).set(duration)
        self.last_run.labels(db, table).set(time.time())

    def record_unit(self, db: str, table: str, duration: float) -> None:
        self._seen(db, table)
        self.units.labels(db, table).inc()
        self.batch_duration.labels(db).observe(duration)

    def forget_table(self, db: str, table: str) -> None:
        """Drop the series of a table whose policy is gone."""
        for name in self._TABLE_METRICS:
            metric = getattr(self, name)
            with contextlib.suppress(KeyError):
                metric.remove(db, table)
        for status in ("ok", "partial", "failed", "paused", "busy"):
            with contextlib.suppress(KeyError):
                self.runs.remove(db, table, status)
        for tier in self._tier_series.pop((db, table), set()):
            for metric in (self.archive_bytes, self.archive_objects):
                with contextlib.suppress(KeyError):
                    metric.remove(db, table, *tier)
        self.lag.forget(db, table)
        self._tables.get(db, set()).discard(table)

    def forget_database(self, db: str) -> None:
        """Drop every series of a database the worker no longer serves (removed from the config
        or given another DSN): a scrape must not report it as down, or its tables as lagging."""
        for table in self._tables.pop(db, set()):
            self.forget_table(db, table)
        for metric in (self.run_duration, self.batch_duration, self.tables, self.up, self.standby,
                       self.reconnects, self.pace, self.pace_slowdown):
            with contextlib.suppress(KeyError):
                metric.remove(db)
        for reason in PACE_REASONS:
            with contextlib.suppress(KeyError):
                self.pace_reason.remove(db, reason)
        self.lag.forget(db)

    def serve(self, host: str, port: int) -> int:
        """Serve /metrics in a daemon thread; returns the bound port (0 picks a free one)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return int(server.server_address[1])

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
