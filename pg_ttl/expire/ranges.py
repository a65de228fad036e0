"""Phase 1 of row deletion: the ranges a unit's expired rows are deleted in.

Over a btree on the TTL column: key windows [k1, k2) of at most a step of rows
each, k2 read as the key that many expired rows on (keys only, in the index's
order: an index-only scan where the visibility map allows); the step follows
the time a window's DELETE takes (rows.py). A key with more rows than a step is
deleted in ctid windows of the heap between its first and last row instead,
sized as key windows are (the index cannot give one key's rows in ctid order
without sorting them all; a range of tuple slots needs no read). Without one: ctid block ranges sized from the
expired density seen so far (no query at all: reading every row to count
candidates first would double the cost of a raw DELETE). Only range bounds
travel to the client, never the rows. Phase 2 (rows.py) deletes each range with
the expiry re-checked.

Statements that name the table, its columns or its expiry expression carry
their values as literals, never as parameters: with parameters psycopg reads
every '%' of the text as a placeholder, and names and expressions may hold one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import errors, sql

from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.predicate import window_forms

# The size of a unit in blocks, and its rows and pages as of the last ANALYZE.
SIZE = """
SELECT pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int8,
       c.reltuples, c.relpages
  FROM pg_catalog.pg_class c WHERE c.oid = %s
"""


class UnitTimeout(Exception):
    """lock_timeout or statement_timeout hit: the unit is skipped for this run."""


@dataclass
class Chunk:
    """One phase-2 range: ``where`` bounds it (its values in the SQL), ``checkpoint`` is
    where to resume after it; ``selected`` < 0: as many as deleted; ``blocks``: the
    block range [from, to) of a ctid range (row expiry deletes it by the statement of
    ttl.delete_rows_sql); ``expired``: the expiry its DELETE re-checks when not the run's
    (a key window's: ranges.window). A range the database writes the DELETE of has no
    ``where``: ``statements`` are that DELETE and its SKIP LOCKED form, ``params`` their
    $1, $2 (a key's ctid window: ttl.key_window_sql)."""

    where: sql.Composable | None
    selected: int
    checkpoint: dict[str, Any]
    blocks: tuple[int, int] | None = None
    expired: sql.Composable | None = None
    statements: tuple[str, str] | None = None
    params: tuple[str, str] | None = None



# A range that keeps meeting rows moved to another partition (40001) is retried this
# many times, then left for the next run (rows.py, sweeps.py).
MOVED_RETRIES = 3
T = TypeVar("T")


def delete_or_skip_locked(ctx: UnitContext, plain: Callable[[], T], skip_locked: Callable[[], T],
                          skipping: bool = False) -> T | None:
    """One range's transaction (a DELETE with its counters): ``plain`` under the short
    row_lock_timeout (raising LockNotAvailable when it meets a row an application holds),
    then, if it did (or at once with ``skipping``), ``skip_locked``, which leaves such rows
    for the next run. A row moved to another partition by an UPDATE that committed while
    the DELETE waited on it fails it with 40001 even in READ COMMITTED: redone (a new
    statement no longer sees it there), MOVED_RETRIES times; then None, the range left for
    the next run. Either way the unit may leave rows (``ctx.rows_may_remain``)."""
    for _ in range(MOVED_RETRIES):
        try:
            if not skipping:
                try:
                    return plain()
                except errors.LockNotAvailable:
                    pass
            ctx.rows_may_remain = True  # the rows an application holds wait for the next run
            return skip_locked()
        except errors.SerializationFailure:
            continue
    ctx.rows_may_remain = True  # rows keep moving under this range: left for the next run
    return None


def set_lock_timeout(ctx: UnitContext, value: str) -> None:
    """Change the session's lock_timeout, only when it differs (saves a round trip per batch)."""
    if not ctx.conn.broken and (ctx.lock_timeout or ctx.settings.lock_timeout) != value:
        ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, false)", (value,))
        ctx.lock_timeout = value


def _op(op: str) -> sql.Composable:
    # Operators from pg_catalog whatever the search_path (as the predicate does).
    return sql.SQL("OPERATOR(pg_catalog.{})").format(sql.SQL(op))


def _tid(value: str) -> sql.Composable:
    return sql.SQL("CAST({} AS pg_catalog.tid)").format(sql.Literal(value))


# The key ``step`` rows on from a window's start among the expired rows, in the btree's
# order, reading keys only (an index-only scan where the visibility map allows; no row
# is locked or counted), or no row: fewer are left. Cast to text above the OFFSET, which
# would otherwise cast every row it skips; named apart, as ORDER BY a name an output
# column has sorts by that column.
WINDOW_END = """
SELECT (SELECT CAST(s.window_end AS text) FROM (
          SELECT {col} AS window_end FROM ONLY {t} WHERE {bound}{lower} ORDER BY {col} OFFSET {rows} LIMIT 1) s),
       CAST({rows} AS pg_catalog.int8)
"""


@dataclass
class WindowStart:
    """Where the next key window begins: at ``key`` (``inclusive``) or after it; None:
    at the first expired row."""

    key: str | None = None
    inclusive: bool = True


def window_start(ctx: UnitContext) -> tuple[WindowStart, tuple[str, str | None] | None]:
    """Where the unit's key windows resume: at the key its checkpoint's window ended at
    (every row below it went), or within a key done in ctid windows, after the row its
    checkpoint names (returned too: the rest of that key comes first). A checkpoint of
    an older version's key ranges names a row too: the same."""
    cp = ctx.checkpoint or {}
    if cp.get("strategy") != "index":
        return WindowStart(), None
    if cp.get("ctid") is not None and cp.get("key") is not None:
        return WindowStart(str(cp["key"]), False), (str(cp["key"]), str(cp["ctid"]))
    key = cp.get("from", cp.get("key", cp.get("after")))
    return WindowStart(None if key is None else str(key)), None


def _hidden(ctx: UnitContext, key: str) -> sql.Composable:
    """A key hidden from the planner's estimates, as the windows' expiry hides its constants
    (ttl._constant_sql): no estimate walks the entries the last windows left dead at the
    index's low end."""
    return sql.SQL("(SELECT {})").format(ctx.pred.cast(sql.Literal(key)))


def _window_expiry(ctx: UnitContext, start: WindowStart) -> tuple[sql.Composable, sql.Composable | None]:
    """The expiry (``expired``, ``bound``) a window deletes and reads by: a unit's first
    window the run's (no window of the pass before it left dead entries), the next ones
    with their constants hidden from the planner's estimates too (predicate.window_forms)."""
    if start.key is None:
        return ctx.pred.expired, ctx.pred.bound
    return window_forms(ctx.conn, ctx.policy.relid, ctx.pred)


def _window_lower(ctx: UnitContext, start: WindowStart) -> sql.Composable:
    if start.key is None:
        return sql.SQL("")
    return sql.SQL(" AND {} {} {}").format(ctx.pred.column, _op(">=" if start.inclusive else ">"),
                                           _hidden(ctx, start.key))


@dataclass
class WindowSize:
    """What the next key window's rows are decided from (ttl.window_rows): the last
    window's rows, the rows it deleted, in how many seconds, and whether the pass is paced;
    or, for a unit's first window, just ``rows`` (delete_batch_size)."""

    rows: int
    deleted: int | None = None
    seconds: float = 0.0
    paced: bool = False

    def sql(self, ctx: UnitContext) -> sql.Composable:
        if self.deleted is None:
            return sql.Literal(self.rows)
        return sql.SQL("ttl.window_rows({}, {}, {}, {}, {})").format(*map(sql.Literal, (
            ctx.policy.delete_batch_size, self.rows, self.deleted, self.seconds, self.paced)))


def window_end(ctx: UnitContext, start: WindowStart, size: WindowSize) -> tuple[str | None, int]:
    """The key a window's rows (``size``) on from ``start`` (the end of a window of at most
    that many rows, exclusive; None: fewer rows left) and those rows. Read under the
    session's lock_timeout; meeting a lock on the table (DDL), read again under
    lock_timeout."""
    _, bound = _window_expiry(ctx, start)
    assert ctx.pred.column is not None and bound is not None
    query = sql.SQL(WINDOW_END).format(col=ctx.pred.column, t=ctx.unit.ident, bound=bound,
                                       lower=_window_lower(ctx, start), rows=size.sql(ctx))
    row = _read_key(ctx, query)
    assert row is not None
    return row[0], int(row[1])


def _read_key(ctx: UnitContext, query: sql.Composed) -> tuple[Any, ...] | None:
    """A key read under the session's lock_timeout; meeting a lock on the table (DDL), read
    again under lock_timeout."""
    try:
        return execute(ctx, query, reraise_lock=True).fetchone()
    except errors.LockNotAvailable:
        with ctx.conn.transaction():
            ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (ctx.settings.lock_timeout,))
            return execute(ctx, query).fetchone()


# The first expired key from a window's start on (one descent of the index) and the
# window's end guessed from the last window's keys (ttl.window_guess).
# ``factor``: the window's rows over the last one's deleted rows, at most GUESS_GROWTH_MAX.
WINDOW_GUESS = """
SELECT CAST(s.k AS text), CAST(ttl.window_guess(s.k, {first}, {last}, f.factor) AS text), f.rows, f.factor
  FROM (SELECT r.rows, LEAST(CAST(r.rows AS pg_catalog.float8) / {deleted}, {most}) AS factor
          FROM (SELECT CAST({rows} AS pg_catalog.int8) AS rows) r) f,
       (SELECT pg_catalog.min({col}) AS k FROM ONLY {t} WHERE {bound}{lower}) s
"""
# A guessed window spans at most this many times the keys of the last one.
GUESS_GROWTH_MAX = 16.0


@dataclass
class Guess:
    """A key window whose end was guessed: its first key (None: no expired row is left from
    its start on), its end (None: no key comes of the guess, read it), its rows and how
    many times the last window's keys it spans."""

    first: str | None
    end: str | None
    rows: int
    factor: float


def window_guess(ctx: UnitContext, start: WindowStart, first: str, last: str, size: WindowSize) -> Guess:
    """A window from the first expired key from ``start`` on, spanning as many times the keys
    [first, last) of the last window as its rows (``size``) are times the rows that one
    deleted. Read as window_end is."""
    _, bound = _window_expiry(ctx, start)
    assert ctx.pred.column is not None and bound is not None and size.deleted
    query = sql.SQL(WINDOW_GUESS).format(col=ctx.pred.column, t=ctx.unit.ident, bound=bound,
                                         lower=_window_lower(ctx, start), first=ctx.pred.cast(sql.Literal(first)),
                                         last=ctx.pred.cast(sql.Literal(last)), rows=size.sql(ctx),
                                         deleted=sql.Literal(size.deleted), most=sql.Literal(GUESS_GROWTH_MAX))
    row = _read_key(ctx, query)
    assert row is not None
    return Guess(row[0], row[1], int(row[2]), float(row[3]))


def window(ctx: UnitContext, start: WindowStart, end: str | None) -> Chunk:
    """The rows of the key window [start, end) (no end: every key from start on), to be
    deleted with the expiry re-checked. Its checkpoint: every row below ``end`` went.
    Its constants are hidden from the planner's estimates, but a unit's first window's
    (no first key): its end is its only bound, and its estimate still chooses between
    the index and a sequential scan."""
    where = sql.SQL("true{}").format(_window_lower(ctx, start))
    if end is not None:
        upper = ctx.pred.cast(sql.Literal(end)) if start.key is None else _hidden(ctx, end)
        where = sql.SQL("{} AND {} {} {}").format(where, ctx.pred.column, _op("<"), upper)
    return Chunk(where, -1, {"strategy": "index", "from": end}, expired=_window_expiry(ctx, start)[0])


# A key's first and last row (ttl.key_rows_sql, $1 the key), the tuple slots of a block
# (ttl.block_slots), {first}, the slots of the key's first ctid window, and the DELETE of
# a ctid window of the key and its SKIP LOCKED form (ttl.key_window_sql, as CALL
# ttl.run() deletes them).
KEY_ROWS = """
SELECT r.*, ttl.block_slots(), {first}, k.delete_key_window, k.delete_key_window_skip
  FROM ({key_rows}) r,
       ttl.key_window_sql(CAST(CAST({policy} AS pg_catalog.oid) AS pg_catalog.regclass),
                          CAST(CAST({unit} AS pg_catalog.oid) AS pg_catalog.regclass), {cutoff}, $1::text) k
"""


def tie_batches(ctx: UnitContext, key: str, after: str | None = None) -> Iterator[list[Chunk]]:
    """The rows of one key with more rows than a window holds, in ctid windows
    (``_tie_batches``): from its first row, or after the row ``after``. Its first and last
    row are read in one statement (ttl.key_rows_sql, read once a unit)."""
    if ctx.key_rows is None:
        row = ctx.conn.execute("SELECT ttl.key_rows_sql(%s, %s)", (ctx.policy.relid, ctx.unit.relid)).fetchone()
        assert row is not None
        ctx.key_rows = str(row[0])
    _, per_block = unit_size(ctx)
    set_lock_timeout(ctx, ctx.settings.lock_timeout)
    row = execute(ctx, sql.SQL(KEY_ROWS).format(key_rows=sql.SQL(ctx.key_rows), first=sql.SQL(SLOTS).format(
        rows=sql.Literal(ctx.policy.delete_batch_size), paced=sql.Literal(ctx.paced()), density=sql.SQL("NULL"),
        per_block=sql.Literal(per_block)), policy=sql.Literal(ctx.policy.relid), unit=sql.Literal(ctx.unit.relid),
        cutoff=sql.Literal(ctx.pred.cutoff)), raw_params=(key,)).fetchone()
    assert row is not None
    if row[1] is None:  # its rows went meanwhile
        return
    start = after if after is not None else f"({_block_of(str(row[0]))},0)"  # the block of its first row on
    yield from _tie_batches(ctx, key, start, str(row[1]), int(row[2]), int(row[3]), per_block,
                            (str(row[4]), str(row[5])))


# The tuple slots a key's ctid window spans (ttl.key_window_slots), from its rows
# (ttl.window_rows, or delete_batch_size for the first).
SLOTS = "ttl.key_window_slots({rows}, {paced}, {density}, {per_block})"


def _tie_batches(ctx: UnitContext, key: str, start: str, last: str, slots: int, span: int,
                 per_block: float, statements: tuple[str, str]) -> Iterator[list[Chunk]]:
    """The rows of one key from ctid ``start`` (exclusive) to its last row ``last``, in ctid
    windows (lo, hi] deleted one a transaction (a block holds ``slots`` tuple slots, the
    first window spans ``span``), sized as key windows are (ttl.window_rows: from
    delete_batch_size rows toward ~50 ms, each at most four times the rows the last one
    deleted), without reading a row to plan them (a TID range scan each: an index range on
    the key would read every row of the key to find these). A window is a range of tuple
    slots (ttl.key_window_slots: its rows at the key's density in the last window; while
    the pass is slowed, as many slots as it may hold rows), the rule CALL ttl.run() follows
    too. Each window is deleted by ``statements``, the database's (ttl.key_window_sql).

    Rows of the key past its last row when the key was met (written since), or outside the
    windows (only if the index is not in ctid order within a key, i.e. built before
    PostgreSQL 12), are left to the next run, whose first select batch starts at them.
    """
    lo, end = _slot(start, slots), _slot(last, slots)
    while lo < end and not ctx.stopping():
        hi = min(end, lo + span)
        before, started = ctx.deleted, time.monotonic()
        yield [Chunk(None, -1, {"strategy": "index", "key": key, "ctid": _tid_text(hi, slots)},
                     statements=statements, params=(_tid_text(lo, slots), _tid_text(hi, slots)))]
        deleted = ctx.deleted - before
        size = WindowSize(deleted, deleted, time.monotonic() - started, ctx.paced())
        row = ctx.conn.execute(sql.SQL("SELECT " + SLOTS).format(
            rows=size.sql(ctx), paced=sql.Literal(size.paced), density=sql.Literal(deleted / (hi - lo)),
            per_block=sql.Literal(per_block))).fetchone()
        assert row is not None
        span, lo = int(row[0]), hi


def _slot(tid: str, slots: int) -> int:
    """A ctid as a position in the heap's tuple slots (block * slots + offset; offsets
    start at 1, so offset 0 of each block is a slot no row holds)."""
    block, offset = tid.strip("()").split(",")
    return int(block) * slots + min(int(offset), slots - 1)


def _tid_text(position: int, slots: int) -> str:
    return f"({position // slots},{position % slots})"


def unit_size(ctx: UnitContext) -> tuple[int, float]:
    """The unit's blocks and its rows per block as of its last ANALYZE (100 if never
    analyzed): as read a moment ago with its strategy (rows.choose_strategy), else now."""
    if ctx.size is None:
        row = ctx.conn.execute(SIZE, (ctx.unit.relid,)).fetchone()
        if row is None or row[0] is None:  # dropped since the unit was listed: the engine records it skipped
            raise errors.UndefinedTable(f"the partition {ctx.unit.name} was dropped during the run")
        ctx.size = (int(row[0]), float(row[1]), int(row[2]))
    nblocks, reltuples, relpages = ctx.size
    return nblocks, (reltuples / relpages if relpages > 0 and reltuples > 0 else 100.0)


def ctid_batches(ctx: UnitContext) -> Iterator[Iterator[Chunk]]:
    """Block ranges, selected without reading a row: each select batch is the next
    ~select_batch_size rows' worth of blocks, and each phase-2 range a part of it
    sized (from the expired density seen so far) to hold ~delete_batch_size
    expired rows; never more than the select batch. Reading every row twice (to
    count candidates first) would double the cost of a raw DELETE.
    """
    policy = ctx.policy
    nblocks, per_block = unit_size(ctx)
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
        yield Chunk(where, -1, {"strategy": "ctid", "from": f"({hi},0)", "end": end}, (block, hi))
        # follow the density, at most doubling the range at a time
        state["density"] = max((ctx.deleted - before) / blocks, state["density"] / 2)
        state["block"] = hi


def _block_of(tid: str) -> int:
    return int(tid.strip("()").split(",")[0])


# -- statements ---------------------------------------------------------------

def execute(ctx: UnitContext, query: sql.Composed | sql.SQL | str, reraise_lock: bool = False,
            raw_params: tuple[Any, ...] | None = None) -> psycopg.Cursor[Any]:
    """Run a statement that names the table: without parameters, so no '%' in it is read
    as a placeholder (the module docstring), or with ``raw_params`` for its $1, $2 ...
    through a raw cursor (no '%' placeholders either). Timeouts become UnitTimeout."""
    try:
        if raw_params is not None:
            return psycopg.RawCursor(ctx.conn).execute(query, raw_params)
        return ctx.conn.execute(query)
    except errors.LockNotAvailable as exc:
        if reraise_lock:
            raise
        raise UnitTimeout(f"lock_timeout ({ctx.settings.lock_timeout}) reached: a lock on the table is held "
                          "by another session") from exc
    except errors.QueryCanceled as exc:
        raise UnitTimeout(f"statement_timeout ({ctx.settings.statement_timeout}) reached") from exc
