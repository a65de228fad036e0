"""One expiration pass: tables -> units -> batches, with claims, history and limits."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors

from pg_ttl.archive.storage import StorageError
from pg_ttl.expire import columns, history, oldest, orphans, owner, partitions, queues, ranges, rows, sweeps, tiers
from pg_ttl.expire.context import (
    PASS_SETTINGS,
    EngineSettings,
    NullProgress,
    ProgressListener,
    RateLimiter,
    UnitContext,
)
from pg_ttl.expire.pace import Pace
from pg_ttl.expire.predicate import EnginePolicy, Predicate, load_policies, load_policy_as_owner, start_run
from pg_ttl.expire.results import TableResult, UnitResult, error_text
from pg_ttl.expire.units import Unit, list_units
from pg_ttl.wakeup import StopRequest


class EngineError(Exception):
    """A condition a user can fix (standby, unknown table, not installed)."""



# The engine session's own search_path, between tables (a table's run sets the table's).
SEARCH_PATH = owner.SEARCH_PATH


def connect(dsn: str) -> tuple[psycopg.Connection[Any], EngineSettings, str]:
    """An engine session: autocommit (each statement is one short transaction), UTC,
    statement_timeout and the short row lock_timeout on every transaction, the engine's own
    search_path; with the settings it applied and the search_path it came with (names the
    caller gives resolve in it)."""
    conn = psycopg.connect(dsn, autocommit=True, application_name="pg-ttl engine")
    try:
        row = conn.execute("SELECT pg_catalog.pg_is_in_recovery(), pg_catalog.to_regclass('ttl.run') IS NOT NULL, "
                           "pg_catalog.current_setting('search_path')").fetchone()
        assert row is not None
        if row[0]:
            raise EngineError("this server is a standby (pg_is_in_recovery() is true): pg_ttl expires rows "
                              "only on the primary; point --dsn at the primary")
        if not row[1]:
            raise EngineError("pg_ttl (with the engine tables) is not installed in this database "
                              "(run: pg-ttl install)")
        settings = EngineSettings.load(conn)
        conn.execute(
            "SELECT pg_catalog.set_config('TimeZone', 'UTC', false), "
            # the text forms archived rows are read in (tiers/batches.py): ISO dates, hex bytea, exact floats
            "pg_catalog.set_config('DateStyle', 'ISO, YMD', false), "
            "pg_catalog.set_config('bytea_output', 'hex', false), "
            "pg_catalog.set_config('extra_float_digits', '1', false), "
            "pg_catalog.set_config('IntervalStyle', 'postgres', false), "
            "pg_catalog.set_config('statement_timeout', %s, false), "
            "pg_catalog.set_config('lock_timeout', %s, false), "
            "pg_catalog.set_config('search_path', %s, false)",
            (settings.statement_timeout, settings.lock_timeout, SEARCH_PATH))
    except BaseException:
        conn.close()
        raise
    return conn, settings, str(row[2])


def resolve_tables(conn: psycopg.Connection[Any], tables: Sequence[str],
                   search_path: str | None = None) -> list[int]:
    """The tables' oids, names resolved in ``search_path`` (None: the session's), one
    statement each (ttl._resolve_table)."""
    relids: list[int] = []
    for name in tables:
        try:
            row = conn.execute("SELECT r.relid, r.has_policy FROM ttl._resolve_table("
                               "%s, coalesce(%s, pg_catalog.current_setting('search_path'))) r",
                               (name, search_path)).fetchone()
        except psycopg.errors.InvalidName as exc:  # e.g. 'ev; DROP TABLE x': not a table name at all
            raise EngineError(f'table argument "{name}" is not a valid table name: {error_text(exc)}') from exc
        if row is None or row[0] is None:
            raise EngineError(f'table "{name}" does not exist')
        if not row[1]:
            raise EngineError(f'table "{name}" has no TTL policy (enable one with ttl.enable)')
        relids.append(int(row[0]))
    return relids


class Engine:
    """An engine session: one connection for many passes. The worker keeps one per database
    and runs each due table through it; ``expire`` opens one for a single pass.

    Between passes the session holds nothing: each table's run ends back in the session's own
    role and search_path, and each unit releases its claim; after a pass that raised, every
    claim is released (``pg_advisory_unlock_all``), so none outlives its run here.
    """

    # Closing the runs of dead sessions and pruning the history are database-wide chores:
    # at a session's first pass, then at most this often (not once per table).
    HOUSEKEEPING_SECONDS = 60.0

    def __init__(self, dsn: str) -> None:
        self.conn, self._settings, self._user_search_path = connect(dsn)  # (names the caller gives resolve in it)
        self._housekept_at: float | None = None
        self.pace = Pace(dsn, self.conn.info.backend_pid, enabled=self._settings.throttle,
                         target=self._settings.throttle_target)

    @property
    def broken(self) -> bool:
        return self.conn.broken or self.conn.closed

    def check(self) -> None:
        self.conn.execute("SELECT 1")

    def close(self) -> None:
        self.pace.close()
        self.conn.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def expire(self, tables: Sequence[str] | None = None, *, relids: Sequence[int] | None = None,
               stop: StopRequest | None = None, progress: ProgressListener | None = None,
               worker: str | None = None, cutoff: datetime | None = None,
               settings: EngineSettings | None = None) -> list[TableResult]:
        """One pass over ``tables`` (names, resolved in the session's search_path) and ``relids``
        (None for both: every policy). ``stop`` set: finish the current batch, return.

        The cutoff is the server's ``now()``, taken once. ``cutoff`` may set an
        earlier one (tests, a cautious catch-up); never a later one: nothing is
        deleted before it expires. ``settings`` with ``cutoff``: both read from the
        database by the caller a moment ago (the worker, with the run's start), not again.
        """
        conn = self.conn
        clean = False
        try:
            if tables is not None:
                relids = [*(relids or []), *resolve_tables(conn, tables, self._user_search_path)]
            if settings is None or cutoff is None:
                row = conn.execute("SELECT now(), %s::timestamptz > now(), " + PASS_SETTINGS
                                   + " FROM ttl._pass_settings() s", (cutoff,)).fetchone()
                assert row is not None
                if row[1]:
                    raise EngineError(f"cutoff {cutoff} is later than the server clock ({row[0]}): "
                                      "rows would go early")
                cutoff = cutoff or row[0]  # once per run, from the server clock
                settings = EngineSettings.from_pass_row(row[2:])
            assert cutoff is not None
            settings = self._apply_settings(settings)
            self.pace.configure(settings.throttle, settings.throttle_target, settings.replica_lag_bytes)
            self.pace.stop = stop
            housekeeping = self._housekept_at is None or \
                time.monotonic() - self._housekept_at >= self.HOUSEKEEPING_SECONDS
            if housekeeping:
                history.close_dead_runs(conn)
            results = self._pass(relids, cutoff, settings, stop, progress or NullProgress(), worker, self.pace)
            if housekeeping:
                history.prune(conn)
                self._housekept_at = time.monotonic()
            clean = True
            return results
        finally:
            if not clean and not self.broken:
                # A pass that raised may have left a unit claimed, or row_lock_timeout on
                # (rows.py): its claims go with it, lock_timeout is set back.
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_catalog.pg_advisory_unlock_all(), "
                                 "pg_catalog.set_config('lock_timeout', %s, false)", (self._settings.lock_timeout,))

    def _apply_settings(self, settings: EngineSettings) -> EngineSettings:
        """The settings as they are now; the session's timeouts follow a change."""
        if (settings.statement_timeout, settings.lock_timeout) != \
                (self._settings.statement_timeout, self._settings.lock_timeout):
            self.conn.execute("SELECT pg_catalog.set_config('statement_timeout', %s, false), "
                              "pg_catalog.set_config('lock_timeout', %s, false)",
                              (settings.statement_timeout, settings.lock_timeout))
        self._settings = settings
        return settings

    def _pass(self, relids: Sequence[int] | None, cutoff: datetime, settings: EngineSettings,
              stop: StopRequest | None, progress: ProgressListener, worker: str | None,
              pace: Pace) -> list[TableResult]:
        conn = self.conn
        wanted = list(relids) if relids is not None else None
        results: list[TableResult] = []
        # One table: its owner's role is taken with its policy (None: each run takes its own)
        taken: bool | None = None
        if wanted is not None and len(wanted) == 1:
            one, taken = load_policy_as_owner(conn, wanted[0])
            policies = [one] if one is not None else []
        else:
            policies = load_policies(conn, wanted)
        # Tables asked for by oid that all have a table TTL and no orphan policy (the worker's
        # runs): no column-only table and no orphan policy among them to look for.
        covered = wanted is not None and {p.relid for p in policies} >= set(wanted)
        for policy in policies:
            owner_taken, taken = taken, None  # (the role goes back at the run's end)
            if stop is not None and stop.is_set():
                if owner_taken:
                    owner.restore(conn, local=False, search_path=SEARCH_PATH)
                break
            if policy.has_tiers:  # rows that reached a storage tier move first
                archived = expire_table(conn, policy, cutoff, settings, stop=stop, progress=progress,
                                        worker=worker, kind="archive", pace=pace, owner_taken=owner_taken)
                results.append(archived)
                owner_taken = None  # the archive run gave the role back
                # Rows past the DELETE are to be archived first: while their archive run did not
                # finish (storage down, a row held by the application), none of them is deleted.
                if archived.status != "ok" and tiers.archives_before_delete(conn, policy.relid):
                    continue
            results.append(expire_table(conn, policy, cutoff, settings, stop=stop, progress=progress,
                                        worker=worker, pace=pace, owner_taken=owner_taken))
        if (stop is None or not stop.is_set()) and not covered:  # tables with column TTLs only
            results.extend(columns.expire_column_only(conn, wanted, cutoff, stop, worker, pace=pace))
        # Orphans last: the children of the tables just expired follow their parents.
        with_orphans = not covered or any(p.has_orphans for p in policies)
        for policy in orphans.load_orphan_policies(conn, wanted) if with_orphans else []:
            if stop is not None and stop.is_set():
                break
            results.append(expire_table(conn, policy, cutoff, settings, stop=stop, progress=progress,
                                        worker=worker, kind="orphans", pace=pace,
                                        follows_parents=wanted is not None and policy.relid not in wanted))
        return results


def expire(dsn: str, tables: Sequence[str] | None = None, *, stop: StopRequest | None = None,
           progress: ProgressListener | None = None, worker: str | None = None,
           cutoff: datetime | None = None) -> list[TableResult]:
    """One pass over ``tables`` (None: every policy) in a session of its own (see ``Engine``)."""
    with Engine(dsn) as engine:
        return engine.expire(tables, stop=stop, progress=progress, worker=worker, cutoff=cutoff)


def expire_table(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime, settings: EngineSettings,
                 *, stop: StopRequest | None, progress: ProgressListener, worker: str | None,
                 kind: str = "rows", pace: Pace | None = None, owner_taken: bool | None = None,
                 follows_parents: bool = False) -> TableResult:
    """One table's run, done as the table's owner: its expired rows (``kind`` 'rows') or
    its orphans ('orphans', sql/80_orphans.sql), or its rows that reached a storage
    tier ('archive', sql/82_tiers.sql). Whatever goes wrong with this table
    (a bad policy, a lock, the table dropped meanwhile) is this table's result; only a
    lost connection is raised. Any other exception (a bug) closes the run as failed,
    with its text, before it goes on. ``owner_taken``: the session took the owner's role
    already (True) or may not (False; None: take it here). ``follows_parents``: an orphan
    run right after its parents' run in the same pass."""
    started = time.monotonic()
    result = TableResult(policy.name, None, "ok")
    try:
        if owner_taken is None:
            owner.become(conn, policy.owner, policy.name, local=False)
        elif not owner_taken:
            raise owner.NotOwner(owner.not_member(policy.owner, policy.name))
    except owner.NotOwner as exc:
        result.status, result.error = "failed", str(exc)
        result.duration = time.monotonic() - started
        return result
    restored = False
    pending: history.UnitEnd | None = None  # the only unit's end, left to the run's
    try:
        if policy.paused:
            reason = f"paused (SELECT ttl.resume('{policy.name}') to resume)"
            run_id = history.start_run(conn, policy.relid, policy.name, worker, cutoff, "paused", reason,
                                       finished=True)
            return TableResult(policy.name, run_id, "paused", error=reason)
        if kind == "orphans":
            pred = orphans.orphan_predicate(conn, policy, cutoff, follows_parents)
            result.run_id = history.start_run(conn, policy.relid, policy.name, worker, cutoff,
                                              search_path=pred.search_path)
        else:
            pred, result.run_id = start_run(conn, policy, cutoff, worker)
        if kind == "orphans":
            units = orphans.orphan_units(conn, policy)
        elif kind == "archive":
            units = tiers.archive_units(conn, policy, pred)
        elif queues.fill(conn, policy, lambda: stop is not None and stop.is_set()):
            units = queues.shard_units(conn, policy, due=pred.cutoff)  # a filled expiration queue: its shards due
        else:
            units = list_units(conn, policy, pred)
        status, pending = _run_units(conn, policy, pred, units, result, result.run_id, settings, stop, progress,
                                     pace)
        # What the run left expired, for the lag metric (as the owner, before the role goes back)
        measure = kind == "rows" and (stop is None or not stop.is_set())
        if measure and _left_nothing(result):
            result.oldest_left, result.oldest_measured, measure = None, True, False
        recorded = history.finish_run(conn, result.run_id, status, unit_end=pending,
                                      restore=None if measure else SEARCH_PATH)
        pending, restored = None, not measure
        if recorded is None:  # the table changed owner during the run: its history is the new owner's
            recorded, result.error = history.close_run_after_owner_change(conn, result.run_id)
            restored, measure = True, False
        result.status = recorded
        if result.status == "failed" and result.error is None:
            result.error = result.first_failure()
        if measure:
            _measure_oldest_left(conn, policy, pred, result)
    except (psycopg.Error, LookupError) as exc:
        if conn.broken:
            raise
        result.status, result.error = "failed", error_text(exc)
        if isinstance(exc, LookupError | errors.UndefinedTable):
            result.status, result.error = "interrupted", "the table was dropped or lost its TTL during the run"
        if result.run_id is not None:
            history.finish_run(conn, result.run_id, result.status, result.error, unit_end=pending)
            pending = None
    except BaseException as exc:
        if result.run_id is not None and not conn.broken:
            result.status, result.error = "failed", error_text(exc)
            history.close_failed_run(conn, result.run_id, result.error, unit_end=pending)
            pending = None
        raise
    finally:
        if pending is not None and not conn.broken:  # its claim goes, whatever happened
            with contextlib.suppress(psycopg.Error):
                history.end_unit(conn, result.run_id or 0, pending)
        if not restored:
            owner.restore(conn, local=False, search_path=SEARCH_PATH)
    result.duration = time.monotonic() - started
    if pace is not None and result.units:
        result.pace = pace.state()
    return result


def _left_nothing(result: TableResult) -> bool:
    """Every unit of the run deleted every row expired by its cutoff that it met: ended ok,
    none held by the application or moving, none done in part by another run (the units'
    ``rows_may_remain``). Then the run left nothing expired, and the lag metric needs no
    query: reading the oldest expired row through the TTL column's index right after a
    pass walks every entry of the rows just deleted (0.8 s after 5M rows). A row written
    already expired behind the pass (a backfill) is seen by the next run. An expiration
    queue's shards are read (one probe each)."""
    return result.status == "ok" and all(
        u.status == "ok" and not u.rows_may_remain and u.action in ("delete", "drop", "detach")
        for u in result.units)


def _measure_oldest_left(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate,
                         result: TableResult) -> None:
    """What the run left expired, for the lag metric: read here, as the owner with the run's
    predicate, it costs one query (a lookup of its own would cost nine)."""
    try:
        result.oldest_left = oldest.oldest_left(conn, policy, pred)
        result.oldest_measured = True
    except psycopg.Error:
        if conn.broken:
            raise  # otherwise (the table locked or dropped meanwhile) the worker looks it up itself


STOPPED = "stopped: the pass was asked to stop before this unit; the next run does it"
# Units whose work resumes from a checkpoint an interrupted run left (taken over as they begin).
RESUMABLE = ("delete", "archive", "queue")


def _run_units(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, units: list[Unit],
               result: TableResult, run_id: int, settings: EngineSettings, stop: StopRequest | None,
               progress: ProgressListener, pace: Pace | None = None) -> tuple[str | None, history.UnitEnd | None]:
    """The table's units, one after the other. Returns the status to end the run with
    (None: judged from its units by ttl._finish_run) and the end of a table's only unit,
    left to the statement that ends the run."""
    select_limiter = RateLimiter(policy.select_rate_limit, stop)
    delete_limiter = RateLimiter(policy.delete_rate_limit, stop, pace)
    stopped_before: Unit | None = None
    pending: list[history.UnitEnd] = []

    def one(unit: Unit) -> None:
        ctx = UnitContext(conn, policy, pred, unit, run_id, settings, progress, select_limiter, delete_limiter, stop)
        unit_result = run_unit(ctx, defer_end=len(units) == 1)
        result.add(unit_result)
        try:
            progress.unit_finished(unit_result)
        except BaseException:
            # (the end left to the run's would be lost with this frame: the unit would read
            # 'running' under a failed run, its claim held)
            if ctx.unit_end is not None and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    history.end_unit(conn, run_id, ctx.unit_end)
            raise
        if ctx.unit_end is not None:
            pending.append(ctx.unit_end)

    i = 0
    while i < len(units):
        if stop is not None and stop.is_set():
            stopped_before = units[i]
            break
        batch = [units[i]]
        while partitions.droppable_together(batch[0]) and len(batch) < partitions.DROP_BATCH \
                and i + len(batch) < len(units) and partitions.droppable_together(units[i + len(batch)]):
            batch.append(units[i + len(batch)])
        i += len(batch)
        if len(batch) == 1:
            one(batch[0])
            continue
        started = time.monotonic()
        outcome = partitions.drop_together(conn, policy.relid, run_id, batch, pred.cutoff, settings)
        each = (time.monotonic() - started) / len(batch)
        for unit in batch:
            reason = outcome.get(unit.relid, "retry")
            if reason == "retry":
                one(unit)
                continue
            progress.unit_started(policy.name, unit.name, unit.action, None)
            unit_result = UnitResult(policy.name, unit.name, "drop" if reason is None else "skip", 0, 0,
                                     "ok" if reason is None else "skipped", reason, each, relid=unit.relid)
            result.add(unit_result)
            progress.unit_finished(unit_result)
    if stopped_before is not None and not result.units:
        return "partial", None  # stopped before its first unit: no unit to judge the run from
    if stopped_before is not None:
        # Where the pass stopped, in the history too: a unit not done makes the run partial.
        history.skip_unit(conn, run_id, stopped_before.relid, stopped_before.name, STOPPED)
        result.units.append(UnitResult(policy.name, stopped_before.name, "skip", 0, 0, "skipped", STOPPED, 0.0,
                                       relid=stopped_before.relid))
    return None, (pending[0] if pending else None)


def run_unit(ctx: UnitContext, defer_end: bool = False) -> UnitResult:
    """The unit's claim, work and end. ``defer_end``: a unit that ends normally leaves its
    end (history row and claim) in ``ctx.unit_end`` to the statement that ends the run."""
    unit, conn = ctx.unit, ctx.conn
    started = time.monotonic()
    res = UnitResult(ctx.policy.name, unit.name, unit.action, 0, 0, "ok", None, 0.0, relid=unit.relid)
    # Claimed, or skipped with the reason recorded (sql/50_history.sql); a partition to
    # drop or detach starts at once (no checkpoint to take over). Work that resumes takes
    # over the checkpoint an interrupted run left, in the same statement, once claimed.
    # A big unit to sweep in ctid order is shared: its claim too, and no run takes it over.
    shared = _shares_ranges(ctx)
    with history.claiming(conn, unit.relid):
        row = conn.execute("SELECT b.reason, CASE WHEN b.reason IS NULL AND %s THEN ttl.take_over_unit(%s, %s) END "
                           "FROM ttl._begin_unit(%s, %s, %s, %s, %s, %s, %s, %s) AS b(reason)",
                           (unit.action in RESUMABLE and not shared, unit.relid, unit.action,
                            ctx.run_id, ctx.policy.relid, unit.relid, unit.name, unit.action, ctx.pred.cutoff,
                            "ranges" if shared else None, unit.action in ("drop", "detach"))).fetchone()
    ctx.checkpoint = dict(row[1]) if row is not None and row[1] else None
    ctx.rows_may_remain = ctx.checkpoint is not None  # an earlier run did the unit up to it
    if row is not None and row[0] is not None:
        res.action, res.status, res.error = "skip", "skipped", str(row[0])
        res.duration = time.monotonic() - started
        return res
    escaping: BaseException | None = None
    ended = False
    pace = ctx.delete_limiter.pace
    if pace is not None:
        pace.unit_started(big=shared)
    try:
        ended = _do_unit(ctx, res)
    except errors.UndefinedTable:
        # Dropped by someone else between listing and now: nothing left to do here.
        res.status, res.error = "skipped", "the partition was dropped during the run"
    except ranges.UnitTimeout as exc:
        res.status, res.error = "timeout", str(exc)
    except StorageError as exc:  # the batch was undone: nothing deleted
        res.status, res.error = "failed", str(exc)
    except errors.LockNotAvailable as exc:
        res.status, res.error = "timeout", f"lock_timeout ({ctx.settings.lock_timeout}) reached: {error_text(exc)}"
    except errors.QueryCanceled as exc:
        res.status, res.error = "timeout", f"statement_timeout ({ctx.settings.statement_timeout}) reached: " \
            f"{error_text(exc)}"
    except psycopg.Error as exc:
        if conn.broken:
            raise
        res.status, res.error = "failed", error_text(exc)
    except BaseException as exc:
        # Not the database's answer (a bug): the unit fails, and so does the run (expire_table).
        res.status, res.error = "failed", error_text(exc)
        escaping = exc
        raise
    finally:
        if pace is not None:
            pace.unit_ended()
        if not conn.broken:
            # While another error escapes, a refused statement here must not replace it.
            with contextlib.suppress(*((psycopg.Error,) if escaping is not None else ())):
                # Back to lock_timeout if the unit left row_lock_timeout on (rows.py), with
                # the unit's end: a unit that got as far as starting is finished with its
                # status; one that failed before starting has no row to finish (an UPDATE of nothing).
                restore = ctx.lock_timeout not in (None, ctx.settings.lock_timeout)
                if not ended:
                    end = history.UnitEnd(unit.relid, res.status, res.error,
                                          ctx.settings.lock_timeout if restore else None)
                    if defer_end and escaping is None:
                        ctx.unit_end = end
                    else:
                        history.end_unit(conn, ctx.run_id, end)
                elif restore:
                    ranges.set_lock_timeout(ctx, ctx.settings.lock_timeout)
                ctx.lock_timeout = ctx.settings.lock_timeout
        res.rows_selected, res.rows_deleted, res.values_nulled = ctx.selected, ctx.deleted, ctx.values_nulled
        res.rows_may_remain = ctx.rows_may_remain
        res.duration = time.monotonic() - started
    return res


def _do_unit(ctx: UnitContext, res: UnitResult) -> bool:
    """The unit's work; True when it ended the unit itself (claim released)."""
    unit, conn, policy = ctx.unit, ctx.conn, ctx.policy
    if unit.action == "orphans":  # ranges claimed one by one, shared with other runs: no take-over
        res.strategy = "ranges"
        history.start_unit(conn, ctx.run_id, unit.relid, unit.name, unit.action, res.strategy, None)
        ctx.progress.unit_started(policy.name, unit.name, unit.action, estimate_expired(ctx))
        res.status = orphans.delete_orphans(ctx)
    elif unit.action == "delete" and ctx.chosen is not None and ctx.chosen[0] == "ranges":
        # block ranges shared with the other runs sweeping it (sweeps.py), each range checkpointed
        res.strategy = "ranges"
        history.start_unit(conn, ctx.run_id, unit.relid, unit.name, unit.action, res.strategy, None)
        ctx.progress.unit_started(policy.name, unit.name, unit.action, ctx.chosen[1])
        res.status = sweeps.run(ctx, rows.range_delete(ctx), ctx.settings.row_range_blocks)
    elif unit.action == "delete":
        # resume the way it was going (a checkpoint only makes sense to its own strategy)
        cp_strategy = (ctx.checkpoint or {}).get("strategy")
        resumed = str(cp_strategy) if cp_strategy in ("index", "ctid") else None
        if resumed == "index" and ctx.pred.bound is None:
            # a key of a TTL column the policy no longer has (an expression now): from the start
            resumed, ctx.checkpoint = None, None
        if ctx.chosen is not None and resumed is None:  # chosen before the claim (_shares_ranges)
            res.strategy, estimate = ctx.chosen
            history.start_unit(conn, ctx.run_id, unit.relid, unit.name, unit.action, res.strategy, ctx.checkpoint)
        else:  # chosen and started in one round trip
            res.strategy, estimate = rows.start_unit(ctx, resumed)
        ctx.progress.unit_started(policy.name, unit.name, unit.action, estimate)
        pace = ctx.delete_limiter.pace
        if pace is not None and estimate is not None and estimate > policy.delete_batch_size:
            pace.prepare(estimate)  # more than one window: its pace may be needed
        res.status = rows.delete_rows(ctx, res.strategy)
        if res.status == "ok" and policy.has_column_ttls:  # its expired column values, while still claimed
            ranges.set_lock_timeout(ctx, ctx.settings.lock_timeout)
            columns.null_unit(ctx)
    elif unit.action in ("archive", "queue"):  # rows moved to storage (tiers); a queue shard drained
        res.strategy = "ctid" if unit.action == "archive" else "queue"
        history.start_unit(conn, ctx.run_id, unit.relid, unit.name, unit.action, res.strategy, ctx.checkpoint)
        ctx.progress.unit_started(policy.name, unit.name, unit.action, None)
        res.status = tiers.archive(ctx) if unit.action == "archive" else queues.drain(ctx)
        if ctx.removed is not None:  # a partition exported whole, then dropped or detached
            res.action, res.strategy = ctx.removed, "export"
    else:  # started by ttl._begin_unit; ended in the transaction that removes the partition
        ctx.progress.unit_started(policy.name, unit.name, unit.action, None)
        try:
            if unit.action == "drop":
                partitions.drop_partition(ctx)
            else:
                res.strategy = partitions.detach_partition(ctx)
        except partitions.Kept as kept:
            res.status, res.error = "skipped", str(kept)
        return True
    return False


def _shares_ranges(ctx: UnitContext) -> bool:
    """Row expiry of a unit of ``ttl.shared_sweep_blocks()`` or more (by its size as of its
    last VACUUM or ANALYZE) that is to be swept in ctid order: runs that work on it at once
    share it range by range (sweeps.py), each range done by one of them. Its strategy is
    chosen here, before the claim, whose kind depends on it (kept in ``ctx.chosen``). Not
    with column TTLs (their values are nulled once the unit's rows are done, by one run)."""
    settings, policy = ctx.settings, ctx.policy
    if (ctx.unit.action != "delete" or not ctx.pred.row_expiry or policy.has_column_ttls
            or settings.shared_sweep_blocks <= 0 or ctx.unit.pages < settings.shared_sweep_blocks
            or settings.row_strategy == "index"):
        return False
    try:
        strategy, estimate = rows.choose_strategy(ctx)
    except psycopg.Error:
        if ctx.conn.broken:
            raise
        return False  # (a lock on the table, say) the unit's own path meets it again and records it
    ctx.chosen = ("ranges" if strategy == "ctid" else strategy, estimate)
    return strategy == "ctid"


def estimate_expired(ctx: UnitContext) -> int | None:
    """The planner's estimate of the unit's expired rows, for progress bars (no scan)."""
    from psycopg import sql

    query = sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM ONLY {} WHERE {}").format(ctx.unit.ident, ctx.pred.expired)
    try:
        row = ctx.conn.execute(query).fetchone()
    except psycopg.Error:
        return None
    return int(row[0][0]["Plan"]["Plan Rows"]) if row else None


__all__ = ["Engine", "EngineError", "TableResult", "Unit", "UnitResult", "expire"]
