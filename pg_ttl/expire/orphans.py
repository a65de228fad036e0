"""Orphan deletion: a child table's rows whose parent row is gone.

Which rows are orphans is the database's definition (``ttl.orphans_sql`` in
sql/80_orphans.sql): no row with the same key in any of the parents, each found
through its unique index, and older than ``min_age`` by the age column. Each
leaf of the child is a unit, whose claim several runs share: they sweep its
block ranges of about ``range_bytes`` together, each range claimed by one run
at a time and checkpointed with every DELETE (``ttl.orphan_range``), so a
killed run's range is taken up where it stopped. Each DELETE re-checks the
condition, so a parent committed meanwhile keeps its child.

Block ranges, not key ranges: a child's rows of one key range can be read
without a scan of the child only through an index on the child's key, which a
child need not have; a block range is read sequentially, and each of its rows
probes each parent's unique index (about 0.8-0.9 us a row on a 2-core machine;
sorting the range's keys first made it no cheaper). The planner's other plans
read a whole parent once per range: a hash of it, or a merge with it.
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
from pg_ttl.expire.predicate import EnginePolicy, Predicate
from pg_ttl.expire.ranges import UnitTimeout, execute, set_lock_timeout
from pg_ttl.expire.results import error_text
from pg_ttl.expire.rows import MOVED_RETRIES
from pg_ttl.expire.units import Unit

# Orphan policies of the given tables (as children) and of the children of the
# given tables (as parents: children follow their parents in the same pass).
ORPHAN_QUERY = """
SELECT o.relid, n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner), o.delete_batch_size,
       o.range_bytes, c.relkind
  FROM ttl.orphan_policy o
  JOIN pg_catalog.pg_class c ON c.oid = o.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE %(tables)s::oid[] IS NULL OR o.relid = ANY(%(tables)s::oid[]) OR o.parent_relids && %(tables)s::oid[]
 ORDER BY n.nspname, c.relname
"""
# The child's leaves: its partitions, or itself (pg_partition_tree lists nothing for a
# table that is not partitioned).
_LEAVES = """
SELECT l.oid FROM pg_catalog.pg_class l
 WHERE l.relkind = 'r' AND (l.oid = %(t)s::oid OR l.oid IN (
       SELECT p.relid FROM pg_catalog.pg_partition_tree(%(t)s::oid::regclass) p WHERE p.isleaf))
"""
# Rows per block of the child as a whole, to turn range_bytes into the select batch.
DENSITY = """
SELECT coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples > 0), 0), coalesce(sum(c.relpages), 0),
       pg_catalog.current_setting('block_size')::int8
  FROM pg_catalog.pg_class c WHERE c.oid IN (""" + _LEAVES + """)
"""
LEAVES = """
SELECT c.oid, n.nspname, c.relname
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid IN (""" + _LEAVES + """)
 ORDER BY n.nspname, c.relname
"""


def load_orphan_policies(conn: psycopg.Connection[Any], tables: list[int] | None) -> list[EnginePolicy]:
    """The orphan policies to run, as engine policies of their child tables: row
    deletion by ctid ranges, with the select batch sized to ``range_bytes``."""
    policies: list[EnginePolicy] = []
    for relid, schema, relname, owner, dbs, range_bytes, relkind in conn.execute(
            ORPHAN_QUERY, {"tables": tables}).fetchall():
        row = conn.execute(DENSITY, {"t": relid}).fetchone()
        assert row is not None
        tuples, pages, block_size = float(row[0]), int(row[1]), int(row[2])
        per_block = tuples / pages if pages > 0 and tuples > 0 else 100.0
        blocks = max(1, int(range_bytes) // block_size)
        policies.append(EnginePolicy(
            relid=int(relid), schema=str(schema), relname=str(relname), owner=str(owner), column=None,
            typname=None, typid=None, expression=None, expire_after_text=None, unit=None,
            select_batch_size=max(1, int(blocks * per_block)), delete_batch_size=int(dbs),
            select_rate_limit=0, delete_rate_limit=0, paused=False, partition_action="drop",
            detach_schema=None, relkind=str(relkind)))
    return policies


def orphan_predicate(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime) -> Predicate:
    """The orphan condition for a run that started at ``cutoff``, from the database."""
    row = conn.execute("SELECT ttl.orphans_sql(%(relid)s, %(cutoff)s), ttl._table_search_path(%(relid)s)",
                       {"relid": policy.relid, "cutoff": cutoff}).fetchone()
    assert row is not None
    return Predicate(cutoff, sql.SQL(row[0]), None, None, None, str(row[1]), row_expiry=False)


def orphan_units(conn: psycopg.Connection[Any], policy: EnginePolicy) -> list[Unit]:
    """Every leaf of the child: partitions are never dropped for orphans."""
    return [Unit(int(oid), str(schema), str(relname), "orphans")
            for oid, schema, relname in conn.execute(LEAVES, {"t": policy.relid}).fetchall()]


# -- execution: a sweep of block ranges, claimed range by range ------------------------

# How long one DELETE (one transaction, with its counters) should take: each child row
# costs an index probe of the parent (~1 µs), so a statement is sized by time, not only
# by the orphans it holds (sparse orphans would make ranges of millions of rows).
STATEMENT_SECONDS = 0.05
# The blocks of one unit, its rows per block as of the last ANALYZE, and the policy's
# range_bytes in blocks.
SIZE = """
SELECT pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int8,
       CASE WHEN c.relpages > 0 AND c.reltuples > 0 THEN c.reltuples / c.relpages ELSE 100 END,
       (SELECT o.range_bytes FROM ttl.orphan_policy o WHERE o.relid = %(policy)s)
         / pg_catalog.current_setting('block_size')::int8
  FROM pg_catalog.pg_class c WHERE c.oid = %(unit)s
"""
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
# The unit's latest sweep: how many of its ranges are finished (done or given up),
# and whether a run of this round (a cutoff as late as ours) took part in it.
LATEST_SWEEP = """
SELECT s.sweep, s.sweep_blocks, s.range_blocks, count(*) FILTER (WHERE s.ok OR s.failures >= %(attempts)s),
       bool_or(s.ours)
  FROM (SELECT o.sweep, o.sweep_blocks, o.range_blocks, o.range_no, bool_or(o.status = 'ok') AS ok,
               count(*) FILTER (WHERE o.status IN """ + NOT_DONE + """) AS failures,
               bool_or(r.cutoff >= %(cutoff)s) AS ours
          FROM ttl.orphan_range o JOIN ttl.run r ON r.run_id = o.run_id
         WHERE o.unit_relid = %(unit)s
           AND o.sweep = (SELECT max(x.sweep) FROM ttl.orphan_range x WHERE x.unit_relid = %(unit)s)
         GROUP BY o.sweep, o.sweep_blocks, o.range_blocks, o.range_no) s
 GROUP BY s.sweep, s.sweep_blocks, s.range_blocks
"""
# Where a range of a sweep stands: done (or given up), and how far earlier runs got
# (their next_block, committed with each DELETE).
RANGE_STATE = """
SELECT bool_or(status = 'ok') OR count(*) FILTER (WHERE status IN """ + NOT_DONE + """) >= %(attempts)s,
       max(next_block)
  FROM ttl.orphan_range WHERE unit_relid = %(unit)s AND sweep = %(sweep)s AND range_no = %(range)s
"""
# The run holding a range, unfinished, since longer than the given seconds: of this sweep
# or of an earlier one (a range's claim is its number, whatever the sweep).
STALE_HOLDER = """
SELECT o.run_id, o.started_at FROM ttl.orphan_range o
 WHERE o.unit_relid = %(unit)s AND o.range_no = %(range)s AND o.run_id <> %(run)s
   AND o.status = 'running' AND o.started_at < pg_catalog.clock_timestamp() - %(stale)s * interval '1 second'
 ORDER BY o.started_at LIMIT 1
"""
START_RANGE = """
INSERT INTO ttl.orphan_range (run_id, unit_relid, sweep, sweep_blocks, range_blocks, range_no, first_block,
                              end_block, next_block)
VALUES (%(run)s, %(unit)s, %(sweep)s, %(sweep_blocks)s, %(range_blocks)s, %(range)s, %(first)s, %(end)s, %(first)s)
"""
END_RANGE = """
UPDATE ttl.orphan_range SET status = %(status)s, finished_at = clock_timestamp(), error = %(error)s
 WHERE run_id = %(run)s AND unit_relid = %(unit)s AND range_no = %(range)s
"""
# One DELETE of a block range and its counters (the range's and the unit's), one
# transaction: what it examined is counted from the statement's own snapshot.
# Values are literals (a name or the condition may hold a '%').
STEP = sql.SQL("""
WITH d AS ({delete}),
n AS (SELECT (SELECT count(*) FROM d) AS deleted,
             (SELECT count(*) FROM ONLY {t} WHERE {where}) AS examined),
r AS (UPDATE ttl.orphan_range o SET next_block = {hi}, rows_deleted = o.rows_deleted + n.deleted,
             rows_examined = o.rows_examined + n.examined
        FROM n WHERE o.run_id = {run} AND o.unit_relid = {unit} AND o.range_no = {range})
UPDATE ttl.run_unit u SET rows_deleted = u.rows_deleted + n.deleted, rows_selected = u.rows_selected + n.examined,
       checkpoint = {checkpoint}
  FROM n WHERE u.run_id = {run} AND u.unit_relid = {unit}
RETURNING n.deleted, n.examined
""")


@dataclass
class Sweep:
    """A pass over a unit's blocks [0, blocks) in ranges of ``range_blocks``, begun by run ``sweep``."""

    sweep: int
    blocks: int
    range_blocks: int
    claimed: int | None = None  # the range this run claimed when it began the sweep

    @property
    def ranges(self) -> int:
        return -(-self.blocks // self.range_blocks)


def _lock_key(unit: int) -> int:
    # the unit's oid as the first int4 of a two-key advisory lock
    return unit - 2**32 if unit >= 2**31 else unit


def delete_orphans(ctx: UnitContext) -> str:
    """Delete the unit's orphans: join the unit's unfinished sweep (or begin one), then
    claim its ranges one by one, each resumed where an earlier run left it. Ranges
    another run holds are its own; with them the sweep ends whoever finishes last.
    A range that fails is recorded with its error and the run goes on with the next
    ones; the first failure is raised at the end (the unit fails, with that error).
    Returns 'ok' or 'partial' (stopped, or a range is held by a run that seems stuck)."""
    conn = ctx.conn
    # Without an age column: a sample of the table's xid clock for later runs (as its
    # owner), and nothing to do while no sample is min_age old.
    row = conn.execute("SELECT ttl.xid_clock_tick(%(t)s), ttl.orphans_waiting(%(t)s, %(cutoff)s)",
                       {"t": ctx.policy.relid, "cutoff": ctx.pred.cutoff}).fetchone()
    if row is not None and row[1] is not None:
        return "ok"
    row = conn.execute(SIZE, {"unit": ctx.unit.relid, "policy": ctx.policy.relid}).fetchone()
    if row is None or row[0] is None or row[2] is None:
        raise errors.UndefinedTable(f"the partition {ctx.unit.name} was dropped during the run")
    nblocks, per_block = int(row[0]), float(row[1])
    sweep = _join_sweep(ctx, nblocks, max(1, int(row[2])))
    if sweep is None:
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
            status = _try_range(ctx, sweep, range_no, per_block, failures)
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
            status = _try_range(ctx, sweep, range_no, per_block, failures)
            if status == "busy":
                stuck = _note_stale_holder(ctx, sweep, range_no) or stuck
            elif status not in ("ok", "failed"):
                return status
    finally:
        if not conn.broken and jit is not None:
            conn.execute("SELECT pg_catalog.set_config('jit', %s, false)", (jit[0],))
    if failures:
        raise failures[0]
    return "partial" if stuck else "ok"


def _try_range(ctx: UnitContext, sweep: Sweep, range_no: int, per_block: float,
               failures: list[BaseException]) -> str:
    """One range; a database error or timeout in it is kept in ``failures`` (the range
    is recorded as failed), 'failed' returned, and the run goes on."""
    try:
        return _claim_and_sweep(ctx, sweep, range_no, per_block)
    except (psycopg.Error, UnitTimeout) as exc:
        if ctx.conn.broken or isinstance(exc, errors.UndefinedTable):
            raise
        failures.append(exc)
        return "failed"


def _note_stale_holder(ctx: UnitContext, sweep: Sweep, range_no: int) -> bool:
    """A range another run has held unfinished for STALE_HOLD_SECONDS: recorded as this
    run's failed attempt at it, so that the sweep can end without it (RANGE_ATTEMPTS)."""
    params = {"unit": ctx.unit.relid, "sweep": sweep.sweep, "range": range_no, "run": ctx.run_id,
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


def _join_sweep(ctx: UnitContext, nblocks: int, range_blocks: int) -> Sweep | None:
    """The sweep to work on: the unit's latest if unfinished, else a new one begun by
    this run; None when a run of this round already finished the latest. Decided
    under a transaction lock on the unit, so two runs starting together join one."""
    unit = ctx.unit.relid
    with ctx.conn.transaction():
        ctx.conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s, -1)", (_lock_key(unit),))
        row = ctx.conn.execute(LATEST_SWEEP, {"unit": unit, "cutoff": ctx.pred.cutoff,
                                              "attempts": RANGE_ATTEMPTS}).fetchone()
        if row is not None:
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
            if _try_claim(ctx, first):
                break
        else:
            return None  # every range held still by runs of the last sweep: the next pass
        ctx.conn.execute(START_RANGE, {"run": ctx.run_id, "unit": unit, "sweep": sweep.sweep,
                                       "sweep_blocks": sweep.blocks, "range_blocks": range_blocks,
                                       "range": first, "first": first * range_blocks,
                                       "end": min((first + 1) * range_blocks, nblocks)})
        sweep.claimed = first
        return sweep


def _try_claim(ctx: UnitContext, range_no: int) -> bool:
    row = ctx.conn.execute("SELECT pg_catalog.pg_try_advisory_lock(%s, %s)",
                           (_lock_key(ctx.unit.relid), range_no)).fetchone()
    return bool(row and row[0])


def _claim_and_sweep(ctx: UnitContext, sweep: Sweep, range_no: int, per_block: float) -> str:
    """One range, unless it is done (or given up) or another run holds it ('busy')."""
    conn, unit = ctx.conn, ctx.unit.relid
    key = (_lock_key(unit), range_no)
    if sweep.claimed == range_no:  # claimed (and recorded) when this run began the sweep
        sweep.claimed = None
    elif not _try_claim(ctx, range_no):
        return "busy"  # another run's: not ours to wait for
    try:
        params = {"unit": unit, "sweep": sweep.sweep, "range": range_no, "run": ctx.run_id}
        done, reached = conn.execute(RANGE_STATE, {**params, "attempts": RANGE_ATTEMPTS}).fetchone()  # type: ignore[misc]
        if done:
            return "ok"
        first = range_no * sweep.range_blocks
        end = min(first + sweep.range_blocks, sweep.blocks)
        mine = conn.execute("SELECT 1 FROM ttl.orphan_range WHERE run_id = %(run)s AND unit_relid = %(unit)s"
                            " AND range_no = %(range)s", params).fetchone()
        if mine is None:  # (a new sweep's first range is recorded already)
            conn.execute(START_RANGE, {**params, "sweep_blocks": sweep.blocks, "range_blocks": sweep.range_blocks,
                                       "first": max(first, int(reached or 0)), "end": end})
        start = max(first, int(reached or 0))
        try:
            status = _sweep_range(ctx, range_no, start, end, per_block)
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


def _sweep_range(ctx: UnitContext, range_no: int, block: int, end: int, per_block: float) -> str:
    """Blocks [block, end) of the unit, one DELETE per transaction, each sized toward
    STATEMENT_SECONDS and delete_batch_size orphans from what the last ones took."""
    dbs = ctx.policy.delete_batch_size
    step = max(1, math.ceil(dbs / per_block))  # as if every row were an orphan
    while block < end:
        if ctx.stopping():
            return "partial"
        hi = min(end, block + step)
        started = time.monotonic()
        deleted, examined = _step(ctx, range_no, block, hi)
        took = max(time.monotonic() - started, 1e-4)
        ctx.selected += examined
        ctx.deleted += deleted
        ctx.progress.batch_done(ctx.policy.name, ctx.unit.name, deleted, deleted)
        ctx.delete_limiter.add(deleted)
        blocks = hi - block
        by_time = blocks * STATEMENT_SECONDS / took
        by_orphans = dbs * blocks / deleted if deleted else float("inf")
        step = max(1, int(min(by_time, by_orphans, blocks * 4)))
        block = hi
    return "ok"


def _step(ctx: UnitContext, range_no: int, lo: int, hi: int) -> tuple[int, int]:
    """One block range deleted with its counters, under the short row lock timeout; a
    range that meets an application's row lock is redone without waiting on row locks
    (the rows it holds wait for the next pass), one whose row was moved to another
    partition meanwhile is redone (MOVED_RETRIES times, then left)."""
    t, cond = ctx.unit.ident, ctx.pred.expired
    where = sql.SQL("ctid OPERATOR(pg_catalog.>=) CAST({} AS pg_catalog.tid) AND "
                    "ctid OPERATOR(pg_catalog.<) CAST({} AS pg_catalog.tid)").format(
        sql.Literal(f"({lo},0)"), sql.Literal(f"({hi},0)"))
    fast = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {cond} RETURNING 1").format(t=t, where=where, cond=cond)
    skip = sql.SQL("DELETE FROM ONLY {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY {t} WHERE {where} AND {cond}"
                   " FOR UPDATE SKIP LOCKED)) AND {cond} RETURNING 1").format(t=t, where=where, cond=cond)
    checkpoint = Jsonb({"strategy": "ranges", "range": range_no, "from": f"({hi},0)"})

    def statement(delete: sql.Composable) -> sql.Composed:
        return STEP.format(delete=delete, t=t, where=where, hi=sql.Literal(hi), run=sql.Literal(ctx.run_id),
                           unit=sql.Literal(ctx.unit.relid), range=sql.Literal(range_no),
                           checkpoint=sql.Literal(checkpoint))

    for _ in range(MOVED_RETRIES):
        try:
            try:
                set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
                row = execute(ctx, statement(fast), reraise_lock=True).fetchone()
            except errors.LockNotAvailable:
                set_lock_timeout(ctx, ctx.settings.lock_timeout)
                row = execute(ctx, statement(skip)).fetchone()
        except errors.SerializationFailure:
            continue  # a new statement, with a new snapshot, no longer sees the moved row here
        finally:
            set_lock_timeout(ctx, ctx.settings.lock_timeout)
        return (int(row[0]), int(row[1])) if row else (0, 0)
    return 0, 0


# -- read side: estimates per range (pg-ttl plan), a sweep's state (pg-ttl orphans status) --

# Blocks read per range for an estimate: a range of at most this many is counted whole
# (exact), a larger one from this many blocks spread over it, scaled to its size.
SAMPLE_BLOCKS = 8
SAMPLE_RANGES_PER_STATEMENT = 64
# The rows of the sampled blocks and their orphans, per range: a TID scan of every
# line pointer the blocks can hold, each row looked up in the parents as a run would.
SAMPLE = sql.SQL("""
SELECT CAST((CAST(CAST(ctid AS pg_catalog.text) AS pg_catalog.point))[0] AS pg_catalog.int8) / {rb},
       count(*), count(*) FILTER (WHERE {cond})
  FROM ONLY {t} WHERE ctid OPERATOR(pg_catalog.=) ANY (CAST({tids} AS pg_catalog.tid[]))
 GROUP BY 1
""")


@dataclass
class RangeEstimate:
    """What a run now would find in one block range of a unit."""

    range_no: int
    first_block: int
    end_block: int
    rows: int  # rows in the range
    orphans: int  # of them, orphans a run now would delete
    exact: bool  # every block counted; otherwise scaled from SAMPLE_BLOCKS of them


def estimate_ranges(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate,
                    unit: Unit) -> list[RangeEstimate]:
    """Per block range of the unit (of range_bytes, as a sweep would cut it now): its rows
    and the orphans a run now would delete, counted in SAMPLE_BLOCKS blocks of it. Runs
    the orphan condition: call it as the table's owner. Reads at most SAMPLE_BLOCKS
    blocks a range, never a scan of the unit."""
    row = conn.execute(SIZE, {"unit": unit.relid, "policy": policy.relid}).fetchone()
    if row is None or row[0] is None or row[2] is None:
        return []
    nblocks, range_blocks = int(row[0]), max(1, int(row[2]))
    bs = conn.execute("SELECT pg_catalog.current_setting('block_size')::int").fetchone()
    per_page = (int(bs[0]) - 24) // 28 if bs else 291  # MaxHeapTuplesPerPage
    ranges: list[tuple[int, int, list[int]]] = []
    for n in range(-(-nblocks // range_blocks)):
        lo, hi = n * range_blocks, min((n + 1) * range_blocks, nblocks)
        size = hi - lo
        picked = list(range(lo, hi)) if size <= SAMPLE_BLOCKS else \
            sorted({lo + (2 * i + 1) * size // (2 * SAMPLE_BLOCKS) for i in range(SAMPLE_BLOCKS)})
        ranges.append((lo, hi, picked))
    counted: dict[int, tuple[int, int]] = {}
    for first in range(0, len(ranges), SAMPLE_RANGES_PER_STATEMENT):  # a few MB of tids at most a statement
        tids = "{" + ",".join(f'"({b},{o})"' for _, _, picked in ranges[first:first + SAMPLE_RANGES_PER_STATEMENT]
                              for b in picked for o in range(1, per_page + 1)) + "}"
        counted.update({int(r): (int(rows), int(orphans)) for r, rows, orphans in execute_plain(conn, SAMPLE.format(
            rb=sql.Literal(range_blocks), cond=pred.expired, t=unit.ident, tids=sql.Literal(tids)))})
    out: list[RangeEstimate] = []
    for n, (lo, hi, picked) in enumerate(ranges):
        rows, orphans = counted.get(n, (0, 0))
        scale = (hi - lo) / len(picked)
        out.append(RangeEstimate(n, lo, hi, round(rows * scale), round(orphans * scale), len(picked) == hi - lo))
    return out


def execute_plain(conn: psycopg.Connection[Any], query: sql.Composed) -> list[tuple[Any, ...]]:
    # without parameters: a '%' in a name or the condition is no placeholder
    return conn.execute(query).fetchall()


@dataclass
class SweepState:
    """Where a unit's latest sweep stands, and the unit's last orphan run."""

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
  FROM ttl.orphan_range o
 WHERE o.unit_relid = %(unit)s
   AND o.sweep = (SELECT max(x.sweep) FROM ttl.orphan_range x WHERE x.unit_relid = %(unit)s)
 GROUP BY o.range_no ORDER BY o.range_no
"""
LAST_RUN = """
SELECT u.run_id, u.status, u.finished_at, u.rows_deleted, u.error FROM ttl.run_unit u
 WHERE u.unit_relid = %(unit)s AND u.action = 'orphans' ORDER BY u.run_id DESC LIMIT 1
"""


def sweep_state(conn: psycopg.Connection[Any], unit: Unit) -> SweepState:
    """The unit's latest sweep: ranges done, given up (RANGE_ATTEMPTS failures) with
    their errors, failing still, being worked on; and its last run's outcome."""
    state = SweepState(unit.name)
    for range_no, sweep, blocks, range_blocks, started, ok, failures, error, running in conn.execute(
            SWEEP_RANGES, {"unit": unit.relid}).fetchall():
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
    last = conn.execute(LAST_RUN, {"unit": unit.relid}).fetchone()
    if last is not None:
        state.last_run, state.last_status, state.last_finished_at = int(last[0]), str(last[1]), last[2]
        state.last_deleted, state.last_error = int(last[3]), last[4]
    return state


@dataclass
class OrphanReport:
    """One orphan policy as pg-ttl orphans status / plan show it."""

    table: str
    parents: str  # as TTL DDL spells them: 'public.metadata(hash)'
    min_age: str
    age_column: str | None  # None: the transactions' ids tell a row's age (the xid clock)
    waiting: str | None  # why a run now would delete nothing yet
    units: list[SweepState]
    ranges: dict[str, list[RangeEstimate]]  # per unit, when estimated


REPORT = """
SELECT (SELECT v.value FROM ttl._orphan_values(o.relid) v WHERE v.option = 'ttl_orphan_of'), o.min_age::text,
       ttl._attname(o.relid, o.age_attnum)::text, ttl.orphans_waiting(o.relid, %(cutoff)s)
  FROM ttl.orphan_policy o WHERE o.relid = %(t)s
"""


def report(conn: psycopg.Connection[Any], tables: list[int] | None, estimate: bool) -> list[OrphanReport]:
    """Each orphan policy of ``tables`` (None: every one the caller may act for): the
    rule that tells a row's age, each leaf's sweep and last run, and (``estimate``)
    each range's orphans estimated as a run now would find them. Reads only."""
    from pg_ttl.expire import owner
    from pg_ttl.expire.plan import _reading

    out: list[OrphanReport] = []
    with _reading(conn) as cutoff:
        for policy in load_orphan_policies(conn, tables):
            if tables is not None and policy.relid not in tables:
                continue  # a child of a table asked for: reported with its own table
            if tables is None and not owner.can_act_as(conn, policy.owner):
                continue
            row = conn.execute(REPORT, {"t": policy.relid, "cutoff": cutoff}).fetchone()
            assert row is not None
            units = orphan_units(conn, policy)
            rep = OrphanReport(policy.name, str(row[0]), str(row[1]), row[2], row[3],
                               [sweep_state(conn, u) for u in units], {})
            if estimate:
                pred = orphan_predicate(conn, policy, cutoff)
                owner.become(conn, policy.owner, policy.name, local=True)
                conn.execute("SELECT pg_catalog.set_config('search_path', %s, true)", (pred.search_path,))
                rep.ranges = {u.name: estimate_ranges(conn, policy, pred, u) for u in units}
                owner.restore(conn, local=True)
            out.append(rep)
    return out
