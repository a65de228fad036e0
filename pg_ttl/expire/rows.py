"""Two-phase row deletion of one unit (a leaf partition or a plain table).

Phase 1 selects the next ``select_batch_size`` candidates and cuts them into
ranges of at most ``delete_batch_size`` candidates: key ranges over an index on
the TTL column when there is one, else ctid block ranges. Only range bounds
travel to the client, never the keys themselves (key round trips cost 3-10x,
see DESIGN.md).

Phase 2 deletes one range per statement with the expiry predicate re-checked in
that statement, so a row updated since phase 1 to a later expiry is kept. The
same statement adds to the unit's counters and moves its checkpoint
(``WITH d AS (DELETE ...) UPDATE ttl.run_unit``), so accounting is exact and a
killed run resumes after its last committed range. It runs under the short
``row_lock_timeout``: a range that meets an application's row lock is redone
once with ``FOR UPDATE SKIP LOCKED`` (slower, so only there), leaving the
locked rows for the next run. The engine never waits on an application lock
longer than that timeout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from pg_ttl.expire.context import UnitContext

TTL_INDEX = """
SELECT ic.relname FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_catalog.pg_am am ON am.oid = ic.relam
  JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
 WHERE i.indrelid = %s AND i.indisvalid AND i.indisready AND i.indpred IS NULL
   AND am.amname = 'btree' AND a.attname = %s
 LIMIT 1
"""
SIZE = """
SELECT pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int8,
       c.reltuples, c.relpages
  FROM pg_catalog.pg_class c WHERE c.oid = %s
"""
ACCOUNT = """
UPDATE ttl.run_unit SET rows_deleted = rows_deleted + (SELECT count(*) FROM d),
       rows_selected = rows_selected + {selected}, checkpoint = {checkpoint}
 WHERE run_id = {run_id} AND unit_relid = {unit}
RETURNING (SELECT count(*) FROM d)
"""


class UnitTimeout(Exception):
    """lock_timeout or statement_timeout hit: the unit is skipped for this run."""


@dataclass
class Chunk:
    """One phase-2 range: ``where`` bounds it, ``checkpoint`` is where to resume after it."""

    where: sql.Composable
    selected: int
    checkpoint: dict[str, Any]


def choose_strategy(ctx: UnitContext) -> str:
    if ctx.pred.column is None or ctx.policy.column is None:
        return "ctid"
    row = ctx.conn.execute(TTL_INDEX, (ctx.unit.relid, ctx.policy.column)).fetchone()
    return "index" if row else "ctid"


def delete_rows(ctx: UnitContext, strategy: str) -> str:
    """Delete the unit's expired rows; returns 'ok' or 'partial' (stopped); raises UnitTimeout."""
    batches = _index_batches(ctx) if strategy == "index" else _ctid_batches(ctx)
    for chunks in batches:
        if not chunks:
            continue
        # Phase 2 only runs under the short row_lock_timeout (session setting, one
        # statement per transaction); phase 1 and the rest under lock_timeout.
        _set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
        try:
            for chunk in chunks:
                _delete_chunk(ctx, chunk)
                if ctx.stopping():
                    return "partial"
        finally:
            _set_lock_timeout(ctx, ctx.settings.lock_timeout)
        if ctx.stopping():
            return "partial"
    return "ok"


def _set_lock_timeout(ctx: UnitContext, value: str) -> None:
    if not ctx.conn.broken:
        ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, false)", (value,))


# -- phase 1 --------------------------------------------------------------------

def _index_batches(ctx: UnitContext) -> Any:
    """Key ranges over the TTL column's index, (after, k1], (k1, k2], ... up to the threshold.

    Ties at a range end fall into that range, so a range may exceed
    delete_batch_size when many rows share one value (statement_timeout bounds it).
    """
    pred, policy, t = ctx.pred, ctx.policy, ctx.unit.ident
    assert pred.column is not None and pred.bound is not None
    after: str | None = (ctx.checkpoint or {}).get("after")
    while not ctx.stopping():
        lower = sql.SQL(" AND {} > {}").format(pred.column, pred.cast(sql.Literal(after))) if after else sql.SQL("")
        query = sql.SQL(
            "SELECT CAST(k AS text), n, total FROM ("
            " SELECT k, row_number() OVER (ORDER BY k) AS n, count(*) OVER () AS total FROM ("
            "  SELECT {col} AS k FROM ONLY {t} WHERE {bound}{lower} ORDER BY {col} LIMIT {limit}) s) x"
            " WHERE n % {dbs} = 0 OR n = total ORDER BY n"
        ).format(col=pred.column, t=t, bound=pred.bound, lower=lower,
                 limit=sql.Literal(policy.select_batch_size), dbs=sql.Literal(policy.delete_batch_size))
        rows = _run(ctx, query).fetchall()
        if not rows:
            return
        chunks: list[Chunk] = []
        prev_n = 0
        for key, n, _total in rows:
            low = sql.SQL("{} > {} AND ").format(pred.column, pred.cast(sql.Literal(after))) if after else sql.SQL("")
            where = sql.SQL("{}{} <= {}").format(low, pred.column, pred.cast(sql.Literal(key)))
            chunks.append(Chunk(where, int(n) - prev_n, {"strategy": "index", "after": key}))
            prev_n, after = int(n), str(key)
        ctx.select_limiter.add(prev_n)
        yield chunks
        if int(rows[-1][2]) < policy.select_batch_size:
            return


def _ctid_batches(ctx: UnitContext) -> Any:
    """Block ranges of about select_batch_size rows, cut at every delete_batch_size-th
    candidate's ctid (a TID range scan reads only the blocks of the range)."""
    policy, t = ctx.policy, ctx.unit.ident
    row = ctx.conn.execute(SIZE, (ctx.unit.relid,)).fetchone()
    assert row is not None
    nblocks, reltuples, relpages = int(row[0]), float(row[1]), int(row[2])
    per_block = reltuples / relpages if relpages > 0 and reltuples > 0 else 100.0
    step = max(1, math.ceil(policy.select_batch_size / per_block))
    cp = ctx.checkpoint if (ctx.checkpoint or {}).get("strategy") == "ctid" else None
    # Resume at the first tuple after the last committed range, up to the old end
    # (rows that arrived since are new; a later run sees them).
    position, end = (str(cp["from"]), int(cp["end"])) if cp else ("(0,0)", nblocks)
    block = _block_of(position)
    while block < end and not ctx.stopping():
        hi = min(end, block + step)
        hi_tid = f"({hi},0)"
        query = sql.SQL(
            "SELECT CAST(ctid AS text), n, total FROM ("
            " SELECT ctid, row_number() OVER (ORDER BY ctid) AS n, count(*) OVER () AS total FROM ONLY {t}"
            "  WHERE ctid >= CAST({lo} AS tid) AND ctid < CAST({hi} AS tid) AND {expired}) s"
            " WHERE n % {dbs} = 0 OR n = total ORDER BY n"
        ).format(t=t, lo=sql.Literal(position), hi=sql.Literal(hi_tid), expired=ctx.pred.expired,
                 dbs=sql.Literal(policy.delete_batch_size))
        marks = _run(ctx, query).fetchall()
        chunks: list[Chunk] = []
        prev_n = 0
        for i, (tid, n, _total) in enumerate(marks):
            nxt = hi_tid if i == len(marks) - 1 else _next_tid(str(tid))
            where = sql.SQL("ctid >= CAST({} AS tid) AND ctid < CAST({} AS tid)").format(
                sql.Literal(position), sql.Literal(_next_tid(str(tid))))
            chunks.append(Chunk(where, int(n) - prev_n, {"strategy": "ctid", "from": nxt, "end": end}))
            prev_n, position = int(n), nxt
        ctx.select_limiter.add(prev_n)
        if not chunks:
            # Nothing here: still move the checkpoint, so a resume skips this range.
            _run(ctx, sql.SQL("UPDATE ttl.run_unit SET checkpoint = {} WHERE run_id = {} AND unit_relid = {}").format(
                sql.Literal(Jsonb({"strategy": "ctid", "from": hi_tid, "end": end})), sql.Literal(ctx.run_id),
                sql.Literal(ctx.unit.relid)))
        yield chunks
        position, block = hi_tid, hi


def _block_of(tid: str) -> int:
    return int(tid.strip("()").split(",")[0])


def _next_tid(tid: str) -> str:
    """The tid right after ``tid`` (offsets start at 1, so (b, o+1) is valid even past the last one)."""
    block, offset = tid.strip("()").split(",")
    return f"({block},{int(offset) + 1})"


# -- phase 2 --------------------------------------------------------------------

def _delete_chunk(ctx: UnitContext, chunk: Chunk) -> None:
    t, expired = ctx.unit.ident, ctx.pred.expired
    fast = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {expired} RETURNING 1").format(
        t=t, where=chunk.where, expired=expired)
    try:
        deleted = _account(ctx, fast, chunk)
    except errors.LockNotAvailable:
        # An application holds a row (or the table) locked: redo this range
        # without waiting on row locks; locked rows are left for the next run.
        skip = sql.SQL(
            "DELETE FROM ONLY {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY {t} WHERE {where} AND {expired}"
            " FOR UPDATE SKIP LOCKED)) AND {expired} RETURNING 1"
        ).format(t=t, where=chunk.where, expired=expired)
        deleted = _account(ctx, skip, chunk, lock_timeout=ctx.settings.lock_timeout)
    ctx.selected += chunk.selected
    ctx.deleted += deleted
    ctx.progress.batch_done(ctx.policy.name, ctx.unit.name, chunk.selected, deleted)
    ctx.delete_limiter.add(deleted)


def _account(ctx: UnitContext, delete: sql.Composable, chunk: Chunk, lock_timeout: str | None = None) -> int:
    stmt = sql.SQL("WITH d AS ({}) ").format(delete) + sql.SQL(ACCOUNT).format(
        selected=sql.Literal(chunk.selected), checkpoint=sql.Literal(Jsonb(chunk.checkpoint)),
        run_id=sql.Literal(ctx.run_id), unit=sql.Literal(ctx.unit.relid))
    if lock_timeout is None:
        row = _run(ctx, stmt, reraise_lock=True).fetchone()
    else:
        with ctx.conn.transaction():
            ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (lock_timeout,))
            row = _run(ctx, stmt).fetchone()
    return int(row[0]) if row else 0


def _run(ctx: UnitContext, query: sql.Composed | sql.SQL, reraise_lock: bool = False) -> psycopg.Cursor[Any]:
    try:
        return ctx.conn.execute(query)
    except errors.LockNotAvailable as exc:
        if reraise_lock:
            raise
        raise UnitTimeout(f"lock_timeout ({ctx.settings.lock_timeout}) reached: a lock on the table is held "
                          "by another session") from exc
    except errors.QueryCanceled as exc:
        raise UnitTimeout(f"statement_timeout ({ctx.settings.statement_timeout}) reached") from exc
