"""The worker process: one loop thread per database, the main thread for signals and systemd.

Each database loop keeps one control connection: it LISTENs on ``pg_ttl``
(every policy change notifies it) as a wake-up hint, re-reads the catalog with
one query on a hint or every ``poll_interval``, runs due tables one at a time
through the engine, and otherwise sleeps until the next tick, poll, heartbeat
or lag measurement. An idle worker therefore costs about one query per poll
interval per database, whatever the number of tables.

Losing the server ends the session; the loop reconnects with capped
exponential backoff (with jitter, so many workers do not stampede). Any other
error (a lock, a timeout, a permission, bad data) is one table's failure: it
is logged and counted, and the loop goes on to the next table. On a
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
from psycopg import sql

from pg_ttl import __version__
from pg_ttl.worker import config as config_mod
from pg_ttl.worker.config import DatabaseConfig, WorkerConfig
from pg_ttl.worker.logs import log
from pg_ttl.worker.logs import setup as setup_logging
from pg_ttl.worker.metrics import WorkerMetrics
from pg_ttl.worker.schedule import Clock, Entry, Scheduler
from pg_ttl.worker.sdnotify import SystemdNotifier, watchdog_interval

CHANNEL = "pg_ttl"

# One round trip per poll: standby state, the minimum interval in seconds, and
# every policy with the tick of its latest run (any worker's). A schedule row
# older than the policy itself belongs to an earlier policy of the same table.
# PostgreSQL reads the interval (as ttl.enable's check does), so '2 weeks',
# '1 mon' or 'P1D' mean here what they mean there; no setting means no minimum.
MIN_INTERVAL_SECONDS = sql.SQL(
    "coalesce((SELECT extract(epoch FROM s.value::interval)::float8 FROM ttl.settings s "
    "WHERE s.name = 'min_job_interval'), 0)")
# Used while the setting is not a valid interval (the rest of the poll must still work).
DEFAULT_MIN_INTERVAL = timedelta(minutes=15)
CATALOG_QUERY = sql.SQL("""
SELECT pg_catalog.pg_is_in_recovery(),
       {min_interval},
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
""")
IS_INSTALLED = "SELECT pg_catalog.to_regclass('ttl.worker_schedule') IS NOT NULL AND " \
               "pg_catalog.to_regclass('ttl.run') IS NOT NULL"
PRUNE_SCHEDULE = "DELETE FROM ttl.worker_schedule s " \
                 "WHERE NOT EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = s.relid)"
BEGIN_RUN = "SELECT verdict, round_started FROM ttl.worker_begin_run(%s, %s, %s)"
END_RUN = "SELECT ttl.worker_end_run(%s, %s, %s)"
VALUES_NULLED = "SELECT coalesce(sum(values_nulled), 0) FROM ttl.run_unit WHERE run_id = %s"
HEARTBEAT = "SELECT ttl.worker_heartbeat(%s, %s, %s, %s, %s, %s)"
UNLOCK_RUN = "SELECT pg_catalog.pg_advisory_unlock_shared(ttl.worker_lock_key(%s))"
NOT_OWNER = "SELECT c.relowner::regrole::text, current_user FROM pg_catalog.pg_class c " \
            "WHERE c.oid = %s AND NOT pg_catalog.pg_has_role(current_user, c.relowner, 'MEMBER')"
# The first role this session is, or can act as, that is a superuser or has
# BYPASSRLS: its own (current_user, or session_user if it differs) first.
# pg_has_role(..., 'MEMBER') is true where SET ROLE would work.
PRIVILEGED_ROLE = """
SELECT r.rolname, r.rolsuper, r.rolname IN (current_user, session_user) AS own, current_user
  FROM pg_catalog.pg_roles r
 WHERE (r.rolsuper OR r.rolbypassrls)
   AND (r.rolname IN (current_user, session_user)
        OR pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
        OR pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER'))
 ORDER BY own DESC, r.rolsuper DESC, r.rolname
 LIMIT 1
"""
# SQLSTATEs (besides class 08, connection exception) after which the server
# has ended or refuses the session: admin_shutdown, crash_shutdown, cannot_connect_now.
SESSION_ENDED = frozenset({"57P01", "57P02", "57P03"})

Engine = Callable[..., Sequence[Any]]
OldestExpired = Callable[[psycopg.Connection[Any], int], datetime | None]


class NotInstalled(Exception):
    """The database has no (or an older) pg_ttl schema: wait and retry, like a lost connection."""


class RoleRefused(Exception):
    """The worker connected as (or can act as) a superuser or BYPASSRLS role and was not allowed to."""


def connection_lost(exc: BaseException, conn: psycopg.Connection[Any] | None = None) -> bool:
    """True when ``exc`` means the session is gone and must be opened again; False when it is one
    statement's failure (a lock or statement timeout, a permission, a missing object, bad data) that
    leaves the session usable. psycopg files many of the latter under OperationalError, so the class
    alone cannot tell."""
    if conn is not None and conn.broken:
        return True
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:
        # No SQLSTATE: libpq's own error (connection refused, closed, reset), not the server's answer.
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith("08") or state in SESSION_ENDED


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Capped exponential backoff with full jitter in the upper half: base*2^(n-1), at most cap."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return float(ceiling * (0.5 + 0.5 * (rng or random).random()))


def load_engine() -> tuple[Engine, OldestExpired]:
    from pg_ttl.expire import expire, oldest_expired

    return expire, oldest_expired


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
    wake_main: threading.Event = field(default_factory=threading.Event)  # the main thread has news to act on
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
        self.failed_runs = 0  # runs that failed (the loop went on to the next table)
        self._interval_error: str | None = None  # the min_job_interval problem last logged
        self._heartbeat_error: str | None = None  # the heartbeat problem last logged
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
                except RoleRefused as exc:
                    # Not a passing condition: retrying would only repeat it. Stop the whole worker.
                    self.exit_error = exc
                    self.shared.stop.set()
                    self.shared.wake_main.set()
                    return
                except Exception as exc:
                    metrics.up.labels(self.db.name).set(0)
                    if self.stop_requested():
                        return
                    lost = isinstance(exc, NotInstalled) or connection_lost(exc)
                    # A session that got going resets the backoff; repeated failures double it.
                    attempt = 1 if self._connected and lost else attempt + 1
                    self.state = "reconnecting"
                    delay = backoff_delay(attempt, self.shared.config.min_backoff, self.shared.config.max_backoff)
                    if lost:
                        metrics.reconnects.labels(self.db.name).inc()
                        self._log(logging.WARNING, "database unavailable", error=_one_line(exc), attempt=attempt,
                                  retry_in=delay)
                    elif isinstance(exc, psycopg.Error):  # the server refused something outside a run
                        self._log(logging.ERROR, "worker loop error", error=_one_line(exc), retry_in=delay)
                    else:  # a bug or an unexpected answer: keep the traceback
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
    def _check_schema(self, conn: psycopg.Connection[Any]) -> None:
        from pg_ttl.install import schema_problem

        problem = schema_problem(conn)
        if problem is not None:
            raise NotInstalled(problem)

    def _session(self) -> bool:
        """Serve until stop (True) or until the connection fails (raises)."""
        cfg = self.shared.config
        with psycopg.connect(self.db.dsn, autocommit=True, application_name="pg-ttl worker",
                             connect_timeout=10) as conn:
            self.conn = conn
            self._check_role(conn)
            row = conn.execute(IS_INSTALLED).fetchone()
            if not row or not row[0]:
                raise NotInstalled("pg_ttl (with its worker and engine tables) is not installed in this database; "
                                   "run: pg-ttl install")
            self._check_schema(conn)
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
                    self._check_schema(conn)  # an upgrade while we run: wait for the matching worker
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

    def _check_role(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a superuser or BYPASSRLS role unless allow_superuser: with those rights the engine
        would run table owners' code unchecked, and row security would not guard the run history."""
        row = conn.execute(PRIVILEGED_ROLE).fetchone()
        if row is None:
            return
        role, superuser, own, current = row
        kind = "a superuser" if superuser else "a role with BYPASSRLS"
        what = (f'connected as role "{role}", {kind}' if own
                else f'role "{current}" is a member of "{role}", {kind}, and can act as it')
        if self.shared.config.allow_superuser:
            self._log(logging.WARNING, "running with superuser or BYPASSRLS rights (allow_superuser is set)",
                      role=role)
            return
        raise RoleRefused(
            f"database {self.db.name}: {what}; refusing to run: the engine would run table owners' code "
            "(triggers, defaults, expressions) with those rights and row security would not guard the run "
            "history. Connect as a dedicated role (LOGIN NOSUPERUSER NOBYPASSRLS, a member of each TTL "
            "table's owner role; see docs/worker.md), or pass --allow-superuser "
            "(allow_superuser = true in the config file) to run anyway")

    def _read_catalog(self, conn: psycopg.Connection[Any]) -> tuple[Any, timedelta, Any]:
        try:
            row = conn.execute(CATALOG_QUERY.format(min_interval=MIN_INTERVAL_SECONDS)).fetchone()
            self._interval_error = None
        except psycopg.errors.DataError as exc:  # the setting is not an interval PostgreSQL can read
            if connection_lost(exc, conn):
                raise
            if self._interval_error != _one_line(exc):
                self._interval_error = _one_line(exc)
                self._log(logging.ERROR, "setting min_job_interval is not a valid interval; using the default",
                          error=self._interval_error, default=DEFAULT_MIN_INTERVAL.total_seconds())
            row = conn.execute(CATALOG_QUERY.format(min_interval=sql.NULL)).fetchone()
        assert row is not None
        in_recovery, seconds, policies = row
        interval = DEFAULT_MIN_INTERVAL if seconds is None else timedelta(seconds=float(seconds))
        return in_recovery, interval, policies

    def _load_catalog(self, conn: psycopg.Connection[Any]) -> None:
        in_recovery, min_interval, policies = self._read_catalog(conn)
        if bool(in_recovery) != self.standby:
            self.standby = bool(in_recovery)
            self.shared.metrics.standby.labels(self.db.name).set(1 if self.standby else 0)
            self._log(logging.WARNING if self.standby else logging.INFO,
                      "database is a standby: waiting, nothing will be deleted" if self.standby
                      else "database is a primary: running policies")
        self.scheduler.min_interval = min_interval
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
        try:
            conn.execute(HEARTBEAT, (self.shared.config.name, socket.gethostname(), os.getpid(), __version__,
                                     state, len(self.scheduler.entries)))
        except psycopg.Error as exc:
            # The heartbeat only informs `pg-ttl status`: a refused one must not stop the expiry.
            if connection_lost(exc, conn):
                raise
            if self._heartbeat_error != _one_line(exc):
                self._heartbeat_error = _one_line(exc)
                self._log(logging.WARNING, "heartbeat not recorded", error=self._heartbeat_error)
            return
        self._heartbeat_error = None

    # -- one run --------------------------------------------------------------------
    def _run_table(self, conn: psycopg.Connection[Any], entry: Entry, tick: datetime) -> None:
        """One run of one table. Only a lost connection escapes (the session ends and reconnects);
        any other error fails this table's run, and the loop goes on to the next table."""
        cfg = self.shared.config
        try:
            row = conn.execute(BEGIN_RUN, (entry.relid, tick, cfg.name)).fetchone()
        except Exception as exc:
            if connection_lost(exc, conn):
                raise
            entry.skipped_due = tick  # not again before the next tick: the same error would repeat at once
            self._run_failed(entry, exc, 0.0, self._membership_hint(conn, entry, exc))
            return
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
                error = getattr(result, "error", None)
                self._log(logging.INFO if result.status in ("ok", "paused", "busy") else logging.WARNING,
                          "run finished", table=entry.table, run_id=getattr(result, "run_id", None),
                          status=result.status, rows_selected=result.rows_selected, rows=result.rows_deleted,
                          partitions_dropped=result.partitions_dropped,
                          partitions_detached=result.partitions_detached, values_nulled=nulled,
                          duration=result.duration, **({"error": error} if error else {}))
            status = statuses[0] if len(statuses) == 1 else ("ok" if not statuses else ",".join(statuses))
            if "failed" in statuses:
                self.failed_runs += 1
        except Exception as exc:
            if connection_lost(exc, conn):
                duration = time.monotonic() - started
                self.shared.metrics.record_failure(self.db.name, entry.table, duration)
                self._log(logging.ERROR, "run failed", table=entry.table, error=_one_line(exc), duration=duration)
                raise  # the run lock goes with the session; the round is resumed after reconnecting
            self._run_failed(entry, exc, time.monotonic() - started)
        finally:
            entry.running = False
            self.current = None
            self.touch()
        if self.shared.stop.is_set() and status == "partial":
            status = "interrupted"  # stopped mid-run: the round stays open and is resumed
        entry.interrupted = status == "interrupted"
        entry.running_elsewhere = False
        self._end_run(conn, entry, tick, status)
        self._measure_lag(conn, entry)

    def _run_failed(self, entry: Entry, exc: BaseException, duration: float, hint: str = "") -> None:
        self.failed_runs += 1
        self.shared.metrics.record_failure(self.db.name, entry.table, duration)
        self._log(logging.ERROR, "run failed", table=entry.table, error=_one_line(exc) + hint, duration=duration)

    def _membership_hint(self, conn: psycopg.Connection[Any], entry: Entry, exc: BaseException) -> str:
        """Row security refuses to record the run of a table whose owner the worker's role is not a
        member of; say so, with the GRANT that fixes it, instead of only 'violates row-level security'."""
        if not isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return ""
        row = conn.execute(NOT_OWNER, (entry.relid,)).fetchone()
        if row is None:
            return ""
        owner, role = row
        return (f" (role {role} is not a member of {owner}, the owner of table {entry.table}: "
                f"GRANT {owner} TO {role}; see docs/worker.md)")

    def _end_run(self, conn: psycopg.Connection[Any], entry: Entry, tick: datetime, status: str) -> None:
        try:
            conn.execute(END_RUN, (entry.relid, tick, status[:40]))
        except Exception as exc:
            if connection_lost(exc, conn):
                raise
            # The outcome is not recorded, but the run lock must go, or every worker would
            # take this table for running until this session ends.
            self._log(logging.ERROR, "run outcome not recorded", table=entry.table, status=status,
                      error=_one_line(exc))
            conn.execute(UNLOCK_RUN, (entry.relid,))

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
        except Exception as exc:
            if connection_lost(exc, conn):
                raise
            # The table is locked, went away meanwhile (the next poll drops it), ...: measured next time.
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
        self._wake = threading.Event()
        self.shared = Shared(config=config, metrics=WorkerMetrics(config.name), logger=self.logger,
                             clock=Clock(config.clock_offset), engine=engine, oldest_expired=oldest_expired,
                             wake_main=self._wake, once=once)
        self.notifier = notifier or SystemdNotifier()
        self.loops: dict[str, DatabaseLoop] = {}
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
        refused = next((lp.exit_error for lp in self.loops.values() if isinstance(lp.exit_error, RoleRefused)),
                       None)
        if refused is not None:
            raise refused
        errors = [lp for lp in self.loops.values() if lp.exit_error is not None]
        failed = sum(lp.failed_runs for lp in self.loops.values())
        log(self.logger, logging.INFO, "worker stopped", **({"failed_runs": failed} if failed else {}))
        if not self.shared.once:
            return 0
        # --once: 2 when a database could not be served, 1 when some table's run failed (the others ran).
        return 2 if errors else 1 if failed else 0
