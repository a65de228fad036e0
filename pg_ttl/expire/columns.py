"""Column TTL in the engine: expired values become NULL (or the column DEFAULT); rows stay.

Each batch is one statement on one block range of one leaf partition
(``ttl.null_expired_values`` in sql/76_column_nulling.sql): it takes the due
rows of those blocks ``FOR UPDATE SKIP LOCKED`` and re-checks the expiry in the
UPDATE itself, so a value rewritten in between is kept and the engine never
waits on an application's row lock. Rows that are not due are never written.
Each range holds about ``select_batch_size`` rows (the rows examined per step),
so a statement changes at most that many and a pass reads each block once (a
batch that searched from the start again would rescan every value nulled
before it).

Two entry points: :func:`null_unit`, which the engine calls for tables with a
table TTL (after a unit's expired rows are deleted, its expired values are
nulled while the unit is still claimed), and :func:`expire_column_only` for
tables that have column TTLs only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import psycopg

from pg_ttl.expire import history, owner
from pg_ttl.expire.context import RateLimiter, UnitContext
from pg_ttl.expire.pace import Pace
from pg_ttl.expire.results import TableResult, UnitResult, error_text
from pg_ttl.wakeup import StopRequest

COLUMNS = """
SELECT a.attname FROM ttl.column_policy cp
  JOIN pg_catalog.pg_attribute a ON a.attrelid = cp.relid AND a.attnum = cp.attnum AND NOT a.attisdropped
 WHERE cp.relid = %s ORDER BY cp.attnum
"""
# Names travel as values and are quoted by the function: no name in the statement text,
# where psycopg would read a '%' in it as a placeholder.
NULL_BATCH = "SELECT ttl.null_expired_values(%s::oid::regclass, %s::oid::regclass, %s, %s, %s, %s)"
# A CQL-style table (sql/73_value_ttls.sql): every value column in one statement per range.
CELLS = "SELECT value_ttls FROM ttl.policy WHERE relid = %s"
NULL_CELLS = "SELECT ttl.null_expired_cells(%s::oid::regclass, %s::oid::regclass, %s, %s, %s)"
ACCOUNT = "UPDATE ttl.run_unit SET values_nulled = values_nulled + %s WHERE run_id = %s AND unit_relid = %s"
# The unit's size in blocks now, and its rows per block as of the last ANALYZE.
SIZE = """
SELECT pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int8,
       CASE WHEN c.relpages > 0 AND c.reltuples > 0 THEN c.reltuples / c.relpages END
  FROM pg_catalog.pg_class c WHERE c.oid = %s
"""
# Tables with column TTLs and no table TTL (the engine's units cover the others).
COLUMN_ONLY = """
SELECT DISTINCT cp.relid, n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner),
       ttl._table_search_path(cp.relid)
  FROM ttl.column_policy cp
  JOIN pg_catalog.pg_class c ON c.oid = cp.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE NOT EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = cp.relid)
   AND (%s::oid[] IS NULL OR cp.relid = ANY(%s::oid[]))
 ORDER BY n.nspname, c.relname
"""
# pg_partition_tree() is empty for a plain table: then the table is its own leaf.
LEAVES = """
SELECT t.relid::oid, n.nspname, c.relname
  FROM (SELECT relid, isleaf FROM pg_catalog.pg_partition_tree(%(relid)s::oid::regclass)
        UNION ALL
        SELECT %(relid)s::oid::regclass, true
         WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_partition_tree(%(relid)s::oid::regclass))) t
  JOIN pg_catalog.pg_class c ON c.oid = t.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE t.isleaf AND c.relkind = 'r'
 ORDER BY c.relname
"""


def null_batches(conn: psycopg.Connection[Any], table_relid: int, unit_relid: int, batch_size: int,
                 cutoff: datetime, *, run_id: int | None = None, stop: StopRequest | None = None,
                 limiter: RateLimiter | None = None) -> Iterator[int]:
    """Null the expired values of every TTL'd column of one table or leaf partition,
    yielding the number of values changed by each committed batch.

    ``conn`` is in autocommit mode: each batch (and its accounting in
    ``ttl.run_unit``) is one short transaction.
    """
    row = conn.execute(SIZE, (unit_relid,)).fetchone()
    if row is None or row[0] is None:  # dropped since it was listed (its size reads NULL once it is gone)
        return
    nblocks, per_block = int(row[0]), float(row[1] or 100.0)
    columns: list[str | None] = [c for (c,) in conn.execute(COLUMNS, (table_relid,)).fetchall()]
    cells = conn.execute(CELLS, (table_relid,)).fetchone()
    if cells is not None and cells[0]:
        columns = [None]  # all value columns at once
    full = max(1, math.ceil(batch_size / per_block))  # blocks holding about batch_size rows
    first = min(full, max(1, math.ceil(FIRST_BATCH_ROWS / per_block)))  # then grows while quick
    for column in columns:
        block, step = 0, first
        while block < nblocks:
            if stop is not None and stop.is_set():
                return
            upto = min(nblocks, block + step)
            started = time.monotonic()
            with conn.transaction():
                if column is None:
                    done = conn.execute(NULL_CELLS, (table_relid, unit_relid, cutoff, block, upto)).fetchone()
                else:
                    done = conn.execute(NULL_BATCH, (table_relid, unit_relid, column, cutoff, block, upto)).fetchone()
                n = int(done[0]) if done else 0
                if run_id is not None and n:
                    conn.execute(ACCOUNT, (n, run_id, unit_relid))
            step = next_step(step, full, time.monotonic() - started)
            yield n
            if limiter is not None:
                limiter.add(n)
            block = upto


# A nulling batch aims at a transaction this long at most: one that took longer is followed by
# a smaller range (a slow disk, a busy server, rows wider than the statistics said), one that
# took under half of it by a larger one, never above batch_size rows. The first range holds
# about FIRST_BATCH_ROWS rows: its time is not known before.
BATCH_TARGET_SECONDS = 0.1
FIRST_BATCH_ROWS = 1000


def next_step(step: int, full: int, took: float) -> int:
    """The next range's size in blocks, after one of ``step`` blocks took ``took`` seconds."""
    if took > BATCH_TARGET_SECONDS:
        return max(1, int(step * BATCH_TARGET_SECONDS / took))
    if took < BATCH_TARGET_SECONDS / 2:
        return min(full, step * 2)
    return step


def null_expired(conn: psycopg.Connection[Any], table_relid: int, unit_relid: int, batch_size: int,
                 cutoff: datetime, *, run_id: int | None = None, stop: StopRequest | None = None,
                 limiter: RateLimiter | None = None) -> int:
    """:func:`null_batches` to the end; returns the number of values changed."""
    return sum(null_batches(conn, table_relid, unit_relid, batch_size, cutoff, run_id=run_id, stop=stop,
                            limiter=limiter))


def null_unit(ctx: UnitContext) -> None:
    """After a unit's expired rows are deleted: its expired column values, counted in
    ``ctx.values_nulled`` batch by batch (exact even if a later batch fails)."""
    for n in null_batches(ctx.conn, ctx.policy.relid, ctx.unit.relid, ctx.policy.select_batch_size,
                          ctx.pred.cutoff, run_id=ctx.run_id, stop=ctx.stop, limiter=ctx.delete_limiter):
        ctx.values_nulled += n


def expire_column_only(conn: psycopg.Connection[Any], relids: Sequence[int] | None, cutoff: datetime,
                       stop: StopRequest | None = None, worker: str | None = None,
                       batch_size: int | None = None, pace: Pace | None = None) -> list[TableResult]:
    """One pass over the tables that have column TTLs but no table TTL, partition by partition;
    ``batch_size`` rows examined per step (default: the select_batch_size option's default)."""
    results: list[TableResult] = []
    ids = list(relids) if relids is not None else None
    for relid, schema, relname, owner_name, search_path in conn.execute(COLUMN_ONLY, (ids, ids)).fetchall():
        if stop is not None and stop.is_set():
            break
        if batch_size is None:
            row = conn.execute("SELECT default_value::int FROM ttl.options WHERE name = 'select_batch_size'").fetchone()
            batch_size = int(row[0]) if row else 10000
        name = f"{schema}.{relname}" if schema != "public" else str(relname)
        started = time.monotonic()
        # As the table's owner, as every run (its triggers and defaults run with its rights)
        try:
            owner.become(conn, owner_name, name, local=False)
        except owner.NotOwner as exc:
            results.append(TableResult(name, None, "failed", error=str(exc), duration=time.monotonic() - started))
            continue
        try:
            results.append(_null_table(conn, relid, name, search_path, batch_size, cutoff, stop, worker, pace))
        finally:
            owner.restore(conn, local=False, search_path=owner.SEARCH_PATH)
        results[-1].duration = time.monotonic() - started
    return results


def _null_table(conn: psycopg.Connection[Any], relid: int, name: str, search_path: str, batch_size: int,
                cutoff: datetime, stop: StopRequest | None, worker: str | None,
                pace: Pace | None) -> TableResult:
    """One column-only table's run, leaf by leaf (the session is its owner's, with its search_path)."""
    run_id = history.start_run(conn, relid, name, worker, cutoff, search_path=search_path)
    result = TableResult(name, run_id, "running")
    try:
        for leaf, leaf_schema, leaf_name in conn.execute(LEAVES, {"relid": relid}).fetchall():
            label = f"{leaf_schema}.{leaf_name}" if leaf_schema != "public" else str(leaf_name)
            result.add(_null_leaf(conn, name, run_id, relid, leaf, label, batch_size, cutoff, stop, pace))
        # The database judges the run from its units (ttl._finish_run).
        recorded = history.finish_run(conn, run_id, None)
        if recorded is None:  # the table changed owner during the run: its history is the new owner's
            recorded, result.error = history.close_run_after_owner_change(conn, run_id)
        result.status = recorded
        if result.status == "failed" and result.error is None:
            result.error = result.first_failure()
    except BaseException as exc:
        if not conn.broken:
            result.status, result.error = "failed", error_text(exc)
            history.close_failed_run(conn, run_id, result.error)
        raise
    return result


def _null_leaf(conn: psycopg.Connection[Any], table: str, run_id: int, relid: int, leaf: int, label: str,
               batch_size: int, cutoff: datetime, stop: StopRequest | None, pace: Pace | None) -> UnitResult:
    started = time.monotonic()
    res = UnitResult(table, label, "delete", 0, 0, "ok", None, 0.0, relid=leaf)
    # claimed and started, or skipped with the reason recorded (sql/50_history.sql)
    with history.claiming(conn, leaf):
        row = conn.execute("SELECT ttl._begin_unit(%s, %s, %s, %s, 'delete', %s, NULL, true)",
                           (run_id, relid, leaf, label, cutoff)).fetchone()
    if row is not None and row[0] is not None:
        res.action, res.status, res.error = "skip", "skipped", str(row[0])
        return res
    if pace is not None:
        pace.unit_started()
    try:
        for n in null_batches(conn, relid, leaf, batch_size, cutoff, run_id=run_id, stop=stop,
                              limiter=RateLimiter(0, stop, pace)):
            res.values_nulled += n
        if stop is not None and stop.is_set():
            res.status = "partial"
    except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
        res.status, res.error = "timeout", error_text(exc)
    except psycopg.Error as exc:
        if conn.broken:
            raise
        res.status, res.error = "failed", error_text(exc)
    except BaseException as exc:
        res.status, res.error = "failed", error_text(exc)
        raise
    finally:
        if pace is not None:
            pace.unit_ended()
        if not conn.broken:
            conn.execute("SELECT ttl._end_unit(%s, %s, %s, %s, true)", (run_id, leaf, res.status, res.error))
        res.duration = time.monotonic() - started
    return res
