"""Two-phase row deletion of one unit (a leaf partition or a plain table).

Phase 1 takes the next ``select_batch_size`` candidates as ranges of at most
``delete_batch_size`` rows: key ranges over a btree on the TTL column (one
query returns every ``delete_batch_size``-th key), or ctid block ranges sized
from the expired density seen so far (no query at all: reading every row to
count candidates first would double the cost of a raw DELETE). ``choose_strategy``
picks between them from the planner's statistics. Only range bounds travel to
the client, never the keys themselves (key round trips cost 3-10x, see
DESIGN.md).

Phase 2 deletes one range per statement with the expiry predicate re-checked in
that statement, so a row updated since phase 1 to a later expiry is kept.
Ranges are grouped into transactions of at most ``GROUP_SECONDS`` with one
update of the unit's counters and checkpoint each, committed together with the
deletes: counts are exact and a killed run resumes after its last committed
range. Deletes run under the short ``row_lock_timeout``: a group that meets an
application's row lock is rolled back and redone range by range, each range
falling back to ``FOR UPDATE SKIP LOCKED`` (slower, so only there) and leaving
the locked rows for the next run. The engine never waits on an application
lock longer than that timeout.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
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
STATS = """
SELECT c.reltuples, s.correlation
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = %s
 WHERE c.oid = %s
"""
ACCOUNT_GROUP = """
UPDATE ttl.run_unit SET rows_deleted = rows_deleted + %(deleted)s, rows_selected = rows_selected + %(selected)s,
       checkpoint = %(checkpoint)s
 WHERE run_id = %(run_id)s AND unit_relid = %(unit)s
"""
GROUP_SECONDS = 0.05
SIZE = """
SELECT pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int8,
       c.reltuples, c.relpages
  FROM pg_catalog.pg_class c WHERE c.oid = %s
"""
ACCOUNT = """
UPDATE ttl.run_unit SET rows_deleted = rows_deleted + (SELECT count(*) FROM d),
       rows_selected = rows_selected + coalesce(%(selected)s::int8, (SELECT count(*) FROM d)),
       checkpoint = %(checkpoint)s
 WHERE run_id = %(run_id)s AND unit_relid = %(unit)s
RETURNING (SELECT count(*) FROM d)
"""


class UnitTimeout(Exception):
    """lock_timeout or statement_timeout hit: the unit is skipped for this run."""


@dataclass
class Chunk:
    """One phase-2 range: ``where`` bounds it (a template over ``params``, so that the
    statement text repeats and psycopg prepares it once per unit), ``checkpoint`` is
    where to resume after it; ``selected`` < 0: as many as deleted."""

    where: sql.Composable
    params: dict[str, Any]
    selected: int
    checkpoint: dict[str, Any]


# When key ranges over the TTL index beat a ctid sweep of the whole unit, by the
# share of rows expired (measured on 2M rows of 100 B, PG 15, this 2-core machine):
# in insertion order (|correlation| ~1) the index wins up to ~20% (2%: 0.05 s vs
# 0.34 s; 20%: 0.33 s vs 0.32 s; 50%: 0.80 s vs 0.49 s); in random order every
# deleted row is a random heap page and the index loses from ~2% on (5%: 0.51 s vs
# 0.31 s; 50%: 2.5 s vs 0.53 s).
INDEX_MAX_SHARE = 0.02
INDEX_MAX_SHARE_CORRELATED = 0.20
CORRELATED = 0.9


def choose_strategy(ctx: UnitContext, expired_estimate: int | None) -> str:
    """``index`` (key ranges over a btree on the TTL column) when it touches few heap
    pages, else ``ctid`` (block ranges, one sequential sweep); the ``row_strategy``
    setting can force either."""
    if ctx.pred.column is None or ctx.policy.column is None or ctx.settings.row_strategy == "ctid":
        return "ctid"
    if ctx.conn.execute(TTL_INDEX, (ctx.unit.relid, ctx.policy.column)).fetchone() is None:
        return "ctid"
    if ctx.settings.row_strategy == "index":
        return "index"
    row = ctx.conn.execute(STATS, (ctx.policy.column, ctx.unit.relid)).fetchone()
    reltuples, correlation = (float(row[0]), row[1]) if row else (-1.0, None)
    if reltuples <= 0 or expired_estimate is None:
        return "index"  # never analyzed: no reason to think it is dense
    share = expired_estimate / reltuples
    correlated = correlation is not None and abs(float(correlation)) >= CORRELATED
    return "index" if share <= (INDEX_MAX_SHARE_CORRELATED if correlated else INDEX_MAX_SHARE) else "ctid"


def delete_rows(ctx: UnitContext, strategy: str) -> str:
    """Delete the unit's expired rows; returns 'ok' or 'partial' (stopped); raises UnitTimeout."""
    batches = _index_batches(ctx) if strategy == "index" else _ctid_batches(ctx)
    try:
        for chunks in batches:
            # Phase 2 runs under the short row_lock_timeout (a session setting);
            # phase 1 and everything else under lock_timeout.
            _set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
            _delete_batch(ctx, iter(chunks))
            if ctx.stopping():
                return "partial"
    finally:
        _set_lock_timeout(ctx, ctx.settings.lock_timeout)
    return "ok"


def _delete_batch(ctx: UnitContext, chunks: Iterator[Chunk]) -> None:
    """Phase 2 of one select batch: one DELETE statement per chunk, several chunks per
    transaction up to GROUP_SECONDS (one accounting update and one commit per
    transaction instead of per chunk: at 1000-row chunks they cost as much as the
    delete). A rate limit makes every chunk its own transaction, so waits fall
    between transactions at chunk granularity."""
    current = next(chunks, None)
    while current is not None and not ctx.stopping():
        group: list[tuple[Chunk, int]] = []
        started = time.monotonic()
        try:
            with ctx.conn.transaction():
                while current is not None:
                    n = _delete_plain(ctx, current)
                    group.append((current, n))
                    ctx.deleted += n  # provisional (the ctid ranges size themselves by it)
                    current = None
                    if (ctx.stopping() or ctx.delete_limiter.rate > 0 or ctx.select_limiter.rate > 0
                            or time.monotonic() - started >= GROUP_SECONDS):
                        break
                    current = next(chunks, None)
                _account_group(ctx, group)
        except errors.LockNotAvailable:
            # An application holds a row locked: the transaction is gone; redo its
            # chunks one per transaction, the one that met the lock straight with
            # SKIP LOCKED, the others falling back to it if needed.
            ctx.deleted -= sum(n for _, n in group)
            for chunk, _ in group:
                _delete_chunk(ctx, chunk)
            if current is not None:
                _delete_chunk(ctx, current, skip_locked=True)
            current = next(chunks, None)
            continue
        except BaseException:
            ctx.deleted -= sum(n for _, n in group)
            raise
        for chunk, n in group:
            _counted(ctx, chunk, n)
        if current is None:
            current = next(chunks, None)


def _counted(ctx: UnitContext, chunk: Chunk, deleted: int) -> None:
    """A committed range: progress, and the rate limiters' waits (between transactions).
    A ctid range is selected by its delete, so it also counts against select_rate_limit."""
    selected = deleted if chunk.selected < 0 else chunk.selected
    ctx.selected += selected
    ctx.progress.batch_done(ctx.policy.name, ctx.unit.name, selected, deleted)
    if chunk.selected < 0:
        ctx.select_limiter.add(deleted)
    ctx.delete_limiter.add(deleted)


def _delete_plain(ctx: UnitContext, chunk: Chunk) -> int:
    t, expired = _escaped(ctx)
    stmt = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {expired}").format(t=t, where=chunk.where, expired=expired)
    return _run(ctx, stmt, chunk.params, reraise_lock=True).rowcount


def _account_group(ctx: UnitContext, group: list[tuple[Chunk, int]]) -> None:
    deleted = sum(n for _, n in group)
    selected = sum(n if c.selected < 0 else c.selected for c, n in group)
    _run(ctx, sql.SQL(ACCOUNT_GROUP), {"deleted": deleted, "selected": selected,
                                       "checkpoint": Jsonb(group[-1][0].checkpoint), "run_id": ctx.run_id,
                                       "unit": ctx.unit.relid})


def _set_lock_timeout(ctx: UnitContext, value: str) -> None:
    """Change the session's lock_timeout, only when it differs (saves a round trip per batch)."""
    if not ctx.conn.broken and ctx.extra.get("lock_timeout", ctx.settings.lock_timeout) != value:
        ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, false)", (value,))
        ctx.extra["lock_timeout"] = value


# -- phase 1 --------------------------------------------------------------------

def _index_batches(ctx: UnitContext) -> Iterator[list[Chunk]]:
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
        _set_lock_timeout(ctx, ctx.settings.lock_timeout)
        rows = _run(ctx, query).fetchall()
        if not rows:
            return
        chunks: list[Chunk] = []
        prev_n = 0
        upper = sql.SQL("{} <= {}").format(pred.column, pred.cast(sql.Placeholder("hi")))
        both = sql.SQL("{} > {} AND {}").format(pred.column, pred.cast(sql.Placeholder("lo")), upper)
        for key, n, _total in rows:
            chunks.append(Chunk(both if after else upper, {"lo": after, "hi": key}, int(n) - prev_n,
                                {"strategy": "index", "after": key}))
            prev_n, after = int(n), str(key)
        ctx.select_limiter.add(prev_n)
        yield chunks
        if int(rows[-1][2]) < policy.select_batch_size:
            return


def _ctid_batches(ctx: UnitContext) -> Iterator[Iterator[Chunk]]:
    """Block ranges, selected without reading a row: each select batch is the next
    ~select_batch_size rows' worth of blocks, and each phase-2 range a part of it
    sized (from the expired density seen so far) to hold ~delete_batch_size
    expired rows; never more than the select batch. Reading every row twice (to
    count candidates first) would double the cost of a raw DELETE.
    """
    policy = ctx.policy
    row = ctx.conn.execute(SIZE, (ctx.unit.relid,)).fetchone()
    assert row is not None
    nblocks, reltuples, relpages = int(row[0]), float(row[1]), int(row[2])
    per_block = reltuples / relpages if relpages > 0 and reltuples > 0 else 100.0
    batch_blocks = max(1, math.ceil(policy.select_batch_size / per_block))
    cp = ctx.checkpoint if (ctx.checkpoint or {}).get("strategy") == "ctid" else None
    # Resume where the last committed range ended, up to the old end (rows that
    # arrived since are new; a later run sees them).
    state = {"block": float(_block_of(str(cp["from"])) if cp else 0), "density": per_block}
    end = int(cp["end"]) if cp else nblocks
    while state["block"] < end and not ctx.stopping():
        yield _ctid_chunks(ctx, state, min(end, int(state["block"]) + batch_blocks), end)


def _ctid_chunks(ctx: UnitContext, state: dict[str, float], batch_end: int, end: int) -> Iterator[Chunk]:
    """The phase-2 ranges of one select batch, each sized from the density seen so far."""
    while state["block"] < batch_end and not ctx.stopping():
        block = int(state["block"])
        blocks = min(batch_end - block, max(1, int(ctx.policy.delete_batch_size / max(state["density"], 0.01))))
        hi = block + blocks
        before = ctx.deleted
        yield Chunk(CTID_RANGE, {"lo": f"({block},0)", "hi": f"({hi},0)"}, -1,
                    {"strategy": "ctid", "from": f"({hi},0)", "end": end})
        # follow the density, at most doubling the range at a time
        state["density"] = max((ctx.deleted - before) / blocks, state["density"] / 2)
        state["block"] = hi


def _block_of(tid: str) -> int:
    return int(tid.strip("()").split(",")[0])


CTID_RANGE = sql.SQL("ctid >= CAST(%(lo)s AS tid) AND ctid < CAST(%(hi)s AS tid)")


# -- phase 2 --------------------------------------------------------------------

def _escaped(ctx: UnitContext) -> tuple[sql.SQL, sql.SQL]:
    """Table and predicate as SQL with any '%' doubled: statements with parameters
    treat '%' as a placeholder (an expression may use the modulo operator)."""
    cached = ctx.extra.get("escaped")
    if cached is None:
        cached = tuple(sql.SQL(part.as_string(ctx.conn).replace("%", "%%"))
                       for part in (ctx.unit.ident, ctx.pred.expired))
        ctx.extra["escaped"] = cached
    return cached


def _delete_chunk(ctx: UnitContext, chunk: Chunk, skip_locked: bool = False) -> None:
    """One range in its own transaction, counters included; ``skip_locked``: go straight
    to the SKIP LOCKED form (this range already met an application's row lock)."""
    t, expired = _escaped(ctx)
    deleted: int | None = None
    if not skip_locked:
        fast = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {expired} RETURNING 1").format(
            t=t, where=chunk.where, expired=expired)
        with contextlib.suppress(errors.LockNotAvailable):
            deleted = _account(ctx, fast, chunk)
    if deleted is None:
        # An application holds a row (or the table) locked: redo this range
        # without waiting on row locks; locked rows are left for the next run.
        skip = sql.SQL(
            "DELETE FROM ONLY {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY {t} WHERE {where} AND {expired}"
            " FOR UPDATE SKIP LOCKED)) AND {expired} RETURNING 1"
        ).format(t=t, where=chunk.where, expired=expired)
        deleted = _account(ctx, skip, chunk, lock_timeout=ctx.settings.lock_timeout)
    ctx.deleted += deleted
    _counted(ctx, chunk, deleted)


def _account(ctx: UnitContext, delete: sql.Composable, chunk: Chunk, lock_timeout: str | None = None) -> int:
    stmt = sql.SQL("WITH d AS ({}) ").format(delete) + sql.SQL(ACCOUNT)
    params = {**chunk.params, "selected": chunk.selected if chunk.selected >= 0 else None,
              "checkpoint": Jsonb(chunk.checkpoint), "run_id": ctx.run_id, "unit": ctx.unit.relid}
    if lock_timeout is None:
        row = _run(ctx, stmt, params, reraise_lock=True).fetchone()
    else:
        with ctx.conn.transaction():
            ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (lock_timeout,))
            row = _run(ctx, stmt, params).fetchone()
    return int(row[0]) if row else 0


def _run(ctx: UnitContext, query: sql.Composed | sql.SQL, params: dict[str, Any] | None = None,
         reraise_lock: bool = False) -> psycopg.Cursor[Any]:
    try:
        return ctx.conn.execute(query, params)
    except errors.LockNotAvailable as exc:
        if reraise_lock:
            raise
        raise UnitTimeout(f"lock_timeout ({ctx.settings.lock_timeout}) reached: a lock on the table is held "
                          "by another session") from exc
    except errors.QueryCanceled as exc:
        raise UnitTimeout(f"statement_timeout ({ctx.settings.statement_timeout}) reached") from exc
