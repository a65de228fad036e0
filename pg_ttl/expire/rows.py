"""Two-phase row deletion of one unit (a leaf partition or a plain table).

Phase 1 (ranges.py) bounds the next range: a key window over a btree on the
TTL column (``_delete_windows``), or ctid block ranges of about
``delete_batch_size`` expired rows; ``choose_strategy`` picks between them from
the planner's statistics.

Phase 2 deletes one range per statement with the expiry predicate re-checked in
that statement, so a row updated since phase 1 to a later expiry is kept. A
ctid range is deleted by the statement of ``ttl.delete_rows_sql``
(sql/52_delete_rows.sql), the one ``CALL ttl.run()`` executes too.
Ranges are grouped into transactions of at most ``ttl.transaction_seconds()`` with one
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
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from pg_ttl.expire import history, ranges, sweeps
from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.ranges import Chunk, ctid_batches, delete_or_skip_locked, execute, set_lock_timeout

# The unit's size (pg_relation_size: blocks now; reltuples and relpages: as of the last
# ANALYZE), how its rows are deleted with the planner's estimate of its expired rows
# (ttl.row_strategy: the rule both engines follow) and (row expiry) the statement that
# deletes a ctid range of it (ttl.delete_rows_sql).
UNIT_COLUMNS = """s.nblocks, s.reltuples, s.relpages, s.strategy, s.expired_estimate,
       CASE WHEN %(row_expiry)s THEN ttl.delete_rows_sql(%(policy)s::oid::regclass, %(relid)s::oid::regclass,
                                                        %(cutoff)s) END"""
UNIT_FROM = """
  FROM ttl.row_strategy(%(policy)s::oid::regclass, %(relid)s::oid::regclass, %(cutoff)s, %(forced)s) s
"""
UNIT_CATALOG = "SELECT " + UNIT_COLUMNS + UNIT_FROM
# The same, and the unit's start in one round trip: its history row with the strategy it
# goes by (a resumed checkpoint's, else the one chosen), and the session's lock_timeout
# set to row_lock_timeout for a ctid sweep (it deletes at once).
START_UNIT = "SELECT " + UNIT_COLUMNS + """,
       ttl._start_unit(%(run)s, %(relid)s, %(name)s, 'delete', coalesce(%(resumed)s, s.strategy), %(checkpoint)s),
       CASE WHEN coalesce(%(resumed)s, s.strategy) = 'ctid'
            THEN pg_catalog.set_config('lock_timeout', %(row_lock)s, false) END""" + UNIT_FROM
ACCOUNT_GROUP = """
UPDATE ttl.run_unit SET rows_deleted = rows_deleted + %(deleted)s, rows_selected = rows_selected + %(selected)s,
       checkpoint = %(checkpoint)s
 WHERE run_id = %(run_id)s AND unit_relid = %(unit)s
"""
# Follows a DELETE ... RETURNING 1 named d; values are literals (see the module docstring).
ACCOUNT = sql.SQL("""
UPDATE ttl.run_unit SET rows_deleted = rows_deleted + (SELECT count(*) FROM d),
       rows_selected = rows_selected + coalesce(CAST({selected} AS pg_catalog.int8), (SELECT count(*) FROM d)),
       checkpoint = {checkpoint}
 WHERE run_id = {run_id} AND unit_relid = CAST({unit} AS pg_catalog.oid)
RETURNING (SELECT count(*) FROM d)
""")
DELETE_ROWS_SQL = "SELECT ttl.delete_rows_sql(%s::oid::regclass, %s::oid::regclass, %s, %s)"




def _unit_params(ctx: UnitContext) -> dict[str, Any]:
    return {"relid": ctx.unit.relid, "row_expiry": ctx.pred.row_expiry, "policy": ctx.policy.relid,
            "cutoff": ctx.pred.cutoff, "forced": ctx.settings.row_strategy}


def _keep_catalog(ctx: UnitContext, row: Sequence[Any]) -> tuple[str, int | None]:
    """The unit's size and block range statement, kept for its sweep; its strategy and estimate."""
    ctx.size = (int(row[0]), float(row[1]), int(row[2]))
    if row[5] is not None:
        ctx.block_delete[False] = row[5]
    return str(row[3]), (None if row[4] is None else int(row[4]))


def choose_strategy(ctx: UnitContext) -> tuple[str, int | None]:
    """``index`` (key windows over a btree on the TTL column) when they touch few heap
    pages, else ``ctid`` (block ranges, one sequential sweep), as ttl.row_strategy
    judges (the ``row_strategy`` setting can force either); with the planner's estimate
    of the expired rows (None for a small unit swept at once). Keeps the unit's size for
    its sweep. Runs as the table's owner (the owner's expression is planned)."""
    row = ctx.conn.execute(UNIT_CATALOG, _unit_params(ctx)).fetchone()
    assert row is not None
    return _keep_catalog(ctx, row)


def start_unit(ctx: UnitContext, resumed: str | None) -> tuple[str, int | None]:
    """The unit's strategy chosen (as choose_strategy) or ``resumed`` (a checkpoint's), and
    its history row started with it, in one round trip; a ctid sweep from here under
    row_lock_timeout. Returns the strategy and the planner's estimate of the expired rows.
    When that fails (a lock on the table, say), the unit is recorded without a strategy,
    to be finished with what happened, and the error raised."""
    conn = ctx.conn
    cp = Jsonb(ctx.checkpoint) if ctx.checkpoint is not None else None
    try:
        row = conn.execute(START_UNIT, {**_unit_params(ctx), "run": ctx.run_id, "name": ctx.unit.name,
                                        "resumed": resumed, "checkpoint": cp,
                                        "row_lock": ctx.settings.row_lock_timeout}).fetchone()
    except psycopg.Error:
        if not conn.broken:
            with contextlib.suppress(psycopg.Error):
                history.start_unit(conn, ctx.run_id, ctx.unit.relid, ctx.unit.name, ctx.unit.action, None,
                                   ctx.checkpoint)
        raise
    assert row is not None
    chosen, estimate = _keep_catalog(ctx, row)
    strategy = resumed or chosen
    if strategy == "ctid":
        ctx.lock_timeout = ctx.settings.row_lock_timeout
    return strategy, estimate


def delete_rows(ctx: UnitContext, strategy: str) -> str:
    """Delete the unit's expired rows; returns 'ok' or 'partial' (stopped); raises UnitTimeout.
    Phase 2 runs under the short row_lock_timeout (a session setting), phase 1 under
    lock_timeout; the session is left as phase 2 left it: the unit's end sets lock_timeout
    back (engine.run_unit), with the statement that ends it."""
    if strategy == "index":
        return _delete_windows(ctx)
    for chunks in ctid_batches(ctx):
        set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
        _delete_batch(ctx, iter(chunks))
        if ctx.stopping():
            return "partial"
    return "ok"


def _delete_windows(ctx: UnitContext) -> str:
    """Key windows over the TTL column's btree, each deleted in a transaction of its own
    with the unit's counters and checkpoint (a last one of at most delete_batch_size rows
    by one statement that does both: a small table's whole run; counting a larger one's
    rows in that statement cost more than the round trips it saves, 3.9 vs 8 ms for 5,000
    rows). The first holds ``delete_batch_size`` rows; each next one as many as
    ttl.window_rows says from what the last one took (toward ttl.transaction_seconds(),
    the rule CALL ttl.run() follows too), computed in the statement that reads or guesses
    the window.

    A window's end is read (ranges.window_end: the key that many rows on, an index entry
    a row) for the first two windows and while the pass is slowed, where a window must hold
    at most its rows. Otherwise it is guessed from the last window's keys (ranges.window_guess):
    the rows it should hold over the rows the last one held, times the keys that one
    spanned. A guessed window that runs past four times the time it should take (its keys
    denser than the last one's) is rolled back, and the unit's windows are read from
    there on. A key with more rows than a read window holds goes in ctid windows between its
    first and last row, sized as key windows are (ranges.tie_batches)."""
    policy = ctx.policy
    start, within = ranges.window_start(ctx)
    size = ranges.WindowSize(policy.delete_batch_size)
    last_keys: tuple[str, str] | None = None  # the last window's keys [first, end): a guess's base
    guessing = True  # until a guessed window overruns its time
    while not ctx.stopping():
        first, limit, rows = start.key, None, size.rows
        if within is None:
            set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
            end = None
            if last_keys is not None and guessing and not size.paced:
                guess = ranges.window_guess(ctx, start, *last_keys, size)
                if guess.first is None:  # no expired row left from start on
                    return "ok"
                if guess.end is not None:
                    first, end, rows = guess.first, guess.end, guess.rows
                    # four times what it should take at the last window's pace
                    limit = 4 * max(size.seconds * guess.factor, ctx.settings.transaction_target)
            if limit is None:
                end, rows = ranges.window_end(ctx, start, size)
                if end is not None and end == start.key and start.inclusive:
                    within = (end, None)  # a window of rows or more share this key
        if within is not None:
            # (rows of the key written since are left to the next run, as rows written already
            # expired behind the windows are: the run does not count them as left)
            for chunks in ranges.tie_batches(ctx, *within):
                set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
                _delete_batch(ctx, iter(chunks))
                if ctx.stopping():
                    return "partial"
            start, within, last_keys = ranges.WindowStart(within[0], inclusive=False), None, None
            continue
        before, started = ctx.deleted, time.monotonic()
        if limit is None and end is None and rows <= policy.delete_batch_size:
            # the only or a paced last window, of at most delete_batch_size rows: deleted and
            # counted by one statement (a small table's run: no BEGIN, UPDATE, COMMIT of its own)
            _delete_chunk(ctx, ranges.window(ctx, start, end))
            return "ok"
        if limit is not None:
            if not _delete_guessed(ctx, ranges.window(ctx, start, end), limit):
                # its keys were denser: a quarter of its rows, read, and reads from here on
                guessing, last_keys = False, None
                size = ranges.WindowSize(max(policy.delete_batch_size, rows // 4))
                continue
        else:
            _delete_batch(ctx, iter([ranges.window(ctx, start, end)]))
            if end is None:  # a larger last one: the counting statement would cost more than the round trips
                return "partial" if ctx.stopping() else "ok"
        assert end is not None
        deleted = ctx.deleted - before
        size = ranges.WindowSize(rows, deleted, time.monotonic() - started, ctx.paced())
        last_keys = (first, end) if first is not None and deleted > 0 else None
        start = ranges.WindowStart(end)
    return "partial"


# A guessed window's time limit, within its transaction: when the session's own
# statement_timeout is none or longer; says whether it set it.
GUARD = """
SELECT g.guard, CASE WHEN g.guard THEN pg_catalog.set_config('statement_timeout', %(ms)s::text, true) END
  FROM (SELECT pg_catalog.current_setting('statement_timeout')::pg_catalog.interval AS t) c,
       LATERAL (SELECT c.t = interval '0' OR c.t > %(ms)s::text::pg_catalog.interval AS guard) g
"""


def _delete_guessed(ctx: UnitContext, chunk: Chunk, limit: float) -> bool:
    """A window whose end was guessed, in a transaction of its own with the unit's counters;
    False when its DELETE ran past ``limit`` seconds: rolled back. The session's own
    statement_timeout, when shorter, stays in force (and is a timeout)."""
    guarded = False
    started = time.monotonic()
    try:
        with ctx.conn.transaction():
            row = ctx.conn.execute(GUARD, {"ms": f"{max(1, int(limit * 1000))}ms"}).fetchone()
            guarded = bool(row and row[0])
            n = _delete_plain(ctx, chunk)
            _account_group(ctx, [(chunk, n)])
    except ranges.UnitTimeout as exc:
        # (a cancel that came sooner is someone else's: pg_cancel_backend, say)
        if guarded and isinstance(exc.__cause__, errors.QueryCanceled) \
                and time.monotonic() - started >= limit * 0.9:
            return False
        raise
    except (errors.LockNotAvailable, errors.SerializationFailure) as exc:
        _delete_chunk(ctx, chunk, met=exc)
        return True
    ctx.deleted += n
    _counted(ctx, chunk, n)
    return True


def _delete_batch(ctx: UnitContext, chunks: Iterator[Chunk]) -> None:
    """Phase 2 of one select batch: one DELETE statement per chunk, several chunks per
    transaction up to ttl.transaction_seconds() (one accounting update and one commit per
    transaction instead of per chunk: at 1000-row chunks they cost as much as the
    delete). A rate limit or the throttle slowing the pass makes every chunk its own
    transaction, so waits fall between transactions at chunk granularity."""
    current = next(chunks, None)
    while current is not None and not ctx.stopping():
        if _last_range(ctx, current):
            # The unit's last range, alone: deleted and counted by one statement (a small
            # table's whole run: no BEGIN, accounting UPDATE and COMMIT of their own).
            try:
                n = _delete_last_range(ctx, current)
            except (errors.LockNotAvailable, errors.SerializationFailure) as exc:
                _delete_chunk(ctx, current, met=exc)
            else:
                ctx.deleted += n
                _counted(ctx, current, n)
            current = next(chunks, None)
            continue
        group: list[tuple[Chunk, int]] = []
        started = time.monotonic()
        try:
            with ctx.conn.transaction():
                while current is not None:
                    n = _delete_plain(ctx, current)
                    group.append((current, n))
                    ctx.deleted += n  # provisional (the ctid ranges size themselves by it)
                    current = None
                    if (ctx.stopping() or ctx.paced()
                            or time.monotonic() - started >= ctx.settings.transaction_target):
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
                _delete_chunk(ctx, current, met=exc)
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
    by_database = _database_statement(ctx, chunk, False)
    if by_database is not None:
        return execute(ctx, by_database[0], reraise_lock=True, raw_params=by_database[1]).rowcount
    assert chunk.where is not None
    stmt = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {expired}").format(
        t=ctx.unit.ident, where=chunk.where, expired=_expired(ctx, chunk))
    return execute(ctx, stmt, reraise_lock=True).rowcount


def _database_statement(ctx: UnitContext, chunk: Chunk, skip_locked: bool) -> tuple[str, tuple[str, str]] | None:
    """The database's DELETE of the chunk's range (or its SKIP LOCKED form) and the values of
    its $1, $2: a block range's (ttl.delete_rows_sql) or a key's ctid window's
    (ttl.key_window_sql); None for a range bounded by ``chunk.where``."""
    if chunk.blocks is not None and ctx.pred.row_expiry:
        return _block_delete_sql(ctx, skip_locked), (f"({chunk.blocks[0]},0)", f"({chunk.blocks[1]},0)")
    if chunk.statements is not None and chunk.params is not None:
        return chunk.statements[skip_locked], chunk.params
    return None


def _expired(ctx: UnitContext, chunk: Chunk) -> sql.Composable:
    """The expiry a chunk's DELETE re-checks: its own (a key window's, constants hidden) or the run's."""
    return ctx.pred.expired if chunk.expired is None else chunk.expired


def _last_range(ctx: UnitContext, chunk: Chunk) -> bool:
    """A ctid range of row expiry that ends the unit's sweep."""
    return chunk.blocks is not None and ctx.pred.row_expiry and chunk.blocks[1] >= int(chunk.checkpoint["end"])


def _delete_last_range(ctx: UnitContext, chunk: Chunk) -> int:
    """The range by the database's statement (``_block_delete_sql``) and the unit's counters
    and checkpoint (``ACCOUNT``), in one statement; its $1/$2 are the range's bounds (a raw cursor)."""
    assert chunk.blocks is not None
    stmt = sql.SQL("WITH d AS ({} RETURNING 1) ").format(sql.SQL(_block_delete_sql(ctx, False))) + ACCOUNT.format(
        selected=sql.Literal(None), checkpoint=sql.Literal(Jsonb(chunk.checkpoint)), run_id=sql.Literal(ctx.run_id),
        unit=sql.Literal(ctx.unit.relid))
    row = execute(ctx, stmt, reraise_lock=True, raw_params=(f"({chunk.blocks[0]},0)", f"({chunk.blocks[1]},0)")
                  ).fetchone()
    return int(row[0]) if row else 0


def _account_group(ctx: UnitContext, group: list[tuple[Chunk, int]]) -> None:
    # No name or expression in this statement: parameters are safe here.
    deleted = sum(n for _, n in group)
    selected = sum(n if c.selected < 0 else c.selected for c, n in group)
    ctx.conn.execute(ACCOUNT_GROUP, {"deleted": deleted, "selected": selected,
                                     "checkpoint": Jsonb(group[-1][0].checkpoint), "run_id": ctx.run_id,
                                     "unit": ctx.unit.relid})


# -- phase 2 --------------------------------------------------------------------

def _block_delete_sql(ctx: UnitContext, skip_locked: bool) -> str:
    """The database's statement deleting a block range of the unit (ttl.delete_rows_sql),
    read once per unit (or with the unit's catalog, choose_strategy)."""
    if skip_locked not in ctx.block_delete:
        row = ctx.conn.execute(DELETE_ROWS_SQL, (ctx.policy.relid, ctx.unit.relid, ctx.pred.cutoff,
                                                 skip_locked)).fetchone()
        assert row is not None
        ctx.block_delete[skip_locked] = row[0]
    return ctx.block_delete[skip_locked]


def range_delete(ctx: UnitContext) -> sweeps.RangeDelete:
    """The database's statement deleting a block range (and its SKIP LOCKED form), for a
    sweep shared with other runs (sweeps.py): statements sized by time alone, each one
    transaction, as a group of ranges here is; rows counted as selected when deleted,
    as a ctid sweep here counts them."""
    return sweeps.RangeDelete("delete", _block_delete_sql(ctx, False), _block_delete_sql(ctx, True), None, False)


def _database_accounted(ctx: UnitContext, chunk: Chunk, skip_locked: bool) -> int:
    """A range by the database's own statement (``_database_statement``; its $1/$2 through a
    raw cursor: no '%' in the expiration expression is read as a placeholder) and the
    unit's counters in one transaction; the SKIP LOCKED form under lock_timeout."""
    by_database = _database_statement(ctx, chunk, skip_locked)
    assert by_database is not None
    with ctx.conn.transaction():
        if skip_locked:
            ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (ctx.settings.lock_timeout,))
        n = execute(ctx, by_database[0], reraise_lock=not skip_locked, raw_params=by_database[1]).rowcount
        _account_group(ctx, [(chunk, n)])
    return n


def _delete_chunk(ctx: UnitContext, chunk: Chunk, met: psycopg.Error | None = None) -> None:
    """One range in its own transaction, counters included. ``met``: what this range met in
    a transaction that was rolled back: an application's row lock (LockNotAvailable) sends
    it straight to the SKIP LOCKED form; a row moved to another partition (40001) is
    simply retried."""
    skip_locked = isinstance(met, errors.LockNotAvailable)
    if _database_statement(ctx, chunk, False) is not None:
        deleted = delete_or_skip_locked(ctx, lambda: _database_accounted(ctx, chunk, False),
                                        lambda: _database_accounted(ctx, chunk, True), skipping=skip_locked)
    else:
        assert chunk.where is not None
        t, expired = ctx.unit.ident, _expired(ctx, chunk)
        fast = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {expired} RETURNING 1").format(
            t=t, where=chunk.where, expired=expired)
        # An application holds a row (or the table) locked: this form does not wait on row
        # locks; locked rows are left for the next run.
        skip = sql.SQL(
            "DELETE FROM ONLY {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY {t} WHERE {where} AND {expired}"
            " FOR UPDATE SKIP LOCKED)) AND {expired} RETURNING 1"
        ).format(t=t, where=chunk.where, expired=expired)
        deleted = delete_or_skip_locked(
            ctx, lambda: _account(ctx, fast, chunk),
            lambda: _account(ctx, skip, chunk, lock_timeout=ctx.settings.lock_timeout), skipping=skip_locked)
    if deleted is not None:
        ctx.deleted += deleted
        _counted(ctx, chunk, deleted)


def _account(ctx: UnitContext, delete: sql.Composable, chunk: Chunk, lock_timeout: str | None = None) -> int:
    stmt = sql.SQL("WITH d AS ({}) ").format(delete) + ACCOUNT.format(
        selected=sql.Literal(chunk.selected if chunk.selected >= 0 else None),
        checkpoint=sql.Literal(Jsonb(chunk.checkpoint)), run_id=sql.Literal(ctx.run_id),
        unit=sql.Literal(ctx.unit.relid))
    if lock_timeout is None:
        row = execute(ctx, stmt, reraise_lock=True).fetchone()
    else:
        with ctx.conn.transaction():
            ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (lock_timeout,))
            row = execute(ctx, stmt).fetchone()
    return int(row[0]) if row else 0

