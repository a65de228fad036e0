"""Sweeps: one unit's blocks in ranges that several runs share, each range done by one.

A sweep is a pass over a unit's blocks [0, blocks) in ranges of ``range_blocks``,
begun by one run and joined by every run that comes while it lasts. Each range is
claimed by one run at a time (a session advisory lock: it vanishes with the run's
session) and recorded in ``ttl.block_range`` with its checkpoint (the next block),
committed with every DELETE, so a killed run's range is taken up where it stopped
and a finished range is not done again. Two kinds of work sweep this way, each with
its own sweeps (``work``): orphan deletion (orphans.py) and, on a table of at least
two ranges swept in ctid order, row expiry (engine.py).

The work gives the DELETE of a block range (its $1 and $2 the range's first and end
tids) and its SKIP LOCKED form; each DELETE is one transaction with the range's and
the unit's counters, sized from what the last ones took toward ttl.transaction_seconds().
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.ranges import UnitTimeout, delete_or_skip_locked, execute, set_lock_timeout, unit_size
from pg_ttl.expire.results import error_text

# A range that RANGE_ATTEMPTS runs could not do (failed, timed out, interrupted, or held
# by a run that seems stuck) is given up for its sweep: the sweep ends without it, the
# next one tries it again. One bad range never holds every later sweep back.
RANGE_ATTEMPTS = 3
NOT_DONE = "('failed', 'timeout', 'interrupted')"
# A run stops after this many of its ranges failed: the cause is likely the table's, not a range's.
FAILED_RANGES_PER_RUN = 3
# A range another run has held this long without finishing counts as an attempt that
# failed (its session may be stuck: a client gone without the server knowing). A
# range of 64 MB takes seconds.
STALE_HOLD_SECONDS = 3600.0
# The unit's latest sweep of this work: how many of its ranges are finished (done or
# given up), whether a run of this round (a cutoff as late as ours) took part in it, and
# whether its every range began after this run did.
LATEST_SWEEP = """
SELECT s.sweep, s.sweep_blocks, s.range_blocks, count(*) FILTER (WHERE s.ok OR s.failures >= %(attempts)s),
       bool_or(s.ours), min(s.started) >= (SELECT r.started_at FROM ttl.run r WHERE r.run_id = %(run)s)
  FROM (SELECT o.sweep, o.sweep_blocks, o.range_blocks, o.range_no, bool_or(o.status = 'ok') AS ok,
               count(*) FILTER (WHERE o.status IN """ + NOT_DONE + """) AS failures,
               bool_or(r.cutoff >= %(cutoff)s) AS ours, min(o.started_at) AS started
          FROM ttl.block_range o JOIN ttl.run r ON r.run_id = o.run_id
         WHERE o.unit_relid = %(unit)s AND o.work = %(work)s
           AND o.sweep = (SELECT max(x.sweep) FROM ttl.block_range x
                           WHERE x.unit_relid = %(unit)s AND x.work = %(work)s)
         GROUP BY o.sweep, o.sweep_blocks, o.range_blocks, o.range_no) s
 GROUP BY s.sweep, s.sweep_blocks, s.range_blocks
"""
# Where a range of a sweep stands: done (or given up), and how far earlier runs got
# (their next_block, committed with each DELETE).
RANGE_STATE = """
SELECT bool_or(status = 'ok') OR count(*) FILTER (WHERE status IN """ + NOT_DONE + """) >= %(attempts)s,
       max(next_block)
  FROM ttl.block_range
 WHERE unit_relid = %(unit)s AND work = %(work)s AND sweep = %(sweep)s AND range_no = %(range)s
"""
# The run holding a range, unfinished, since longer than the given seconds: of this sweep
# or of an earlier one (a range's claim is its number, whatever the sweep).
STALE_HOLDER = """
SELECT o.run_id, o.started_at FROM ttl.block_range o
 WHERE o.unit_relid = %(unit)s AND o.work = %(work)s AND o.range_no = %(range)s AND o.run_id <> %(run)s
   AND o.status = 'running' AND o.started_at < pg_catalog.clock_timestamp() - %(stale)s * interval '1 second'
 ORDER BY o.started_at LIMIT 1
"""
START_RANGE = """
INSERT INTO ttl.block_range (run_id, unit_relid, work, sweep, sweep_blocks, range_blocks, range_no, first_block,
                             end_block, next_block)
VALUES (%(run)s, %(unit)s, %(work)s, %(sweep)s, %(sweep_blocks)s, %(range_blocks)s, %(range)s, %(first)s, %(end)s,
        %(first)s)
"""
END_RANGE = """
UPDATE ttl.block_range SET status = %(status)s, finished_at = clock_timestamp(), error = %(error)s
 WHERE run_id = %(run)s AND unit_relid = %(unit)s AND range_no = %(range)s
"""
# A block range's counters (the range's and the unit's) and checkpoint, in the DELETE's
# transaction, after it: its rows deleted (the DELETE's row count: a RETURNING to count
# them in one statement cost ~0.2 us a row, a fifth of a plain sweep's time) and examined
# (EXAMINED; or the rows deleted, for work that does not count them). Values are
# literals (a name may hold a '%').
ACCOUNT_STEP = sql.SQL("""
WITH n AS (SELECT CAST({deleted} AS pg_catalog.int8) AS deleted, {examined} AS examined),
r AS (UPDATE ttl.block_range o SET next_block = {hi}, rows_deleted = o.rows_deleted + n.deleted,
             rows_examined = o.rows_examined + n.examined
        FROM n WHERE o.run_id = {run} AND o.unit_relid = {unit} AND o.range_no = {range})
UPDATE ttl.run_unit u SET rows_deleted = u.rows_deleted + n.deleted, rows_selected = u.rows_selected + n.examined,
       checkpoint = {checkpoint}
  FROM n WHERE u.run_id = {run} AND u.unit_relid = {unit}
RETURNING n.examined
""")
# The rows the DELETE's scan read in the range (the transaction's own count of rows
# returned by scans of the unit: only the DELETE has scanned it): a second scan to count
# them cost 3% of an orphan pass. With track_counts off it reads 0: the rows deleted.
EXAMINED = sql.SQL("GREATEST(pg_catalog.pg_stat_get_xact_tuples_returned(CAST({unit} AS pg_catalog.oid)), "
                   "CAST({deleted} AS pg_catalog.int8))")


@dataclass
class RangeDelete:
    """What a sweep deletes in a block range: ``plain`` and its SKIP LOCKED form
    (``skip_locked``), each a DELETE whose $1 and $2 are the range's first and end tids,
    without RETURNING; ``max_rows``: at most about this many deleted per statement
    (None: statements sized by time alone); ``count_examined``: count the rows each
    DELETE read as examined, else the rows deleted."""

    work: str  # 'orphans' | 'delete'
    plain: str
    skip_locked: str
    max_rows: int | None
    count_examined: bool
    # Run first in each DELETE's transaction, in order, before its snapshot (orphans: the
    # isolation level, and the parents locked, so that the snapshot is taken after any
    # TRUNCATE or rewrite of a parent that the DELETE would otherwise wait for).
    prelude: tuple[str, ...] = ()


@dataclass
class Sweep:
    """A pass over a unit's blocks [0, blocks) in ranges of ``range_blocks``, begun by run ``sweep``."""

    sweep: int
    blocks: int
    range_blocks: int
    claimed: int | None = None  # the range this run claimed when it began the sweep
    step: int | None = None  # blocks this run's next DELETE covers, as the last ones took (None: not yet)

    @property
    def ranges(self) -> int:
        return -(-self.blocks // self.range_blocks)


def run(ctx: UnitContext, how: RangeDelete, range_blocks: int) -> str:
    """Delete in the unit's ranges: join its unfinished sweep of this work (or begin one),
    then claim its ranges one by one, each resumed where an earlier run left it. Ranges
    another run holds are its own; with them the sweep ends whoever finishes last.
    A range that fails is recorded with its error and the run goes on with the next
    ones; the first failure is raised at the end (the unit fails, with that error).
    Returns 'ok' or 'partial' (stopped, or a range is held by a run that seems stuck)."""
    conn = ctx.conn
    nblocks, per_block = unit_size(ctx)
    sweep = _join_sweep(ctx, how.work, nblocks, max(1, range_blocks))
    if sweep is None:
        ctx.rows_may_remain = True
        return "ok"  # this round already swept it
    # A statement's cost is far above JIT's thresholds and its compilation would be
    # paid again by every one of them (30-120 ms each).
    jit = conn.execute("SELECT pg_catalog.current_setting('jit')").fetchone()
    conn.execute("SELECT pg_catalog.set_config('jit', 'off', false)")
    failures: list[BaseException] = []
    stuck = False  # a range held by a run that seems stuck: this run is partial
    try:
        busy: list[int] = []
        for range_no in range(sweep.ranges):
            if ctx.stopping():
                return "partial"
            status = _try_range(ctx, how, sweep, range_no, per_block, failures)
            if status == "busy":
                busy.append(range_no)
            elif status not in ("ok", "failed"):
                return status
            if len(failures) >= FAILED_RANGES_PER_RUN:
                break
        # Once more the ranges other runs held: one that was killed meanwhile left its
        # range unfinished, and it is free now.
        for range_no in busy if len(failures) < FAILED_RANGES_PER_RUN else []:
            if ctx.stopping():
                return "partial"
            status = _try_range(ctx, how, sweep, range_no, per_block, failures)
            if status == "busy":
                stuck = _note_stale_holder(ctx, how.work, sweep, range_no) or stuck
            elif status not in ("ok", "failed"):
                return status
    finally:
        if not conn.broken and jit is not None:
            conn.execute("SELECT pg_catalog.set_config('jit', %s, false)", (jit[0],))
        if sweep.claimed is not None and not conn.broken:
            # stopped before reaching the range it claimed as it began the sweep: the range
            # goes back (else the session, a worker's or a reused Engine's, would keep it)
            conn.execute(END_RANGE, {"status": "partial", "error": None, "run": ctx.run_id,
                                     "unit": ctx.unit.relid, "range": sweep.claimed})
            conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s, %s)",
                         (_unit_key(ctx.unit.relid), _range_key(how.work, sweep.claimed)))
            sweep.claimed = None
    if failures:
        raise failures[0]
    return "partial" if stuck else "ok"


def _try_range(ctx: UnitContext, how: RangeDelete, sweep: Sweep, range_no: int, per_block: float,
               failures: list[BaseException]) -> str:
    """One range; a database error or timeout in it is kept in ``failures`` (the range
    is recorded as failed), 'failed' returned, and the run goes on."""
    try:
        return _claim_and_sweep(ctx, how, sweep, range_no, per_block)
    except (psycopg.Error, UnitTimeout) as exc:
        if ctx.conn.broken or isinstance(exc, errors.UndefinedTable):
            raise
        failures.append(exc)
        return "failed"


def _note_stale_holder(ctx: UnitContext, work: str, sweep: Sweep, range_no: int) -> bool:
    """A range another run has held unfinished for STALE_HOLD_SECONDS: recorded as this
    run's failed attempt at it, so that the sweep can end without it (RANGE_ATTEMPTS)."""
    params = {"unit": ctx.unit.relid, "work": work, "sweep": sweep.sweep, "range": range_no, "run": ctx.run_id,
              "stale": STALE_HOLD_SECONDS}
    holder = ctx.conn.execute(STALE_HOLDER, params).fetchone()
    if holder is None:
        return False
    reached = ctx.conn.execute(RANGE_STATE, {**params, "attempts": RANGE_ATTEMPTS}).fetchone()
    first = max(range_no * sweep.range_blocks, int(reached[1] or 0) if reached else 0)
    ctx.conn.execute(START_RANGE, {**params, "sweep_blocks": sweep.blocks, "range_blocks": sweep.range_blocks,
                                   "first": first, "end": min((range_no + 1) * sweep.range_blocks, sweep.blocks)})
    ctx.conn.execute(END_RANGE, {**params, "status": "failed",
                                 "error": f"held by run {holder[0]} since {holder[1]:%Y-%m-%d %H:%M:%S%z} "
                                          "without finishing (its session may be stuck)"})
    return True


def _unit_key(unit: int) -> int:
    # the unit's oid as the first int4 of a two-key advisory lock
    return unit - 2**32 if unit >= 2**31 else unit


def _range_key(work: str, range_no: int) -> int:
    # A range's claim, the second int4: orphans' ranges from 0 up, row expiry's from -2
    # down (-1 is the lock under which runs join a sweep).
    return range_no if work == "orphans" else -2 - range_no


def _join_sweep(ctx: UnitContext, work: str, nblocks: int, range_blocks: int) -> Sweep | None:
    """The sweep to work on: the unit's latest if unfinished, else a new one begun by
    this run; None when a run of this round already finished the latest. For a run
    that follows its parents' run, only a sweep that began after it did saw their rows
    gone: it neither joins nor counts an earlier one (whose ranges done before would
    keep their new orphans until the child's next schedule), it begins a new one.
    Decided under a transaction lock on the unit, so two runs starting together join one."""
    unit = ctx.unit.relid
    with ctx.conn.transaction():
        ctx.conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s, -1)", (_unit_key(unit),))
        row = ctx.conn.execute(LATEST_SWEEP, {"unit": unit, "work": work, "cutoff": ctx.pred.cutoff,
                                              "attempts": RANGE_ATTEMPTS, "run": ctx.run_id}).fetchone()
        if row is not None and (row[5] or not ctx.pred.follows_parents):
            latest = Sweep(int(row[0]), int(row[1]), int(row[2]))
            if int(row[3]) < latest.ranges and latest.range_blocks == range_blocks:
                return latest
            if int(row[3]) >= latest.ranges and row[4]:
                return None
        sweep = Sweep(ctx.run_id, nblocks, range_blocks)
        if sweep.ranges == 0:
            return sweep
        # Its first free range claimed and recorded at once: a run deciding next sees
        # this sweep. (A range still held by a run of the last sweep, one stuck maybe,
        # is taken later: it must not keep the new sweep from beginning.)
        for first in range(sweep.ranges):
            if _try_claim(ctx, work, first):
                break
        else:
            return None  # every range held still by runs of the last sweep: the next pass
        ctx.conn.execute(START_RANGE, {"run": ctx.run_id, "unit": unit, "work": work, "sweep": sweep.sweep,
                                       "sweep_blocks": sweep.blocks, "range_blocks": range_blocks,
                                       "range": first, "first": first * range_blocks,
                                       "end": min((first + 1) * range_blocks, nblocks)})
        sweep.claimed = first
        return sweep


def _try_claim(ctx: UnitContext, work: str, range_no: int) -> bool:
    row = ctx.conn.execute("SELECT pg_catalog.pg_try_advisory_lock(%s, %s)",
                           (_unit_key(ctx.unit.relid), _range_key(work, range_no))).fetchone()
    return bool(row and row[0])


def _claim_and_sweep(ctx: UnitContext, how: RangeDelete, sweep: Sweep, range_no: int, per_block: float) -> str:
    """One range, unless it is done (or given up) or another run holds it ('busy')."""
    conn, unit = ctx.conn, ctx.unit.relid
    key = (_unit_key(unit), _range_key(how.work, range_no))
    if sweep.claimed == range_no:  # claimed (and recorded) when this run began the sweep
        sweep.claimed = None
    elif not _try_claim(ctx, how.work, range_no):
        ctx.rows_may_remain = True
        return "busy"  # another run's: not ours to wait for
    try:
        params = {"unit": unit, "work": how.work, "sweep": sweep.sweep, "range": range_no, "run": ctx.run_id}
        done, reached = conn.execute(RANGE_STATE, {**params, "attempts": RANGE_ATTEMPTS}).fetchone()  # type: ignore[misc]
        if done:  # by another run
            ctx.rows_may_remain = True
            return "ok"
        first = range_no * sweep.range_blocks
        end = min(first + sweep.range_blocks, sweep.blocks)
        mine = conn.execute("SELECT 1 FROM ttl.block_range WHERE run_id = %(run)s AND unit_relid = %(unit)s"
                            " AND range_no = %(range)s", params).fetchone()
        if mine is None:  # (a new sweep's first range is recorded already)
            conn.execute(START_RANGE, {**params, "sweep_blocks": sweep.blocks, "range_blocks": sweep.range_blocks,
                                       "first": max(first, int(reached or 0)), "end": end})
        start = max(first, int(reached or 0))
        if start > first:  # taken up where another run's checkpoint left it
            ctx.rows_may_remain = True
        try:
            status = _sweep_range(ctx, how, sweep, range_no, start, end, per_block)
        except BaseException as exc:
            if not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    timeout = isinstance(exc, UnitTimeout | errors.LockNotAvailable | errors.QueryCanceled)
                    conn.execute(END_RANGE, {**params, "status": "timeout" if timeout else "failed",
                                             "error": error_text(exc)})
            raise
        conn.execute(END_RANGE, {**params, "status": status, "error": None})
        return status
    finally:
        if not conn.broken:
            conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s, %s)", key)


def _sweep_range(ctx: UnitContext, how: RangeDelete, sweep: Sweep, range_no: int, block: int, end: int,
                 per_block: float) -> str:
    """Blocks [block, end) of the unit, one DELETE per transaction, each sized toward
    ttl.transaction_seconds() (and ``max_rows`` deleted rows) from what the last ones
    took, in this range or the run's earlier ones: by time, not only by the rows it
    deletes (orphans cost an index probe of each parent per row, ~1 µs, and sparse ones
    would make statements of millions of rows)."""
    if sweep.step is None:  # the run's first DELETE: as if every row went
        sweep.step = max(1, math.ceil((how.max_rows or ctx.policy.delete_batch_size) / per_block))
    step = sweep.step
    # The range's DELETEs run under the short row_lock_timeout (set once, not per statement).
    set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
    try:
        while block < end:
            if ctx.stopping():
                return "partial"
            hi = min(end, block + step)
            started = time.monotonic()
            deleted, examined = _step(ctx, how, range_no, block, hi)
            took = max(time.monotonic() - started, 1e-4)
            ctx.selected += examined
            ctx.deleted += deleted
            ctx.progress.batch_done(ctx.policy.name, ctx.unit.name, deleted, deleted)
            ctx.delete_limiter.add(deleted)
            blocks = hi - block
            by_time = blocks * ctx.settings.transaction_target / took
            # A rate limit or the throttle slowing the pass: waits come between transactions,
            # so each is kept to delete_batch_size rows (other sessions wait less on each).
            max_rows = how.max_rows or (ctx.policy.delete_batch_size if ctx.delete_limiter.paced else None)
            by_rows = max_rows * blocks / deleted if deleted and max_rows else float("inf")
            # (a range's last DELETE may be cut short by its end: its time does not shrink the
            # next, but a pace's row cap does: a range swept whole by each DELETE otherwise
            # stays one transaction of the range's rows however slow the pass is asked to go)
            if hi < end or blocks >= step:
                step = sweep.step = max(1, int(min(by_time, by_rows, blocks * 4)))
            elif by_rows < step:
                step = sweep.step = max(1, int(by_rows))
            block = hi
    finally:
        set_lock_timeout(ctx, ctx.settings.lock_timeout)
    return "ok"


def _step(ctx: UnitContext, how: RangeDelete, range_no: int, lo: int, hi: int) -> tuple[int, int]:
    """One block range deleted with its counters, in one transaction, under the short row
    lock timeout (set by the caller); a range that meets an application's row lock is
    redone without waiting on row locks (the rows it holds wait for the next pass), one
    whose row was moved to another partition meanwhile is redone (MOVED_RETRIES times,
    then left)."""
    bounds = (f"({lo},0)", f"({hi},0)")

    def delete(statement: str, reraise_lock: bool) -> tuple[int, int]:
        with ctx.conn.transaction():
            for setup in how.prelude:
                execute(ctx, setup, reraise_lock=reraise_lock)
            deleted = execute(ctx, statement, reraise_lock=reraise_lock, raw_params=bounds).rowcount
            examined = EXAMINED.format(unit=sql.Literal(ctx.unit.relid), deleted=sql.Literal(deleted)) \
                if how.count_examined else sql.Literal(deleted)
            row = execute(ctx, ACCOUNT_STEP.format(
                deleted=sql.Literal(deleted), examined=examined, hi=sql.Literal(hi), run=sql.Literal(ctx.run_id),
                unit=sql.Literal(ctx.unit.relid), range=sql.Literal(range_no),
                checkpoint=sql.Literal(Jsonb({"strategy": "ranges", "range": range_no, "from": f"({hi},0)"})))
            ).fetchone()
        return deleted, int(row[0]) if row else deleted

    def skipping() -> tuple[int, int]:
        set_lock_timeout(ctx, ctx.settings.lock_timeout)  # (it waits on no row: on the table at most)
        try:
            return delete(how.skip_locked, False)
        finally:
            set_lock_timeout(ctx, ctx.settings.row_lock_timeout)

    return delete_or_skip_locked(ctx, lambda: delete(how.plain, True), skipping) or (0, 0)


# -- read side: a sweep's state (pg-ttl orphans status) ---------------------------------

@dataclass
class SweepState:
    """Where a unit's latest sweep stands, and the unit's last run of that work."""

    unit: str
    sweep: int | None = None  # the run that began it
    started_at: datetime | None = None
    ranges: int = 0
    done: int = 0
    given_up: list[tuple[int, str | None]] = field(default_factory=list)  # (range, its last error)
    failing: list[tuple[int, int, str | None]] = field(default_factory=list)  # (range, failures, last error)
    running: int = 0
    last_run: int | None = None
    last_status: str | None = None
    last_finished_at: datetime | None = None
    last_deleted: int = 0
    last_error: str | None = None

    @property
    def finished(self) -> bool:
        return self.sweep is not None and self.done + len(self.given_up) >= self.ranges


SWEEP_RANGES = """
SELECT o.range_no, max(o.sweep), max(o.sweep_blocks), max(o.range_blocks), min(o.started_at),
       bool_or(o.status = 'ok'), count(*) FILTER (WHERE o.status IN """ + NOT_DONE + """),
       (array_agg(o.error ORDER BY o.started_at DESC) FILTER (WHERE o.error IS NOT NULL))[1],
       bool_or(o.status = 'running')
  FROM ttl.block_range o
 WHERE o.unit_relid = %(unit)s AND o.work = %(work)s
   AND o.sweep = (SELECT max(x.sweep) FROM ttl.block_range x WHERE x.unit_relid = %(unit)s AND x.work = %(work)s)
 GROUP BY o.range_no ORDER BY o.range_no
"""
LAST_RUN = """
SELECT u.run_id, u.status, u.finished_at, u.rows_deleted, u.error FROM ttl.run_unit u
 WHERE u.unit_relid = %(unit)s AND u.action = %(action)s ORDER BY u.run_id DESC LIMIT 1
"""


def sweep_state(conn: psycopg.Connection[Any], unit: int, name: str, work: str) -> SweepState:
    """Unit ``unit``'s latest sweep of this work: ranges done, given up (RANGE_ATTEMPTS
    failures) with their errors, failing still, being worked on; and its last run's outcome."""
    state = SweepState(name)
    for range_no, sweep, blocks, range_blocks, started, ok, failures, error, running in conn.execute(
            SWEEP_RANGES, {"unit": unit, "work": work}).fetchall():
        state.sweep, state.ranges = int(sweep), -(-int(blocks) // int(range_blocks))
        state.started_at = started if state.started_at is None else min(state.started_at, started)
        if ok:
            state.done += 1
        elif failures >= RANGE_ATTEMPTS:
            state.given_up.append((int(range_no), error))
        else:
            if failures:
                state.failing.append((int(range_no), int(failures), error))
            state.running += bool(running)
    last = conn.execute(LAST_RUN, {"unit": unit, "action": work}).fetchone()
    if last is not None:
        state.last_run, state.last_status, state.last_finished_at = int(last[0]), str(last[1]), last[2]
        state.last_deleted, state.last_error = int(last[3]), last[4]
    return state
