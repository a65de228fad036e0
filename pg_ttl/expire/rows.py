"""Two-phase row deletion of one unit (a leaf partition or a plain table).

Phase 1 takes the next ``select_batch_size`` candidates as ranges of at most
``delete_batch_size`` rows: ranges in (TTL column, ctid) order over a btree on
the TTL column (one query returns every ``delete_batch_size``-th pair; the
ctid breaks ties, so a range holds at most that many rows even when many rows
share one expiry; a key whose rows fill a whole select batch is numbered in
block windows of the heap instead, as the index cannot give one key's rows in
ctid order without sorting them all), or ctid block ranges sized from the
expired density seen so far (no query at all: reading every row to count
candidates first would double the cost of a raw DELETE). ``choose_strategy`` picks between them from the
planner's statistics. Only range bounds travel to the client, never the keys
themselves.

Phase 2 deletes one range per statement with the expiry predicate re-checked in
that statement, so a row updated since phase 1 to a later expiry is kept.
Ranges are grouped into transactions of at most ``GROUP_SECONDS`` with one
update of the unit's counters and checkpoint each, committed together with the
deletes: counts are exact and a killed run resumes after its last committed
range. Deletes run under the short ``row_lock_timeout``: a group that meets an
application's row lock is rolled back and redone range by range, each range
falling back to ``FOR UPDATE SKIP LOCKED`` (slower, so only there) and leaving
the locked rows for the next run. The engine never waits on an application
lock longer than that timeout. A row the application moved to another
partition while we waited on it fails the statement with SQLSTATE 40001 even in
READ COMMITTED: the range is redone (a new statement no longer sees the row).

Statements that name the table, its columns or its expiry expression carry
their values as literals, never as parameters: with parameters psycopg reads
every '%' of the text as a placeholder, and names and expressions may hold one.
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
# Follows a DELETE ... RETURNING 1 named d; values are literals (see the module docstring).
ACCOUNT = sql.SQL("""
UPDATE ttl.run_unit SET rows_deleted = rows_deleted + (SELECT count(*) FROM d),
       rows_selected = rows_selected + coalesce(CAST({selected} AS pg_catalog.int8), (SELECT count(*) FROM d)),
       checkpoint = {checkpoint}
 WHERE run_id = {run_id} AND unit_relid = CAST({unit} AS pg_catalog.oid)
RETURNING (SELECT count(*) FROM d)
""")
# A range that keeps meeting rows moved to another partition (40001) is retried this
# many times, then left for the next run.
MOVED_RETRIES = 3
# Past every row of a key: the largest tid there is.
MAX_TID = "(4294967295,65535)"


class UnitTimeout(Exception):
    """lock_timeout or statement_timeout hit: the unit is skipped for this run."""


@dataclass
class Chunk:
    """One phase-2 range: ``where`` bounds it (values as literals), ``checkpoint`` is
    where to resume after it; ``selected`` < 0: as many as deleted."""

    where: sql.Composable
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
        except (errors.LockNotAvailable, errors.SerializationFailure) as exc:
            # An application holds a row locked, or moved a row we waited on to another
            # partition: the transaction is gone; redo its chunks one per transaction. The
            # chunk that met a lock goes straight to SKIP LOCKED, the others fall back to it
            # if needed; the one that met a moved row is simply retried.
            ctx.deleted -= sum(n for _, n in group)
            for chunk, _ in group:
                _delete_chunk(ctx, chunk)
            if current is not None:
                _delete_chunk(ctx, current, skip_locked=isinstance(exc, errors.LockNotAvailable))
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
    stmt = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {expired}").format(
        t=ctx.unit.ident, where=chunk.where, expired=ctx.pred.expired)
    return _run(ctx, stmt, reraise_lock=True).rowcount


def _account_group(ctx: UnitContext, group: list[tuple[Chunk, int]]) -> None:
    # No name or expression in this statement: parameters are safe here.
    deleted = sum(n for _, n in group)
    selected = sum(n if c.selected < 0 else c.selected for c, n in group)
    ctx.conn.execute(ACCOUNT_GROUP, {"deleted": deleted, "selected": selected,
                                     "checkpoint": Jsonb(group[-1][0].checkpoint), "run_id": ctx.run_id,
                                     "unit": ctx.unit.relid})


def _set_lock_timeout(ctx: UnitContext, value: str) -> None:
    """Change the session's lock_timeout, only when it differs (saves a round trip per batch)."""
    if not ctx.conn.broken and (ctx.lock_timeout or ctx.settings.lock_timeout) != value:
        ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, false)", (value,))
        ctx.lock_timeout = value


# -- phase 1 --------------------------------------------------------------------

# A position in (TTL column, ctid) order: a key and the ctid of a row with that key,
# or None for "past every row of that key".
Position = tuple[str, str | None]


def _op(op: str) -> sql.Composable:
    # Operators from pg_catalog whatever the search_path (as the predicate does).
    return sql.SQL("OPERATOR(pg_catalog.{})").format(sql.SQL(op))


def _tid(value: str) -> sql.Composable:
    return sql.SQL("CAST({} AS pg_catalog.tid)").format(sql.Literal(value))


def _after(ctx: UnitContext, pos: Position) -> sql.Composable:
    """Rows after ``pos``: an index range on the key (the row comparison's first column)."""
    key, tid = pos
    k = ctx.pred.cast(sql.Literal(key))
    if tid is None:
        return sql.SQL("{} {} {}").format(ctx.pred.column, _op(">"), k)
    return sql.SQL("ROW({}, ctid) {} ROW({}, {})").format(ctx.pred.column, _op(">"), k, _tid(tid))


def _key_range(ctx: UnitContext, lo: Position | None, hi: tuple[str, str]) -> sql.Composable:
    """Rows in (lo, hi]. Within one key a ctid range (a TID range scan: an index range
    on the key would read every row of the key to find these); across keys row
    comparisons (an index range on the key, reading at most the rows of its two ends)."""
    col = ctx.pred.column
    key, tid = hi
    if lo is not None and lo[0] == key and lo[1] is not None:
        return sql.SQL("{col} {eq} {k} AND ctid {gt} {lo} AND ctid {le} {hi}").format(
            col=col, eq=_op("="), k=ctx.pred.cast(sql.Literal(key)), gt=_op(">"), lo=_tid(lo[1]), le=_op("<="),
            hi=_tid(tid))
    upper = sql.SQL("ROW({}, ctid) {} ROW({}, {})").format(col, _op("<="), ctx.pred.cast(sql.Literal(key)),
                                                          _tid(tid))
    return upper if lo is None else sql.SQL("{} AND {}").format(_after(ctx, lo), upper)


# The next select_batch_size candidates in index order (no sort), cut to the keys they
# hold completely (all but the last key, unless the batch is the last one), numbered in
# (key, ctid) order; every delete_batch_size-th and the last become range ends. The
# first row (max key, min ctid, count) also tells whether one key fills the batch.
INDEX_BATCH = """
WITH s AS MATERIALIZED (
  SELECT {col} AS k, ctid AS c FROM ONLY {t} WHERE {bound}{lower} ORDER BY {col} LIMIT {sbs}),
m AS (SELECT max(k) AS mk, min(c) AS mc, count(*) AS cnt FROM s),
x AS (SELECT array_agg(k ORDER BY k, c) AS ks, array_agg(c ORDER BY k, c) AS cs
        FROM s, m WHERE s.k {lt} m.mk OR m.cnt < {sbs})
SELECT CAST(m.mk AS text), CAST(m.mc AS text), m.cnt, CAST(x.ks[g.i] AS text), CAST(x.cs[g.i] AS text), g.i
  FROM m CROSS JOIN x
  LEFT JOIN LATERAL (SELECT LEAST(n, cardinality(x.ks)) AS i
                       FROM generate_series({dbs}, cardinality(x.ks) + {dbs} - 1, {dbs}) AS n) g ON true
 ORDER BY g.i
"""


def _index_batches(ctx: UnitContext) -> Iterator[list[Chunk]]:
    """Ranges in (TTL column, ctid) order over the column's index: (after, p1], (p1, p2], ...
    up to the threshold, each of at most delete_batch_size rows whatever the data."""
    pred, policy, t = ctx.pred, ctx.policy, ctx.unit.ident
    assert pred.column is not None and pred.bound is not None
    cp = ctx.checkpoint or {}
    after: Position | None = None
    if cp.get("key") is not None:
        after = (str(cp["key"]), str(cp["ctid"]))
    elif cp.get("after") is not None:  # a checkpoint of an older version: whole keys
        after = (str(cp["after"]), None)
    sbs, dbs = policy.select_batch_size, policy.delete_batch_size
    while not ctx.stopping():
        lower = sql.SQL(" AND {}").format(_after(ctx, after)) if after else sql.SQL("")
        query = sql.SQL(INDEX_BATCH).format(col=pred.column, t=t, bound=pred.bound, lower=lower, lt=_op("<"),
                                            sbs=sql.Literal(sbs), dbs=sql.Literal(dbs))
        _set_lock_timeout(ctx, ctx.settings.lock_timeout)
        rows = _run(ctx, query).fetchall()
        max_key, min_tid, count = rows[0][0], rows[0][1], int(rows[0][2])
        if count == 0:
            return
        if rows[0][5] is None:
            # One key fills the whole select batch: ctid windows over its rows.
            if after is not None and after[0] == max_key and after[1] is not None:
                start = after[1]  # within the key a checkpoint stopped in
            else:
                start = f"({_block_of(min_tid)},0)"  # the block of the key's first row on
            yield from _tie_batches(ctx, str(max_key), start)
            after = (str(max_key), None)
            continue
        chunks: list[Chunk] = []
        prev_n = 0
        for *_, key, tid, n in rows:
            hi = (str(key), str(tid))
            chunks.append(Chunk(_key_range(ctx, after, hi), int(n) - prev_n,
                                {"strategy": "index", "key": hi[0], "ctid": hi[1]}))
            prev_n, after = int(n), hi
        ctx.select_limiter.add(prev_n)
        yield chunks
        if count < sbs:
            return


# The rows of one key in a block window, numbered in ctid order (a TID range scan:
# the index cannot give one key's rows in ctid order without sorting them all).
TIE_WINDOW = """
SELECT CAST(s.a[g.i] AS text), g.i FROM (
  SELECT array_agg(ctid ORDER BY ctid) AS a FROM ONLY {t}
   WHERE {col} {eq} {k} AND ctid {gt} {lo} AND ctid {lt} {hi}) s,
  LATERAL (SELECT LEAST(n, cardinality(s.a)) AS i
             FROM generate_series({dbs}, cardinality(s.a) + {dbs} - 1, {dbs}) AS n) g
 ORDER BY g.i
"""
# The largest ctid of one key: a btree built by PostgreSQL 12 or later keeps the rows of
# one key in ctid order, and a backward scan returns the last index tuple's ctids (a
# posting list, ascending) within its first block_size / 6 rows (more ctids than a page holds).
TIE_END = """
SELECT CAST(max(c) AS text) FROM (
  SELECT ctid AS c FROM ONLY {t} WHERE {col} {ge} {k} AND {col} {le} {k} ORDER BY {col} DESC
   LIMIT CAST(current_setting('block_size') AS int) / 6) s
"""
# How far a window may grow over blocks with few rows of the key, in base windows.
TIE_WINDOW_MAX = 16


def _tie_batches(ctx: UnitContext, key: str, start: str) -> Iterator[list[Chunk]]:
    """The rows of one key from ctid ``start`` (exclusive) on, as ranges of at most
    delete_batch_size rows: block windows of ~select_batch_size rows each up to the
    key's last row, so every statement stays short whatever the number of rows.

    Rows of the key outside the windows (only if the index is not in ctid order
    within a key, i.e. built before PostgreSQL 12, or rows written since) are left to
    the next run, whose first select batch starts at them.
    """
    t, col = ctx.unit.ident, ctx.pred.column
    k = ctx.pred.cast(sql.Literal(key))
    _set_lock_timeout(ctx, ctx.settings.lock_timeout)
    last = _run(ctx, sql.SQL(TIE_END).format(t=t, col=col, ge=_op(">="), le=_op("<="), k=k)).fetchone()
    if last is None or last[0] is None:
        return
    end = _block_of(str(last[0])) + 1
    size = ctx.conn.execute(SIZE, (ctx.unit.relid,)).fetchone()
    assert size is not None
    reltuples, relpages = float(size[1]), int(size[2])
    per_block = reltuples / relpages if relpages > 0 and reltuples > 0 else 100.0
    sbs = ctx.policy.select_batch_size
    base = max(1, math.ceil(sbs / per_block))
    blocks, lo, block = base, start, _block_of(start)
    while block < end and not ctx.stopping():
        upto = min(end, block + blocks)
        hi = f"({upto},0)"
        query = sql.SQL(TIE_WINDOW).format(t=t, col=col, eq=_op("="), k=k, gt=_op(">"), lo=_tid(lo), lt=_op("<"),
                                           hi=_tid(hi), dbs=sql.Literal(ctx.policy.delete_batch_size))
        _set_lock_timeout(ctx, ctx.settings.lock_timeout)
        rows = _run(ctx, query).fetchall()
        chunks: list[Chunk] = []
        prev: Position = (key, lo)
        prev_n = 0
        for tid, n in rows:
            chunks.append(Chunk(_key_range(ctx, prev, (key, str(tid))), int(n) - prev_n,
                                {"strategy": "index", "key": key, "ctid": str(tid)}))
            prev, prev_n = (key, str(tid)), int(n)
        # No row of the key past the last one numbered: the next window starts at the
        # window's end. Its size follows the key's density (few rows: grow; many: shrink).
        lo, block = hi, upto
        blocks = max(1, min(TIE_WINDOW_MAX * base, int(blocks * sbs / max(prev_n, sbs / 4))))
        if chunks:
            ctx.select_limiter.add(prev_n)
            yield chunks


def _ctid_batches(ctx: UnitContext) -> Iterator[Iterator[Chunk]]:
    """Block ranges, selected without reading a row: each select batch is the next
    ~select_batch_size rows' worth of blocks, and each phase-2 range a part of it
    sized (from the expired density seen so far) to hold ~delete_batch_size
    expired rows; never more than the select batch. Reading every row twice (to
    count candidates first) would double the cost of a raw DELETE.
    """
    policy = ctx.policy
    row = ctx.conn.execute(SIZE, (ctx.unit.relid,)).fetchone()
    if row is None:  # dropped since the unit was listed: the engine records it skipped
        raise errors.UndefinedTable(f"the partition {ctx.unit.name} was dropped during the run")
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
        where = sql.SQL("ctid {} {} AND ctid {} {}").format(_op(">="), _tid(f"({block},0)"), _op("<"),
                                                            _tid(f"({hi},0)"))
        yield Chunk(where, -1, {"strategy": "ctid", "from": f"({hi},0)", "end": end})
        # follow the density, at most doubling the range at a time
        state["density"] = max((ctx.deleted - before) / blocks, state["density"] / 2)
        state["block"] = hi


def _block_of(tid: str) -> int:
    return int(tid.strip("()").split(",")[0])


# -- phase 2 --------------------------------------------------------------------

def _delete_chunk(ctx: UnitContext, chunk: Chunk, skip_locked: bool = False) -> None:
    """One range in its own transaction, counters included; ``skip_locked``: go straight
    to the SKIP LOCKED form (this range already met an application's row lock)."""
    t, expired = ctx.unit.ident, ctx.pred.expired
    fast = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {expired} RETURNING 1").format(
        t=t, where=chunk.where, expired=expired)
    # An application holds a row (or the table) locked: this form does not wait on row
    # locks; locked rows are left for the next run.
    skip = sql.SQL(
        "DELETE FROM ONLY {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY {t} WHERE {where} AND {expired}"
        " FOR UPDATE SKIP LOCKED)) AND {expired} RETURNING 1"
    ).format(t=t, where=chunk.where, expired=expired)
    for _ in range(MOVED_RETRIES):
        deleted: int | None = None
        try:
            if not skip_locked:
                with contextlib.suppress(errors.LockNotAvailable):
                    deleted = _account(ctx, fast, chunk)
            if deleted is None:
                deleted = _account(ctx, skip, chunk, lock_timeout=ctx.settings.lock_timeout)
        except errors.SerializationFailure:
            # A row of the range was moved to another partition by an UPDATE that
            # committed while we waited on it (40001 even in READ COMMITTED): a new
            # statement, with a new snapshot, no longer sees it there.
            continue
        ctx.deleted += deleted
        _counted(ctx, chunk, deleted)
        return
    # Rows keep moving under this range: it is left for the next run, as locked rows are.


def _account(ctx: UnitContext, delete: sql.Composable, chunk: Chunk, lock_timeout: str | None = None) -> int:
    stmt = sql.SQL("WITH d AS ({}) ").format(delete) + ACCOUNT.format(
        selected=sql.Literal(chunk.selected if chunk.selected >= 0 else None),
        checkpoint=sql.Literal(Jsonb(chunk.checkpoint)), run_id=sql.Literal(ctx.run_id),
        unit=sql.Literal(ctx.unit.relid))
    if lock_timeout is None:
        row = _run(ctx, stmt, reraise_lock=True).fetchone()
    else:
        with ctx.conn.transaction():
            ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (lock_timeout,))
            row = _run(ctx, stmt).fetchone()
    return int(row[0]) if row else 0


def _run(ctx: UnitContext, query: sql.Composed | sql.SQL, reraise_lock: bool = False) -> psycopg.Cursor[Any]:
    """Run a statement that names the table: without parameters, so no '%' in it is read
    as a placeholder (the module docstring)."""
    try:
        return ctx.conn.execute(query)
    except errors.LockNotAvailable as exc:
        if reraise_lock:
            raise
        raise UnitTimeout(f"lock_timeout ({ctx.settings.lock_timeout}) reached: a lock on the table is held "
                          "by another session") from exc
    except errors.QueryCanceled as exc:
        raise UnitTimeout(f"statement_timeout ({ctx.settings.statement_timeout}) reached") from exc
