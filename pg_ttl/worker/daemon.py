"""The worker process: one loop thread per database, the main thread for signals and systemd.

Each database loop keeps one control connection: it LISTENs on ``pg_ttl``
(every policy change notifies it) as a wake-up hint, re-reads the catalog with
one query on a hint or every ``poll_interval``, runs due tables one at a time
through the engine, and otherwise sleeps until the next tick, poll, heartbeat
or lag measurement. An idle worker therefore costs about one query per poll
interval per database, whatever the number of tables.

Losing the server ends the session; the loop reconnects with capped
exponential backoff (with jitter, so many workers do not stampede). On a
standby the loop only waits and logs: it never starts a run. SIGTERM/SIGINT
stop claiming new work; the engine finishes its current batch and commits;
the process exits 0 (1 if a run outlived ``shutdown_timeout``). SIGHUP re-reads
the configuration.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import random
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg

from pg_ttl import __version__
from pg_ttl.worker import config as config_mod
from pg_ttl.worker.config import DatabaseConfig, WorkerConfig
from pg_ttl.worker.logs import log
from pg_ttl.worker.logs import setup as setup_logging
from pg_ttl.worker.metrics import WorkerMetrics
from pg_ttl.worker.schedule import Clock, Entry, Scheduler
from pg_ttl.worker.sdnotify import SystemdNotifier, watchdog_interval

CHANNEL = "pg_ttl"

# One round trip per poll: standby state, the minimum interval, and every
# policy with the tick of its latest run (any worker's). A schedule row older
# than the policy itself belongs to an earlier policy of the same table.
CATALOG_QUERY = """
SELECT pg_catalog.pg_is_in_recovery(),
       (SELECT value FROM ttl.settings WHERE name = 'min_job_interval'),
       coalesce((SELECT json_agg(json_build_object(
                   'relid', p.relid,
                   'table', p.table_name,
                   'qualified', format('%I.%I', p.schema_name, p.relname),
                   'cron', p.job_cron,
                   'override', p.job_cron_override,
                   'paused', p.paused,
                   'partitioned', c.relkind = 'p',
                   'running', r.relid IS NOT NULL,
                   'due', CASE WHEN s.started_at >= p.created_at THEN s.due_at END,
                   'interrupted', s.started_at >= p.created_at AND s.finished_at IS NULL))
                  FROM ttl.worker_tables p
                  JOIN pg_catalog.pg_class c ON c.oid = p.relid
                  LEFT JOIN ttl.worker_schedule s ON s.relid = p.relid
                  -- one scan of pg_locks for all tables: who holds a run lock (see sql/60_worker.sql)
                  LEFT JOIN (SELECT DISTINCT l.objid AS relid FROM pg_catalog.pg_locks l
                              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                                AND l.classid = 1953786999::oid AND l.pid <> pg_catalog.pg_backend_pid()
                                AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname = pg_catalog.current_database())) r
                         ON r.relid = p.relid), '[]')
"""
IS_INSTALLED = "SELECT pg_catalog.to_regclass('ttl.worker_schedule') IS NOT NULL AND " \
               "pg_catalog.to_regclass('ttl.run') IS NOT NULL"
PRUNE_SCHEDULE = "DELETE FROM ttl.worker_schedule s " \
                 "WHERE NOT EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = s.relid)"
BEGIN_RUN = "SELECT verdict, round_started FROM ttl.worker_begin_run(%s, %s, %s)"
END_RUN = "SELECT ttl.worker_end_run(%s, %s, %s)"
VALUES_NULLED = "SELECT coalesce(sum(values_nulled), 0) FROM ttl.run_unit WHERE run_id = %s"
HEARTBEAT = "SELECT ttl.worker_heartbeat(%s, %s, %s, %s, %s, %s)"

Engine = Callable[..., Sequence[Any]]
OldestExpired = Callable[[psycopg.Connection[Any], int], datetime | None]


class NotInstalled(Exception):
    """The database has no (or an older) pg_ttl schema: wait and retry, like a lost connection."""


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Capped exponential backoff with full jitter in the upper half: base*2^(n-1), at most cap."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return float(ceiling * (0.5 + 0.5 * (rng or random).random()))


def load_engine() -> tuple[Engine, OldestExpired]:
    from pg_ttl.expire import expire, oldest_expired

    return expire, oldest_expired


def parse_interval(text: str | None) -> timedelta:
    """ttl.settings' min_job_interval ('15 minutes', '1 hour', '900 s', '00:15:00'); 15 minutes if unreadable."""
    if not text:
        return timedelta(minutes=15)
    value = text.strip().lower()
    if value.count(":") == 2:
        h, m, s = value.split(":")
        try:
            return timedelta(hours=int(h), minutes=int(m), seconds=float(s))
        except ValueError:
            return timedelta(minutes=15)
    units = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "mins": 60,
             "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400,
             "days": 86400}
    parts = value.split()
    total = 0.0
    try:
        for number, unit in zip(parts[::2], parts[1::2], strict=True):
            total += float(number) * units[unit]
    except (ValueError, KeyError):
        return timedelta(minutes=15)
    return timedelta(seconds=total)


@dataclass
class Shared:
    """What every database loop shares with the main thread."""

    config: WorkerConfig
    metrics: WorkerMetrics
    logger: logging.Logger
    clock: Clock
    engine: Engine
    oldest_expired: OldestExpired
    stop: threading.Event = field(default_factory=threading.Event)
    once: bool = False


class _Progress:
    """Engine progress -> metrics (unit durations) and log lines (one per unit)."""

    def __init__(self, loop: DatabaseLoop) -> None:
        self.loop = loop
        self._started: dict[tuple[str, str], float] = {}

    def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
        self._started[(table, unit)] = time.monotonic()
        self.loop.touch()

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        self.loop.touch()

    def unit_finished(self, result: Any) -> None:
        self.loop.touch()
        shared = self.loop.shared
        table = self.loop.current or str(result.table)
        shared.metrics.record_unit(self.loop.db.name, table, float(result.duration or 0.0))
        log(shared.logger, logging.INFO if result.status in ("ok", "skipped") else logging.WARNING, "unit finished",
            db=self.loop.db.name, table=table, partition=result.unit, action=result.action,
            status=result.status, rows_selected=result.rows_selected, rows=result.rows_deleted,
            duration=result.duration, **({"error": result.error} if result.error else {}))


class DatabaseLoop(threading.Thread):
    """Schedules and runs the TTL tables of one database."""

    def __init__(self, db: DatabaseConfig, shared: Shared) -> None:
        super().__init__(name=f"pg-ttl-{db.name}", daemon=True)
        self.db = db
        self.shared = shared
        self.scheduler = Scheduler()
        self.retire = threading.Event()  # this database left the config (SIGHUP)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.conn: psycopg.Connection[Any] | None = None
        self.state = "starting"
        self.current: str | None = None
        self.standby = False
        self.last_activity = time.monotonic()
        self.next_wake_at: datetime | None = None
        self.exit_error: BaseException | None = None
        self._next_poll = 0.0
        self._next_heartbeat = 0.0
        self._next_lag = 0.0
        self._reload = True
        self._connected = False

    # -- control from other threads ---------------------------------------------
    def wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def stop_requested(self) -> bool:
        return self.shared.stop.is_set() or self.retire.is_set()

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def _log(self, level: int, msg: str, **fields: Any) -> None:
        log(self.shared.logger, level, msg, db=self.db.name, **fields)

    # -- the thread ---------------------------------------------------------------
    def run(self) -> None:
        attempt = 0
        metrics = self.shared.metrics
        try:
            while not self.stop_requested():
                try:
                    self._connected = False
                    if self._session():
                        return
                except (psycopg.OperationalError, psycopg.InterfaceError, NotInstalled) as exc:
                    metrics.up.labels(self.db.name).set(0)
                    if self.stop_requested():
                        return
                    # A session that got going resets the backoff; repeated failures double it.
                    attempt = 1 if self._connected else attempt + 1
                    self.state = "reconnecting"
                    delay = backoff_delay(attempt, self.shared.config.min_backoff, self.shared.config.max_backoff)
                    metrics.reconnects.labels(self.db.name).inc()
                    self._log(logging.WARNING, "database unavailable", error=_one_line(exc), attempt=attempt,
                              retry_in=delay)
                    if self.shared.once:
                        self.exit_error = exc
                        return
                    self._sleep(delay)
                except Exception as exc:  # a bug or an unexpected server answer: log, back off, go on
                    metrics.up.labels(self.db.name).set(0)
                    attempt += 1
                    self.state = "reconnecting"
                    delay = backoff_delay(attempt, self.shared.config.min_backoff, self.shared.config.max_backoff)
                    self.shared.logger.exception("worker loop error", extra={"fields": {
                        "db": self.db.name, "error": _one_line(exc), "retry_in": round(delay, 3)}})
                    if self.shared.once:
                        self.exit_error = exc
                        return
                    self._sleep(delay)
        finally:
            self.state = "stopped"
            metrics.up.labels(self.db.name).set(0)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _sleep(self, seconds: float) -> None:
        self._wait(None, seconds)

    def _wait(self, conn: psycopg.Connection[Any] | None, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if a NOTIFY arrived. Returns early on stop or wake()."""
        if conn is not None and self._drain(conn):
            return True
        fds = [self._wake_r] + ([conn.fileno()] if conn is not None else [])
        readable, _, _ = select.select(fds, [], [], max(0.0, seconds))
        if self._wake_r in readable:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 4096)
        return conn is not None and self._drain(conn)

    def _drain(self, conn: psycopg.Connection[Any]) -> bool:
        """Consume pending notifications; True if another session sent one. Our own (the
        'run' notice worker_begin_run sends to wake the other workers) must not make us
        re-read the catalog after every table we run."""
        got = False
        for n in conn.notifies(timeout=0):
            got = got or n.pid != conn.info.backend_pid
        return got

    # -- one connected session ----------------------------------------------------
    def _session(self) -> bool:
        """Serve until stop (True) or until the connection fails (raises)."""
        cfg = self.shared.config
        with psycopg.connect(self.db.dsn, autocommit=True, application_name="pg-ttl worker",
                             connect_timeout=10) as conn:
            self.conn = conn
            row = conn.execute(IS_INSTALLED).fetchone()
            if not row or not row[0]:
                raise NotInstalled("pg_ttl (with its worker and engine tables) is not installed in this database; "
                                   "run: pg-ttl install")
            self.state = "connected"
            self.shared.metrics.up.labels(self.db.name).set(1)
            self._log(logging.INFO, "connected", dsn=config_mod.redact(self.db.dsn))
            listening = False
            self._reload = True
            self._next_poll = 0.0
            self._next_heartbeat = 0.0
            self._connected = True
            while not self.stop_requested():
                mono = time.monotonic()
                if self._reload or mono >= self._next_poll:
                    self._load_catalog(conn)
                    self._reload = False
                    self._next_poll = mono + cfg.poll_interval
                    if not self.standby and not listening:
                        conn.execute("LISTEN " + CHANNEL)  # constant channel name, no user input
                        listening = True
                        self._load_catalog(conn)  # changes made before LISTEN took effect
                if mono >= self._next_heartbeat and not self.standby:
                    self._heartbeat(conn, "running")
                    self._next_heartbeat = mono + cfg.heartbeat_interval
                if self.standby:
                    self.state = "standby"
                    if self.shared.once:
                        return True
                    self._wait(conn, cfg.poll_interval)
                    continue
                now = self.shared.clock.now()
                due = self.scheduler.due(now)
                if due:
                    entry, tick = due[0]
                    self._run_table(conn, entry, tick)
                    self._reload = self._drain(conn) or self._reload
                    continue
                if self.shared.once:
                    self._heartbeat(conn, "stopped")
                    return True
                self._refresh_lag(conn)
                self.state = "idle"
                self.current = None
                wake_at = self.scheduler.next_wake(now)
                self.next_wake_at = wake_at
                timeout = self._next_poll - time.monotonic()
                if wake_at is not None:
                    timeout = min(timeout, (wake_at - self.shared.clock.now()).total_seconds())
                timeout = min(timeout, self._next_heartbeat - time.monotonic())
                if self._lag_pending():
                    timeout = min(timeout, self._next_lag - time.monotonic())
                if self._wait(conn, max(timeout, 0.0) + 0.001):
                    self._reload = True
            self._heartbeat(conn, "stopped")
            return True

    def _load_catalog(self, conn: psycopg.Connection[Any]) -> None:
        row = conn.execute(CATALOG_QUERY).fetchone()
        assert row is not None
        in_recovery, min_interval, policies = row
        if bool(in_recovery) != self.standby:
            self.standby = bool(in_recovery)
            self.shared.metrics.standby.labels(self.db.name).set(1 if self.standby else 0)
            self._log(logging.WARNING if self.standby else logging.INFO,
                      "database is a standby: waiting, nothing will be deleted" if self.standby
                      else "database is a primary: running policies")
        self.scheduler.min_interval = parse_interval(min_interval)
        entries = [Entry(relid=int(p["relid"]), table=str(p["table"]), qualified=str(p["qualified"]),
                         cron=str(p["cron"]), override=bool(p["override"]), paused=bool(p["paused"]),
                         partitioned=bool(p["partitioned"]), running_elsewhere=bool(p["running"]),
                         interrupted=bool(p["interrupted"]),
                         last_due=_parse_ts(p["due"])) for p in policies]
        added, removed = self.scheduler.sync(entries)
        for e in added:
            if e.error:
                self._log(logging.ERROR, "policy skipped: cron not understood", table=e.table, error=e.error)
            else:
                self._log(logging.INFO, "policy picked up", table=e.table, job_cron=e.cron,
                          next_run=self.scheduler.next_run(e, self.shared.clock.now()))
        for e in removed:
            self._log(logging.INFO, "policy removed", table=e.table)
            self.shared.metrics.forget_table(self.db.name, e.table)
        if removed and not self.standby:
            conn.execute(PRUNE_SCHEDULE)
        now = self.shared.clock.now()
        m = self.shared.metrics
        m.tables.labels(self.db.name).set(len(self.scheduler.entries))
        for e in self.scheduler.entries.values():
            nxt = self.scheduler.next_run(e, now)
            if nxt is not None:
                m.next_run.labels(self.db.name, e.table).set(nxt.timestamp())

    def _heartbeat(self, conn: psycopg.Connection[Any], state: str) -> None:
        if self.standby:
            return
        conn.execute(HEARTBEAT, (self.shared.config.name, socket.gethostname(), os.getpid(), __version__, state,
                                 len(self.scheduler.entries)))

    # -- one run --------------------------------------------------------------------
    def _run_table(self, conn: psycopg.Connection[Any], entry: Entry, tick: datetime) -> None:
        cfg = self.shared.config
        row = conn.execute(BEGIN_RUN, (entry.relid, tick, cfg.name)).fetchone()
        verdict = str(row[0]) if row else "done"
        round_started = row[1] if row else None
        entry.skipped_due = tick  # decided: this worker does not come back to this tick
        if verdict in ("skip", "done"):
            if verdict == "skip":
                self._log(logging.WARNING, "run skipped: the previous run of this table is still going",
                          table=entry.table, tick=tick)
            return
        entry.last_due = tick
        entry.running = True
        self.state = "running"
        self.current = entry.table
        self._log(logging.INFO, "run started", table=entry.table, tick=tick, role=verdict)
        started = time.monotonic()
        status = "failed"
        try:
            kwargs: dict[str, Any] = {"stop": self.shared.stop, "progress": _Progress(self), "worker": cfg.name}
            if round_started is not None and _accepts_cutoff(self.shared.engine):
                # Everyone in this round expires the rows expired when it began: a
                # unit visited twice (engine claims only exclude concurrent work) finds nothing new.
                kwargs["cutoff"] = round_started
            results = self.shared.engine(self.db.dsn, [entry.qualified or entry.table], **kwargs)
            statuses = []
            for result in results:
                nulled = self._values_nulled(conn, getattr(result, "run_id", None))
                self.shared.metrics.record_run(self.db.name, _Labelled(result, entry.table, nulled))
                statuses.append(str(result.status))
                self._log(logging.INFO if result.status in ("ok", "paused", "busy") else logging.WARNING,
                          "run finished", table=entry.table, run_id=getattr(result, "run_id", None),
                          status=result.status, rows_selected=result.rows_selected, rows=result.rows_deleted,
                          partitions_dropped=result.partitions_dropped,
                          partitions_detached=result.partitions_detached, values_nulled=nulled,
                          duration=result.duration)
            status = statuses[0] if len(statuses) == 1 else ("ok" if not statuses else ",".join(statuses))
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            duration = time.monotonic() - started
            self.shared.metrics.record_failure(self.db.name, entry.table, duration)
            self._log(logging.ERROR, "run failed", table=entry.table, error=_one_line(exc), duration=duration)
            raise  # the server is likely gone: the session ends and reconnects
        except Exception as exc:
            duration = time.monotonic() - started
            self.shared.metrics.record_failure(self.db.name, entry.table, duration)
            self._log(logging.ERROR, "run failed", table=entry.table, error=_one_line(exc), duration=duration)
        finally:
            entry.running = False
            self.current = None
            self.touch()
        if self.shared.stop.is_set() and status == "partial":
            status = "interrupted"  # stopped mid-run: the round stays open and is resumed
        entry.interrupted = status == "interrupted"
        entry.running_elsewhere = False
        conn.execute(END_RUN, (entry.relid, tick, status[:40]))
        self._measure_lag(conn, entry)

    def _values_nulled(self, conn: psycopg.Connection[Any], run_id: int | None) -> int:
        """Column values the run nulled (kept in the run history only, not in the engine's result)."""
        if run_id is None:
            return 0
        try:
            row = conn.execute(VALUES_NULLED, (run_id,)).fetchone()
        except psycopg.errors.UndefinedColumn:  # a schema without column TTL
            return 0
        return int(row[0]) if row else 0

    # -- expiration lag -------------------------------------------------------------
    def _measure_lag(self, conn: psycopg.Connection[Any], entry: Entry) -> None:
        entry.lag_checked = time.monotonic()
        try:
            oldest = self.shared.oldest_expired(conn, entry.relid)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            raise
        except Exception as exc:  # e.g. the table went away meanwhile; the next poll drops it
            self._log(logging.DEBUG, "lag not measured", table=entry.table, error=_one_line(exc))
            return
        self.shared.metrics.lag.set(self.db.name, entry.table, oldest)

    def _lag_candidates(self) -> list[Entry]:
        cfg = self.shared.config
        if cfg.lag_queries_per_second <= 0:
            return []
        mono = time.monotonic()
        every = cfg.lag_refresh_interval
        stale = [e for e in self.scheduler.entries.values() if not e.running and (
            e.lag_checked == 0.0 or (every > 0 and mono - e.lag_checked >= every))]
        stale.sort(key=lambda e: e.lag_checked)
        return stale

    def _lag_pending(self) -> bool:
        return bool(self._lag_candidates())

    def _refresh_lag(self, conn: psycopg.Connection[Any]) -> None:
        """Measure the stalest tables, at most lag_queries_per_second on average."""
        rate = self.shared.config.lag_queries_per_second
        if rate <= 0 or time.monotonic() < self._next_lag:
            return
        for entry in self._lag_candidates()[:1]:
            self._measure_lag(conn, entry)
            self._next_lag = time.monotonic() + 1.0 / rate


class _Labelled:
    """A TableResult whose ``table`` is the name the worker labels metrics with, plus its nulled values."""

    def __init__(self, result: Any, table: str, rows_nulled: int = 0) -> None:
        self._result = result
        self.table = table
        self.rows_nulled = rows_nulled

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)


def _accepts_cutoff(engine: Engine) -> bool:
    try:
        return "cutoff" in inspect.signature(engine).parameters
    except (TypeError, ValueError):
        return False


def _parse_ts(value: Any) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(str(value))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Worker:
    """The whole process: database loops, metrics server, signals, systemd."""

    def __init__(self, config: WorkerConfig, *, cli_overrides: dict[str, Any] | None = None, once: bool = False,
                 engine: Engine | None = None, oldest_expired: OldestExpired | None = None,
                 notifier: SystemdNotifier | None = None) -> None:
        self.cli_overrides = dict(cli_overrides or {})
        self.logger = setup_logging(config.log_format, config.log_level)
        if engine is None or oldest_expired is None:
            loaded_engine, loaded_oldest = load_engine()
            engine = engine or loaded_engine
            oldest_expired = oldest_expired or loaded_oldest
        self.shared = Shared(config=config, metrics=WorkerMetrics(config.name), logger=self.logger,
                             clock=Clock(config.clock_offset), engine=engine, oldest_expired=oldest_expired,
                             once=once)
        self.notifier = notifier or SystemdNotifier()
        self.loops: dict[str, DatabaseLoop] = {}
        self._wake = threading.Event()
        self._reload_requested = False
        self._signals = 0
        self.metrics_port: int | None = None

    # -- signals ------------------------------------------------------------------------
    def _on_stop(self, signum: int, _frame: Any) -> None:
        self._signals += 1
        if self._signals > 1:
            # A second signal: the operator insists. Uncommitted work rolls back with the connection.
            os.write(2, b"pg-ttl worker: second signal, exiting now\n")
            os._exit(1)
        self.shared.stop.set()
        for loop in list(self.loops.values()):
            loop.wake()
        self._wake.set()

    def _on_hup(self, _signum: int, _frame: Any) -> None:
        self._reload_requested = True
        self._wake.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    # -- lifecycle ----------------------------------------------------------------------
    def _start_loops(self) -> None:
        for db in self.shared.config.databases:
            if db.name not in self.loops:
                loop = DatabaseLoop(db, self.shared)
                self.loops[db.name] = loop
                loop.start()

    def reload(self) -> None:
        """SIGHUP: re-read the config file and environment; add/remove databases, apply intervals and logging."""
        self.notifier.reloading()
        old = self.shared.config
        try:
            new = config_mod.load({**self.cli_overrides, "name": old.name})
        except config_mod.ConfigError as exc:
            log(self.logger, logging.ERROR, "reload failed, keeping the old configuration", error=str(exc))
            self.notifier.ready()
            return
        setup_logging(new.log_format, new.log_level)
        if new.metrics_addr != old.metrics_addr:
            log(self.logger, logging.WARNING, "metrics_addr changes need a restart", metrics_addr=old.metrics_addr)
            new.metrics_addr = old.metrics_addr
        new.clock_offset = old.clock_offset
        self.shared.config = new
        wanted = {db.name: db for db in new.databases}
        for name, loop in list(self.loops.items()):
            if name not in wanted or wanted[name].dsn != loop.db.dsn:
                loop.retire.set()
                loop.wake()
                loop.join(new.shutdown_timeout)
                del self.loops[name]
                self.shared.metrics.lag.forget(name)
        self._start_loops()
        for loop in self.loops.values():
            loop._reload = True
            loop.wake()
        log(self.logger, logging.INFO, "configuration reloaded", databases=",".join(sorted(wanted)),
            poll_interval=new.poll_interval)
        self.notifier.ready(self.status_text())

    def status_text(self) -> str:
        loops = list(self.loops.values())
        running = [f"{lp.db.name}/{lp.current}" for lp in loops if lp.current]
        if running:
            return "running " + ", ".join(running)
        tables = sum(len(lp.scheduler.entries) for lp in loops)
        states = sorted({lp.state for lp in loops})
        wakes = [w for lp in loops if (w := lp.next_wake_at) is not None]
        nxt = f"; next run {min(wakes).strftime('%Y-%m-%d %H:%M:%S')} UTC" if wakes else ""
        return f"{'/'.join(states) or 'idle'}: {tables} tables in {len(loops)} database(s){nxt}"

    def run(self) -> int:
        cfg = self.shared.config
        if cfg.metrics_host_port:
            host, port = cfg.metrics_host_port
            try:
                self.metrics_port = self.shared.metrics.serve(host, port)
            except OSError as exc:
                raise config_mod.ConfigError(f"cannot serve metrics on {cfg.metrics_addr}: "
                                             f"{exc.strerror or exc}") from None
        log(self.logger, logging.INFO, "worker starting", worker=cfg.name, version=__version__,
            databases=",".join(db.name for db in cfg.databases), metrics_port=self.metrics_port,
            poll_interval=cfg.poll_interval, config=cfg.config_path)
        self._start_loops()
        self.notifier.ready(self.status_text())
        watchdog = watchdog_interval()
        last_status = ""
        tick = min(watchdog or 5.0, 5.0)
        while not self.shared.stop.is_set():
            if self.shared.once and all(not lp.is_alive() for lp in self.loops.values()):
                break
            self._wake.wait(0.2 if self.shared.once else tick)
            self._wake.clear()
            if self._reload_requested:
                self._reload_requested = False
                self.reload()
            if watchdog and all(lp.is_alive() for lp in self.loops.values()):
                self.notifier.watchdog()
            text = self.status_text()
            if text != last_status:
                self.notifier.status(text)
                last_status = text
        return self._shutdown()

    def _shutdown(self) -> int:
        cfg = self.shared.config
        self.shared.stop.set()
        self.notifier.stopping("stopping: finishing the current batch")
        log(self.logger, logging.INFO, "worker stopping", timeout=cfg.shutdown_timeout)
        deadline = time.monotonic() + cfg.shutdown_timeout
        for loop in self.loops.values():
            loop.wake()
        stuck = []
        for loop in self.loops.values():
            loop.join(max(0.0, deadline - time.monotonic()))
            if loop.is_alive():
                stuck.append(loop.db.name)
        self.shared.metrics.shutdown()
        if stuck:
            log(self.logger, logging.ERROR, "runs did not finish within shutdown_timeout; exiting anyway "
                "(uncommitted batches roll back)", databases=",".join(stuck))
            return 1
        errors = [lp for lp in self.loops.values() if lp.exit_error is not None]
        log(self.logger, logging.INFO, "worker stopped")
        return 2 if errors and self.shared.once else 0
