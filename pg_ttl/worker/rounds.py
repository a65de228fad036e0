"""One database's scheduling rounds: the catalog poll (which tables, their cron, who runs
what), and running a due table through the engine, with the round's bookkeeping
(ttl.worker_begin_run / worker_end_run), metrics and log lines."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from pg_ttl.worker.lag import LagMeter
from pg_ttl.worker.schedule import Entry, Scheduler
from pg_ttl.worker.session import Conn, check_schema, connection_lost
from pg_ttl.worker.shared import LoopState, one_line

if TYPE_CHECKING:  # the engine itself is imported when a worker starts (daemon.load_engine)
    from pg_ttl.expire.results import TableResult, UnitResult
    from pg_ttl.expire.seam import EngineSession

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
                   -- several workers split its units: partitions, or a big table's ranges
                   'shared', c.relkind = 'p' OR c.relpages >= ttl.shared_sweep_blocks(),
                   'running', r.relid IS NOT NULL,
                   'due', CASE WHEN s.started_at >= p.created_at THEN s.due_at END,
                   'interrupted', s.started_at >= p.created_at AND s.finished_at IS NULL,
                   'manual_run_at', p.manual_run_at,
                   -- the engine acts as the table's owner (SET ROLE): only a member of it can
                   'refused_by', CASE WHEN NOT pg_catalog.pg_has_role(current_user, c.relowner, 'MEMBER')
                                      THEN json_build_object('owner', c.relowner::regrole::text,
                                                             'role', current_user) END))
                  FROM ttl.worker_tables p
                  JOIN pg_catalog.pg_class c ON c.oid = p.relid
                  LEFT JOIN ttl.worker_schedule s ON s.relid = p.relid
                  -- one scan of pg_locks for all tables: who holds a run lock (see sql/60_worker.sql)
                  LEFT JOIN (SELECT DISTINCT l.objid AS relid FROM pg_catalog.pg_locks l
                              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
                                AND l.classid = 1953786999::oid AND l.pid <> pg_catalog.pg_backend_pid()
                                AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                                   WHERE d.datname = pg_catalog.current_database())) r
                         ON r.relid = p.relid), '[]'),
       -- the schema's revision: an upgrade while the worker runs stops it (session.check_schema)
       (SELECT v.version_num FROM ttl.alembic_version v)
""")
PRUNE_SCHEDULE = "DELETE FROM ttl.worker_schedule s " \
                 "WHERE NOT EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = s.relid)"
# The run's start and, in the same round trip, the settings its pass reads (PASS_SETTINGS).
BEGIN_RUN = "SELECT b.verdict, b.round_started, {} FROM ttl.worker_begin_run(%s, %s, %s) b, ttl._pass_settings() s"
END_RUN = "SELECT ttl.worker_end_run(%s, %s, %s)"
UNLOCK_RUN = "SELECT pg_catalog.pg_advisory_unlock_shared(ttl.worker_lock_key(%s))"
NOT_OWNER = "SELECT c.relowner::regrole::text, current_user FROM pg_catalog.pg_class c " \
            "WHERE c.oid = %s AND NOT pg_catalog.pg_has_role(current_user, c.relowner, 'MEMBER')"


class Progress:
    """Engine progress -> metrics (unit durations) and log lines (one per unit)."""

    def __init__(self, loop: LoopState, table: str) -> None:
        self.loop = loop
        self.table = table  # the name metrics and logs use

    def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
        self.loop.touch()

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        self.loop.touch()

    def unit_finished(self, result: UnitResult) -> None:
        self.loop.touch()
        shared = self.loop.shared
        shared.metrics.record_unit(self.loop.db.name, self.table, result.duration)
        self.loop.log(logging.INFO if result.status in ("ok", "skipped") else logging.WARNING, "unit finished",
                      table=self.table, partition=result.unit, action=result.action, status=result.status,
                      rows_selected=result.rows_selected, rows=result.rows_deleted, duration=result.duration,
                      **({"error": result.error} if result.error else {}))


class Rounds:
    """What one database loop schedules and runs."""

    # An engine session idle this long is checked (one statement) before its next run; runs
    # back to back (a pass over many tables) reuse it unchecked.
    ENGINE_IDLE_CHECK_SECONDS = 10.0

    def __init__(self, loop: LoopState, scheduler: Scheduler, lag: LagMeter) -> None:
        self.loop = loop
        self.scheduler = scheduler
        self.lag = lag
        self._interval_error: str | None = None  # the min_job_interval problem last logged
        self._engine: EngineSession | None = None  # one engine session for all this loop's runs
        self._engine_used = 0.0  # monotonic time it was last handed to a run

    # -- the engine session -----------------------------------------------------------
    def _engine_session(self) -> EngineSession:
        """The loop's engine session, opened on first use and again after it was lost: a run
        costs no new connection (nor its settings) per table. One idle for a while is checked
        first (a server restart, idle_session_timeout or an administrator may have ended it)."""
        if self._engine is not None and not self._engine.broken and \
                time.monotonic() - self._engine_used >= self.ENGINE_IDLE_CHECK_SECONDS:
            with contextlib.suppress(Exception):
                self._engine.check()
        if self._engine is not None and self._engine.broken:
            self.close()
        if self._engine is None:
            self._engine = self.loop.shared.engine(self.loop.db.connect_dsn)
        self._engine_used = time.monotonic()
        return self._engine

    def close(self) -> None:
        """Closes the engine session (the next run opens another)."""
        if self._engine is not None:
            with contextlib.suppress(Exception):
                self._engine.close()
            self._engine = None

    # -- the catalog poll -------------------------------------------------------------
    def read_catalog(self, conn: Conn) -> tuple[bool, timedelta, list[dict[str, Any]]]:
        """The poll, one round trip; raises NotInstalled (session.check_schema says why) when
        the schema is not the revision this worker runs, or the poll fails on it."""
        try:
            try:
                row = conn.execute(CATALOG_QUERY.format(min_interval=MIN_INTERVAL_SECONDS)).fetchone()
                self._interval_error = None
            except psycopg.errors.DataError as exc:  # the setting is not an interval PostgreSQL can read
                if connection_lost(exc, conn):
                    raise
                if self._interval_error != one_line(exc):
                    self._interval_error = one_line(exc)
                    self.loop.log(logging.ERROR, "setting min_job_interval is not a valid interval; using the "
                                  "default", error=self._interval_error, default=DEFAULT_MIN_INTERVAL.total_seconds())
                row = conn.execute(CATALOG_QUERY.format(min_interval=sql.NULL)).fetchone()
        except psycopg.Error as exc:
            if not connection_lost(exc, conn):
                check_schema(conn)  # an upgrade while we run (a table or column this poll names is gone)
            raise
        assert row is not None
        in_recovery, seconds, policies, revision = row
        from pg_ttl.install import package_revisions  # (its migrations are read once, then cached)

        if revision != package_revisions()[-1]:
            check_schema(conn)  # says what to do, and the loop waits for the matching worker
        interval = DEFAULT_MIN_INTERVAL if seconds is None else timedelta(seconds=float(seconds))
        return bool(in_recovery), interval, list(policies)

    def load_catalog(self, conn: Conn) -> None:
        loop, shared = self.loop, self.loop.shared
        in_recovery, min_interval, policies = self.read_catalog(conn)
        if in_recovery != loop.standby:
            loop.standby = in_recovery
            shared.metrics.standby.labels(loop.db.name).set(1 if loop.standby else 0)
            loop.log(logging.WARNING if loop.standby else logging.INFO,
                     "database is a standby: waiting, nothing will be deleted" if loop.standby
                     else "database is a primary: running policies")
        self.scheduler.min_interval = min_interval
        entries = [Entry(relid=int(p["relid"]), table=str(p["table"]), qualified=str(p["qualified"]),
                         cron=str(p["cron"]), override=bool(p["override"]), paused=bool(p["paused"]),
                         shared=bool(p["shared"]), running_elsewhere=bool(p["running"]),
                         interrupted=bool(p["interrupted"]), manual_run_at=_parse_ts(p["manual_run_at"]),
                         refused=self._refusal(p), last_due=_parse_ts(p["due"])) for p in policies]
        before = {e.table for e in self.scheduler.entries.values()}
        added, removed = self.scheduler.sync(entries)
        gone = before - {e.table for e in self.scheduler.entries.values()}  # removed or renamed
        self._report_refusals()
        for e in added:
            if e.error:
                loop.log(logging.ERROR, "policy skipped: cron not understood", table=e.table, error=e.error)
            else:
                loop.log(logging.INFO, "policy picked up", table=e.table, job_cron=e.cron,
                         next_run=self.scheduler.next_run(e, shared.clock.now()))
        for e in removed:
            loop.log(logging.INFO, "policy removed", table=e.table)
        for table in gone:
            shared.metrics.forget_table(loop.db.name, table)
        if removed and not loop.standby:
            conn.execute(PRUNE_SCHEDULE)
        now = shared.clock.now()
        m = shared.metrics
        m.tables.labels(loop.db.name).set(len(self.scheduler.entries))
        for e in self.scheduler.entries.values():
            m.set_next_run(loop.db.name, e.table, self.scheduler.next_run(e, now))

    def _refusal(self, policy: dict[str, Any]) -> str | None:
        if policy["refused_by"] is None:
            return None
        owner, role = policy["refused_by"]["owner"], policy["refused_by"]["role"]
        return (f"role {role} is not a member of {owner}, the owner of table {policy['table']}: "
                f"GRANT {owner} TO {role}; see docs/worker.md")

    def _report_refusals(self) -> None:
        """One log line when a table becomes one this worker cannot act on (and when that ends), not one per
        poll; the list goes into the worker's heartbeat row for pg-ttl status."""
        loop = self.loop
        now = {e.table: e.refused for e in self.scheduler.entries.values() if e.refused}
        for table, reason in sorted(now.items()):
            if loop.skipped.get(table) != reason:
                loop.log(logging.WARNING, "table skipped", table=table, reason=reason)
        for table in sorted(set(loop.skipped) - set(now)):
            if any(e.table == table for e in self.scheduler.entries.values()):
                loop.log(logging.INFO, "table no longer skipped", table=table)
        loop.skipped = now

    # -- one run --------------------------------------------------------------------
    def run_table(self, conn: Conn, entry: Entry, tick: datetime) -> None:
        """One run of one table. Only a lost connection escapes (the session ends and reconnects);
        any other error fails this table's run, and the loop goes on to the next table."""
        loop, shared = self.loop, self.loop.shared
        try:
            from pg_ttl.expire.context import PASS_SETTINGS, EngineSettings

            row = conn.execute(BEGIN_RUN.format(PASS_SETTINGS), (entry.relid, tick, shared.config.name)).fetchone()
        except Exception as exc:
            if connection_lost(exc, conn):
                raise
            entry.skipped_due = tick  # not again before the next tick: the same error would repeat at once
            self._run_failed(entry, exc, 0.0, self._membership_hint(conn, entry, exc))
            return
        verdict = str(row[0]) if row else "done"
        round_started: datetime | None = row[1] if row else None
        settings = EngineSettings.from_pass_row(row[2:]) if row else None
        entry.skipped_due = tick  # decided: this worker does not come back to this tick
        if verdict in ("skip", "done"):
            if verdict == "skip":
                loop.log(logging.WARNING, "run skipped: the previous run of this table is still going",
                         table=entry.table, tick=tick)
            return
        entry.last_due = tick
        entry.running = True
        loop.state = "running"
        loop.current = entry.table
        loop.log(logging.INFO, "run started", table=entry.table, tick=tick, role=verdict)
        started = time.monotonic()
        status = "failed"
        results: Sequence[TableResult] = []
        try:
            # Everyone in this round expires the rows expired when it began: a unit
            # visited twice (engine claims only exclude concurrent work) finds nothing new.
            results = self._engine_session().expire(relids=[entry.relid], stop=shared.stop,
                                                    progress=Progress(loop, entry.table),
                                                    worker=shared.config.name, cutoff=round_started,
                                                    settings=settings)
            status = self._report(entry, results)
        except Exception as exc:
            self.close()  # whatever state it was left in goes with it
            if connection_lost(exc, conn):
                duration = time.monotonic() - started
                shared.metrics.record_failure(loop.db.name, entry.table, duration)
                loop.log(logging.ERROR, "run failed", table=entry.table, error=one_line(exc), duration=duration)
                raise  # the run lock goes with the session; the round is resumed after reconnecting
            self._run_failed(entry, exc, time.monotonic() - started)
        finally:
            entry.running = False
            loop.current = None
            loop.touch()
        if shared.stop.is_set() and status == "partial":
            status = "interrupted"  # stopped mid-run: the round stays open and is resumed
        entry.interrupted = status == "interrupted"
        entry.running_elsewhere = False
        self._end_run(conn, entry, tick, status)
        # (not only at the next catalog poll: until then it would show the tick just run)
        shared.metrics.set_next_run(loop.db.name, entry.table, self.scheduler.next_run(entry, shared.clock.now()))
        measured = [r for r in results if r.oldest_measured]
        if measured:  # the run read what it left
            self.lag.record(entry, measured[0].oldest_left)
        else:
            self.lag.measure(conn, entry)

    def _report(self, entry: Entry, results: Sequence[TableResult]) -> str:
        """Metrics and a log line per table result; returns the round's status."""
        loop = self.loop
        statuses: list[str] = []
        for result in results:
            loop.shared.metrics.record_run(loop.db.name, entry.table, result)
            if result.pace is not None:
                loop.pace = result.pace.describe()
            statuses.append(result.status)
            loop.log(logging.INFO if result.status in ("ok", "paused", "busy") else logging.WARNING,
                     "run finished", table=entry.table, run_id=result.run_id, status=result.status,
                     rows_selected=result.rows_selected, rows=result.rows_deleted,
                     partitions_dropped=result.partitions_dropped, partitions_detached=result.partitions_detached,
                     values_nulled=result.values_nulled, duration=result.duration,
                     **({"error": result.error} if result.error else {}))
        if "failed" in statuses:
            loop.failed_runs += 1
        return statuses[0] if len(statuses) == 1 else ("ok" if not statuses else ",".join(statuses))

    def _run_failed(self, entry: Entry, exc: BaseException, duration: float, hint: str = "") -> None:
        self.loop.failed_runs += 1
        self.loop.shared.metrics.record_failure(self.loop.db.name, entry.table, duration)
        self.loop.log(logging.ERROR, "run failed", table=entry.table, error=one_line(exc) + hint, duration=duration)

    def _membership_hint(self, conn: Conn, entry: Entry, exc: BaseException) -> str:
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

    def _end_run(self, conn: Conn, entry: Entry, tick: datetime, status: str) -> None:
        try:
            conn.execute(END_RUN, (entry.relid, tick, status[:40]))
        except Exception as exc:
            if connection_lost(exc, conn):
                raise
            # The outcome is not recorded, but the run lock must go, or every worker would
            # take this table for running until this session ends.
            self.loop.log(logging.ERROR, "run outcome not recorded", table=entry.table, status=status,
                          error=one_line(exc))
            conn.execute(UNLOCK_RUN, (entry.relid,))


def _parse_ts(value: object) -> datetime | None:
    if value is None:
        return None
    return datetime.fromisoformat(str(value))
