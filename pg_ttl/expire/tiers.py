"""Tiers: rows that reached a storage tier are moved there before they expire
(sql/82_tiers.sql says which rows; pg_ttl.archive writes them).

A table with tiers gets an archive run before its deletion run: each leaf is
an ``archive`` unit (claimed, checkpointed by tier and block, resumable). A
unit sweeps the leaf in block ranges of about ``select_batch_size`` rows; for
each range, in one short transaction: the rows of the tier are locked (``FOR
UPDATE SKIP LOCKED``: the application is never waited on, and a locked row
cannot change until the transaction ends), written as Parquet objects (one
per day of the TTL column), each read back and verified (size, SHA-256, row
count), recorded in ``ttl.archive``, then deleted with the tier's condition
re-checked; the manifest rows commit with the DELETE. A crash at any point
leaves every row in the table or in exactly one listed object; objects of the
leaf that the manifest does not list are removed when the leaf is next
archived. The unit's history row counts the rows moved (rows_deleted), the
bytes and the objects written, in the same transaction.

With ``archive_before_delete`` (sql/82_tiers.sql: ttl.tier_sql) the last
storage tier also takes the rows already past the final DELETE; the archive
run comes before the deletion run of the same pass, at the same cutoff, so
the rows it can lock are archived before anything deletes them.

Whole partitions: a range partition on the TTL column whose upper bound shows
that every row in it reached storage tier *k* (ttl.partition_tier), a
directory or S3 storage, is one unit instead of its leaves. It is read in
short transactions (row ranges, no row lock), written to tier *k*'s storage as
batches are (one object per day of the TTL column, at most ``OBJECT_ROWS``
rows each, read back and verified) and nothing listed yet. Then, in one
transaction, the partition is locked against writers (``EXCLUSIVE ...
NOWAIT``: a row the application holds or a write under way refuses it at
once), checked to hold exactly the rows read (their count and the sum of
64-bit hashes of their values, read again under the lock), its objects
listed in ``ttl.archive``, the partition dropped or detached
(``ttl_partition_action``) and the unit's history row finished. A crash
before that commit leaves every row in the partition and the objects
unlisted (the next run removes them, as a batch's); after it, every row is
in exactly one listed object. A partition that cannot be locked, was written
to meanwhile or cannot be dropped now stays: its objects are removed and its
rows move batch by batch in that run, as any leaf's.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pg_ttl.archive import parquet
from pg_ttl.archive.postgres import PostgresTarget
from pg_ttl.archive.storage import BaseStorage, StorageError, open_storage
from pg_ttl.expire import history, owner, partitions
from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.orphans import LEAVES
from pg_ttl.expire.predicate import EnginePolicy, Predicate
from pg_ttl.expire.ranges import set_lock_timeout
from pg_ttl.expire.units import CHILDREN, Unit, range_key, upper_bound

TIERS = """
SELECT t.position, t.storage, s.url FROM ttl.tier t JOIN ttl.storage s ON s.name = t.storage
 WHERE t.relid = %s ORDER BY t.position
"""
COLUMNS = """
SELECT a.attname, t.typname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.atttypmod
  FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
 WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum
"""
MANIFEST = """
INSERT INTO ttl.archive (relid, table_name, tier, storage, object_key, rows, bytes, sha256, min_time, max_time, run_id)
VALUES (%(relid)s, %(table)s, %(tier)s, %(storage)s, %(key)s, %(rows)s, %(bytes)s, %(sha)s, %(min)s, %(max)s, %(run)s)
"""
PRIMARY_KEY = """
SELECT a.attname FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
 WHERE i.indrelid = %s AND i.indisprimary
 ORDER BY pg_catalog.array_position(i.indkey::int2[], a.attnum)
"""
ACCOUNT = """
UPDATE ttl.run_unit SET rows_selected = rows_selected + %(n)s, rows_deleted = rows_deleted + %(n)s,
       bytes_archived = bytes_archived + %(bytes)s, objects_archived = objects_archived + %(objects)s,
       checkpoint = %(cp)s
 WHERE run_id = %(run_id)s AND unit_relid = %(unit)s
"""
# A whole partition exported (its objects listed, the partition dropped or detached): the
# unit's history row says so, finished in the same transaction.
ACCOUNT_WHOLE = """
UPDATE ttl.run_unit SET action = %(action)s, strategy = 'export', rows_selected = rows_selected + %(n)s,
       rows_deleted = rows_deleted + %(n)s, bytes_archived = bytes_archived + %(bytes)s,
       objects_archived = objects_archived + %(objects)s, checkpoint = NULL
 WHERE run_id = %(run_id)s AND unit_relid = %(unit)s
"""
# The leaves of a partition exported whole (itself, for a leaf).
WHOLE_LEAVES = """
SELECT c.oid, n.nspname, c.relname, c.relkind
  FROM pg_catalog.pg_partition_tree(%s::oid::regclass) t
  JOIN pg_catalog.pg_class c ON c.oid = t.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE t.isleaf
 ORDER BY n.nspname, c.relname
"""
SIZE = """
SELECT pg_catalog.pg_relation_size(%s::oid::regclass) / pg_catalog.current_setting('block_size')::int8,
       (SELECT CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages ELSE 100 END
          FROM pg_catalog.pg_class WHERE oid = %s)
"""
# A whole partition's rows go to storage in objects of at most this many rows (one object per
# day of the TTL column, as batches): they are held in memory until written.
OBJECT_ROWS = 100_000
# The row's instant and version, read after its columns: names longer than any PostgreSQL
# name (63 bytes), so no column of the table has them.
ROW_TIME = "pg_ttl row time".ljust(64, ".")
ROW_CTID = "pg_ttl row ctid".ljust(64, ".")
ROW_XMIN = "pg_ttl row xmin".ljust(64, ".")
# The SQL of the rows' instant (sql/82_tiers.sql), and the leaf's column it is, if it is one.
ROW_TIME_COLUMN = """
SELECT t.expr, (SELECT a.attname FROM pg_catalog.pg_attribute a
                 WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
                   AND pg_catalog.format('%%I', a.attname) = t.expr)
  FROM (SELECT ttl.row_time_sql(%s) AS expr) t
"""
# The engine session's settings a second session takes (_second_session).
SETTINGS = """
SELECT pg_catalog.current_setting('TimeZone'), pg_catalog.current_setting('DateStyle'),
       pg_catalog.current_setting('bytea_output'), pg_catalog.current_setting('extra_float_digits'),
       pg_catalog.current_setting('IntervalStyle'), pg_catalog.current_setting('statement_timeout'),
       pg_catalog.current_setting('lock_timeout'), pg_catalog.current_setting('search_path')
"""
SAME_SETTINGS = """
SELECT pg_catalog.set_config('TimeZone', %s, false), pg_catalog.set_config('DateStyle', %s, false),
       pg_catalog.set_config('bytea_output', %s, false), pg_catalog.set_config('extra_float_digits', %s, false),
       pg_catalog.set_config('IntervalStyle', %s, false), pg_catalog.set_config('statement_timeout', %s, false),
       pg_catalog.set_config('lock_timeout', %s, false), pg_catalog.set_config('search_path', %s, false)
"""
# Ranges read and written ahead of the one being deleted (memory: about select_batch_size
# rows each, held until their range commits).
READ_AHEAD = 3
# Blocks per statement of the check made under the partition's lock (each statement stays
# well within statement_timeout; the lock is held for all of them).
CHECK_BLOCKS = 8192


@dataclass
class Moved:
    """What a run moved to one tier (committed): rows, bytes (Parquet; 0 for a PostgreSQL
    storage) and objects (Parquet objects; batches for a PostgreSQL storage)."""

    storage: str
    tier: int
    rows: int = 0
    bytes: int = 0
    objects: int = 0


# What each archive unit moved, per tier, by (run id, leaf oid): the engine's results carry
# rows only, and a caller that reads a run's result takes the rest from here (the worker's
# metrics: moved()). Oids are unique in a cluster and run ids in a database, so the runs of
# several databases (one worker thread each) do not mix. A caller that never takes them
# (pg-ttl run) leaves at most _KEPT_UNITS behind.
_KEPT_UNITS = 4096
_moved: OrderedDict[tuple[int, int], dict[tuple[str, int], Moved]] = OrderedDict()
_moved_lock = threading.Lock()


def _count_moved(run_id: int, unit: int, storage: str, tier: int, rows: int, size: int, objects: int) -> None:
    with _moved_lock:
        per_tier = _moved.setdefault((run_id, unit), {})
        _moved.move_to_end((run_id, unit))
        while len(_moved) > _KEPT_UNITS:
            _moved.popitem(last=False)
        m = per_tier.setdefault((storage, tier), Moved(storage, tier))
        m.rows, m.bytes, m.objects = m.rows + rows, m.bytes + size, m.objects + objects


def moved(run_id: int | None, units: Iterable[int | None]) -> list[Moved]:
    """What the archive units ``units`` (leaf oids) of run ``run_id`` moved, summed per tier,
    in tier order; taken: a second call returns nothing."""
    total: dict[tuple[str, int], Moved] = {}
    with _moved_lock:
        found = [_moved.pop((run_id, unit), {}) for unit in units if run_id is not None and unit is not None]
    for per_tier in found:
        for key, m in per_tier.items():
            t = total.setdefault(key, Moved(m.storage, m.tier))
            t.rows, t.bytes, t.objects = t.rows + m.rows, t.bytes + m.bytes, t.objects + m.objects
    return [total[k] for k in sorted(total, key=lambda k: (k[1], k[0]))]


# (run id, storage) whose prepared exports this process has resolved (PostgresTarget.resolve)
_resolved: set[tuple[int, str]] = set()


def has_tiers(conn: psycopg.Connection[Any], relid: int) -> bool:
    return conn.execute("SELECT 1 FROM ttl.tier WHERE relid = %s LIMIT 1", (relid,)).fetchone() is not None


def archives_before_delete(conn: psycopg.Connection[Any], relid: int) -> bool:
    """Rows past the DELETE are archived first (the deletion waits for a complete archive run)."""
    return conn.execute("SELECT 1 FROM ttl.tier WHERE relid = %s AND archive_before_delete LIMIT 1",
                        (relid,)).fetchone() is not None


def archive_units(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate | None = None) -> list[Unit]:
    """Every leaf of the table (or the table itself). With the run's predicate, a range
    partition on the TTL column whose every row reached a storage tier at its cutoff is one
    unit (``tier`` set: exported whole, then dropped or detached) instead of its leaves."""
    leaves = [Unit(int(oid), str(schema), str(name), "archive")
              for oid, schema, name in conn.execute(LEAVES, {"t": policy.relid}).fetchall()]
    if pred is None or policy.relkind != "p" or policy.column is None or policy.expression is not None:
        return leaves
    # A PostgreSQL storage takes a partition whole in a transaction prepared there (taken back
    # if the partition must stay): only where its server allows prepared transactions
    whole_tiers = {int(position) for position, name, url in conn.execute(TIERS, (policy.relid,)).fetchall()
                   if _exports_whole(open_storage(str(name), str(url)))}
    whole: list[Unit] = []
    if whole_tiers:
        _whole_partitions(conn, policy, pred, whole_tiers, policy.relid, policy.ident, whole)
    if not whole:
        return leaves
    covered = {int(oid) for (oid,) in conn.execute(
        "SELECT t.relid::oid FROM pg_catalog.unnest(%s::oid[]) w, pg_catalog.pg_partition_tree(w::regclass) t",
        ([u.relid for u in whole],))}
    return whole + [u for u in leaves if u.relid not in covered]


def _exports_whole(storage: BaseStorage | PostgresTarget) -> bool:
    return not isinstance(storage, PostgresTarget) or storage.can_prepare()


def _whole_partitions(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, whole_tiers: set[int],
                      relid: int, ident: sql.Identifier, out: list[Unit]) -> None:
    """The highest range partitions on the TTL column under ``relid`` whose upper bound
    reached a storage tier that takes partitions whole (sql/82_tiers.sql:
    ttl.partition_tier), as units.py's walk finds expired ones."""
    key = range_key(conn, relid)
    on_column = key is not None and key.column == policy.column
    children = conn.execute(CHILDREN, (relid,)).fetchall()
    tier_of: dict[str, int] = {}
    if on_column:
        uppers = [u for u in (upper_bound(b) for *_, b, _p in children) if u is not None]
        if uppers:
            tier_of = {str(u): int(k) for u, k in conn.execute(
                "SELECT u, ttl.partition_tier(%s, %s, u) FROM pg_catalog.unnest(%s::text[]) u",
                (policy.relid, pred.cutoff, uppers)) if k is not None and int(k) in whole_tiers}
    for oid, schema, relname, relkind, bound, pending in children:
        if relkind not in ("r", "p") or pending:
            continue  # a foreign table, or one being detached: its leaves stay units of their own
        upper = upper_bound(bound) if on_column else None
        if upper is not None and upper in tier_of:
            out.append(Unit(int(oid), str(schema), str(relname), "archive", parent=ident, upper=upper, bound=bound,
                            tier=tier_of[upper]))
        elif relkind == "p":
            _whole_partitions(conn, policy, pred, whole_tiers, int(oid), sql.Identifier(str(schema), str(relname)),
                              out)


def object_prefix(policy: EnginePolicy, storage: str) -> str:
    return f"table={policy.schema}.{policy.relname}/tier={storage}/"


def archive(ctx: UnitContext) -> str:
    """Move the unit's rows that reached a storage tier; 'ok' or 'partial' (stopped, or
    rows the application held left behind when they are to be archived before the DELETE)."""
    if ctx.unit.tier is not None:
        return _archive_partition(ctx)
    return _archive_leaf(ctx, ctx.unit)


def _columns(conn: psycopg.Connection[Any], relid: int) -> list[parquet.Column]:
    return [parquet.Column(str(n), str(t), str(f), int(m)) for n, t, f, m in conn.execute(COLUMNS, (relid,))]


def _values(columns: list[parquet.Column]) -> list[sql.Composable]:
    """The columns as fetched and written: text for the types Parquet has none for."""
    return [sql.SQL("CAST({} AS pg_catalog.text)").format(sql.Identifier(c.name)) if c.as_text
            else sql.Identifier(c.name) for c in columns]


def _archive_leaf(ctx: UnitContext, leaf: Unit) -> str:
    """Sweep one leaf (the unit, or a leaf of a partition that stays) tier by tier."""
    conn, policy = ctx.conn, ctx.policy
    columns = _columns(conn, leaf.relid)
    row = conn.execute("SELECT ttl.row_time_sql(%s)", (policy.relid,)).fetchone()
    assert row is not None and row[0] is not None
    # a PostgreSQL storage's batch: the rows, their ctid and instant; a Parquet one's: the rows
    # and their instant (as the DELETE returns them)
    select = sql.SQL(", ").join([*_values(columns), sql.SQL("ctid"), sql.SQL(row[0])])
    returning = sql.SQL(", ").join([*_values(columns), sql.SQL(row[0])])
    cp = ctx.checkpoint if (ctx.checkpoint or {}).get("strategy") == "archive" else None
    if cp is not None and int(cp.get("leaf", ctx.unit.relid)) != leaf.relid:
        cp = None  # another leaf's
    for position, storage_name, url in conn.execute(TIERS, (policy.relid,)).fetchall():
        if cp is not None and position < cp["tier"]:
            continue
        storage = open_storage(str(storage_name), str(url))
        if not isinstance(storage, PostgresTarget):
            _remove_unlisted(conn, storage, object_prefix(policy, str(storage_name)), [leaf.relid])
        elif (ctx.run_id, storage.name) not in _resolved:  # once per run and storage: it connects there
            storage.resolve(conn)
            _resolved.add((ctx.run_id, storage.name))
        pred = conn.execute("SELECT ttl.tier_sql(%s, %s, %s)", (policy.relid, position, ctx.pred.cutoff)).fetchone()
        assert pred is not None
        block = int(cp["from"]) if cp is not None and cp["tier"] == position else 0
        cp = None
        # This tier also takes the rows past the DELETE (archive_before_delete): the deletion run
        # waits for an archive run that left none of them behind (sql/82_tiers.sql).
        before_delete = conn.execute("SELECT archive_before_delete FROM ttl.tier WHERE relid = %s AND position = %s",
                                     (policy.relid, position)).fetchone()
        done = _sweep(ctx, leaf, columns, select, returning, sql.SQL(pred[0]), int(position), storage, block,
                      count_left=bool(before_delete and before_delete[0]))
        if done != "ok":
            return done
    return "ok"


def _sweep(ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], select: sql.Composable,
           returning: sql.Composable, pred: sql.Composable, tier: int, storage: BaseStorage | PostgresTarget,
           block: int, *, count_left: bool = False) -> str:
    """'ok', or 'partial': stopped, or (``count_left``) rows of a range were left behind, held by
    the application (SKIP LOCKED)."""
    conn = ctx.conn
    size = conn.execute(SIZE, (leaf.relid, leaf.relid)).fetchone()
    assert size is not None
    nblocks, per_block = int(size[0] or 0), float(size[1] or 100)
    # select_batch_size rows per range: an object per day of them, written, synced and
    # read back, costs much more per object than per row
    step = max(1, int(ctx.policy.select_batch_size / per_block))
    sweep = _Sweep(ctx, leaf, columns, pred, tier, storage, count_left)
    ranges = [(lo, lo + step) for lo in range(block, nblocks, step)]
    if isinstance(storage, PostgresTarget):
        for lo, hi in ranges:
            if ctx.stopping():
                return "partial"
            with conn.transaction():
                where = sweep.where(lo, hi)
                rows = conn.execute(sql.SQL("SELECT {} FROM ONLY {} WHERE {} FOR UPDATE SKIP LOCKED").format(
                    select, leaf.ident, where)).fetchall()
                moved = _to_postgres_batch(ctx, leaf, columns, rows, tier, storage, where) if rows else (0, 0, 0)
                sweep.account(lo, hi, *moved)
            sweep.counted(*moved)
    elif not _sweep_objects(sweep, ranges, returning):
        return "partial"
    return sweep.finish()


class _Changed(Exception):
    """A row of a batch changed, went or is held since it was read: the batch is undone."""


@dataclass
class _Written:
    """A range's rows written to storage, verified, not yet listed: its manifest rows, and
    the version (ctid and xmin) of every row written, as a tid[] and an xid[] literal."""

    lo: int
    hi: int
    rows: int = 0
    listed: list[dict[str, Any]] = field(default_factory=list)
    ctids: str = "{}"
    xmins: str = "{}"


class _Sweep:
    """One leaf's sweep to one tier: each range's transaction ends with its accounting
    (rows, bytes, objects, checkpoint), and with ``count_left`` (archive_before_delete)
    remembers the first range where rows of the tier stayed."""

    def __init__(self, ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], pred: sql.Composable, tier: int,
                 storage: BaseStorage | PostgresTarget, count_left: bool) -> None:
        self.ctx, self.leaf, self.columns, self.pred, self.tier = ctx, leaf, columns, pred, tier
        self.storage, self.count_left = storage, count_left
        self.first_left: int | None = None
        # a leaf of a partition exported whole that had to stay: the checkpoint says which leaf
        self.where_leaf = {} if leaf.relid == ctx.unit.relid else {"leaf": leaf.relid}

    def where(self, lo: int, hi: int) -> sql.Composable:
        """The range's rows of the tier."""
        return sql.SQL("ctid >= CAST({} AS pg_catalog.tid) AND ctid < CAST({} AS pg_catalog.tid) AND {}").format(
            sql.Literal(f"({lo},0)"), sql.Literal(f"({hi},0)"), self.pred)

    def account(self, lo: int, hi: int, n: int, size: int, objects: int) -> None:
        """In the range's transaction: what it moved, and the checkpoint past it."""
        conn = self.ctx.conn
        if self.count_left and self.first_left is None and conn.execute(sql.SQL(
                "SELECT 1 FROM ONLY {} WHERE {} LIMIT 1").format(self.leaf.ident, self.where(lo, hi))).fetchone():
            self.first_left = lo
        self._checkpoint(hi, n, size, objects)

    def _checkpoint(self, at: int, n: int, size: int, objects: int) -> None:
        self.ctx.conn.execute(ACCOUNT, {
            "n": n, "bytes": size, "objects": objects, "run_id": self.ctx.run_id, "unit": self.ctx.unit.relid,
            "cp": Jsonb({"strategy": "archive", "tier": self.tier, "from": at, **self.where_leaf})})

    def counted(self, n: int, size: int, objects: int) -> None:
        """After the range's commit: progress, metrics, the rate limit's wait."""
        ctx = self.ctx
        if n:
            _count_moved(ctx.run_id, ctx.unit.relid, self.storage.name, self.tier, n, size, objects)
        ctx.selected += n
        ctx.deleted += n
        ctx.progress.batch_done(ctx.policy.name, ctx.unit.name, n, n)
        ctx.delete_limiter.add(n)

    def finish(self) -> str:
        if self.first_left is None:
            return "ok"
        # Resumed from there: a later range's checkpoint must not skip the rows left behind.
        self._checkpoint(self.first_left, 0, 0, 0)
        return "partial"


def _sweep_objects(sweep: _Sweep, ranges: list[tuple[int, int]], returning: sql.Composable) -> bool:
    """The ranges to a directory or S3 storage; False when stopped. A range's rows are read
    without a lock (COPY, parsed by Arrow) by a second session of the engine and written as
    objects and verified in background threads, while this session deletes the ranges
    before it: in one short transaction per range, exactly the row versions written are
    deleted (ctid and xmin: a row updated, deleted or held since it was read is not) and
    the objects listed. If any of them was not deleted, the transaction is undone, the
    objects removed and the range moved again with its rows deleted first (_move_as_csv).
    The ranges commit in order: the checkpoint never passes a range not done."""
    ctx, conn = sweep.ctx, sweep.ctx.conn
    assert isinstance(sweep.storage, BaseStorage)
    storage = sweep.storage
    # the rows' instant: one of their columns (a timestamptz TTL column), else read after them
    row = conn.execute(ROW_TIME_COLUMN, (sweep.leaf.relid, ctx.policy.relid)).fetchone()
    assert row is not None and row[0] is not None
    time_column = str(row[1]) if row[1] is not None else None
    read = sql.SQL(", ").join([*_values(sweep.columns), *([] if time_column else [sql.SQL(row[0])]),
                               sql.SQL("ctid"), sql.SQL("xmin")])
    parquet.load()  # outside the batches' transactions
    reader = _second_session(ctx)
    reading = threading.Lock()  # one COPY at a time on the reader's session

    def read_and_write(lo: int, hi: int) -> _Written:
        assert reader is not None
        with reading:
            data = _copy_out(reader, sql.SQL("COPY (SELECT {} FROM ONLY {} WHERE {}) TO STDOUT (FORMAT csv)")
                             .format(read, sweep.leaf.ident, sweep.where(lo, hi)))
        return _write_range(sweep, lo, hi, data, time_column)

    pending: list[Future[_Written]] = []
    stopped = False
    # a batch's DELETE runs under the short row_lock_timeout: the application is not waited on
    set_lock_timeout(ctx, ctx.settings.row_lock_timeout)
    try:
        # without a second session, the reads run here, between this session's statements
        # more writers than readers: writing is mostly waiting (fsync, uploads)
        with ThreadPoolExecutor(READ_AHEAD + 1, thread_name_prefix="pg-ttl-archive") as pool:
            for lo, hi in ranges:
                if ctx.stopping():
                    stopped = True
                    break
                if reader is None:
                    with reading:
                        data = _copy_out(conn, sql.SQL("COPY (SELECT {} FROM ONLY {} WHERE {}) TO STDOUT"
                                                       " (FORMAT csv)").format(read, sweep.leaf.ident,
                                                                               sweep.where(lo, hi)))
                    pending.append(pool.submit(_write_range, sweep, lo, hi, data, time_column))
                else:
                    pending.append(pool.submit(read_and_write, lo, hi))
                if len(pending) > READ_AHEAD:
                    _commit_range(sweep, pending.pop(0).result(), returning)
            while pending:
                _commit_range(sweep, pending.pop(0).result(), returning)
    except BaseException:
        for future in pending:  # written, never listed: removed now (else by the next run)
            with contextlib.suppress(Exception):
                _remove_objects(storage, [str(m["key"]) for m in future.result().listed])
        raise
    finally:
        if reader is not None:
            reader.close()
        set_lock_timeout(ctx, ctx.settings.lock_timeout)
    return not stopped


def _second_session(ctx: UnitContext) -> psycopg.Connection[Any] | None:
    """A second session like the engine's: same server, database and login, its settings
    copied (the text forms rows are read in, timeouts, search_path) and the table owner's
    role taken, as the engine's own session has. None when it cannot be had (the caller
    reads in its own session)."""
    info = ctx.conn.info
    try:
        other = psycopg.connect(info.dsn, password=info.password or None, autocommit=True,
                                application_name="pg-ttl engine")
    except psycopg.Error:
        return None
    try:
        other.execute(SAME_SETTINGS, ctx.conn.execute(SETTINGS).fetchone())
        owner.become(other, ctx.policy.owner, ctx.policy.name, local=False)
    except BaseException:
        other.close()
        raise
    return other


def _copy_out(conn: psycopg.Connection[Any], stmt: sql.Composed) -> bytes:
    data = bytearray()
    with conn.cursor() as cur, cur.copy(stmt) as copy:
        for block in copy:
            data += block
    return bytes(data)


def _write_range(sweep: _Sweep, lo: int, hi: int, data: bytes, time_column: str | None) -> _Written:
    """In a writer thread: the range's rows (CSV) as objects, one per day, verified.
    ``time_column``: the column that is the rows' instant (else it follows the columns)."""
    done = _Written(lo, hi)
    if not data:
        return done
    extra = {ROW_CTID: "text", ROW_XMIN: "text"} if time_column else \
        {ROW_TIME: "timestamptz", ROW_CTID: "text", ROW_XMIN: "text"}
    rows = parquet.table_from_csv(sweep.columns, data, extra)
    done.rows = rows.num_rows
    ctids, xmins = rows.column(ROW_CTID).to_pylist(), rows.column(ROW_XMIN).to_pylist()
    done.ctids = "{" + ",".join(f'"{c}"' for c in ctids) + "}"
    done.xmins = "{" + ",".join(sorted(set(xmins))) + "}"
    rows = rows.drop_columns([ROW_CTID, ROW_XMIN])
    assert isinstance(sweep.storage, BaseStorage)
    try:
        for day, group, first, last in parquet.by_day(rows, time_column or ROW_TIME, keep=bool(time_column)):
            done.listed.append(_put_object(sweep.ctx, sweep.leaf, group, first, last, day, sweep.tier, sweep.storage))
    except BaseException:
        _remove_objects(sweep.storage, [str(m["key"]) for m in done.listed])
        raise
    return done


def _commit_range(sweep: _Sweep, written: _Written, returning: sql.Composable) -> None:
    """Delete exactly the row versions written and list their objects, in one transaction;
    else undo it and move the range again, deleting first."""
    ctx, conn = sweep.ctx, sweep.ctx.conn
    assert isinstance(sweep.storage, BaseStorage)
    held = False
    try:
        with conn.transaction():
            if written.rows:
                deleted = conn.execute(sql.SQL(
                    "DELETE FROM ONLY {} WHERE ctid = ANY(CAST({} AS pg_catalog.tid[]))"
                    " AND xmin = ANY(CAST({} AS pg_catalog.xid[])) AND {}").format(
                    sweep.leaf.ident, sql.Literal(written.ctids), sql.Literal(written.xmins),
                    sweep.where(written.lo, written.hi))).rowcount
                if deleted != written.rows:
                    raise _Changed(f"{written.rows - deleted} of {written.rows} rows changed since they were read")
                for listed in written.listed:
                    conn.execute(MANIFEST, listed)
            sweep.account(written.lo, written.hi, written.rows, sum(int(m["bytes"]) for m in written.listed),
                          len(written.listed))
    except (_Changed, psycopg.errors.LockNotAvailable, psycopg.errors.SerializationFailure) as exc:
        held = isinstance(exc, psycopg.errors.LockNotAvailable)
    except BaseException:
        _remove_objects(sweep.storage, [str(m["key"]) for m in written.listed])
        raise
    else:
        sweep.counted(written.rows, sum(int(m["bytes"]) for m in written.listed), len(written.listed))
        return
    _remove_objects(sweep.storage, [str(m["key"]) for m in written.listed])
    with conn.transaction():
        moved = _move_as_csv(ctx, sweep.leaf, sweep.columns, returning, sweep.where(written.lo, written.hi),
                             sweep.tier, sweep.storage, skip_locked=held)
        sweep.account(written.lo, written.hi, *moved)
    sweep.counted(*moved)


def _to_postgres_batch(ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], rows: list[tuple[Any, ...]],
                       tier: int, storage: PostgresTarget, where: sql.Composable) -> tuple[int, int, int]:
    """Insert the locked rows into the PostgreSQL storage (committed and verified there),
    record the batch, then delete them; in the caller's transaction. Returns the rows
    deleted, 0 bytes and 1 batch."""
    width = len(columns)
    ctx.conn.execute(MANIFEST, _to_postgres(ctx, leaf, columns, [r[:width] for r in rows],
                                            [r[width + 1] for r in rows], tier, storage))
    return _delete(ctx, leaf, rows, width, where), 0, 1


def _move_as_csv(ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], returning: sql.Composable,
                 where: sql.Composable, tier: int, storage: BaseStorage, *,
                 skip_locked: bool = False) -> tuple[int, int, int]:
    """Delete the range's rows of the tier and write them as Parquet objects (one per day
    of the TTL column, each read back and verified), listed in the manifest; in the
    caller's transaction, which commits them together. One statement deletes the rows and
    returns them as CSV, which Arrow parses without a Python object per value. As the
    deletion runs do (sql/52_delete_rows.sql): a plain DELETE first, under the session's
    short row_lock_timeout (_sweep); if the application holds a row of the range, the
    range again with its rows locked first and the held ones skipped (locking every row
    costs as much as the delete, so only then). Returns the rows deleted, the bytes and
    the objects written."""
    conn = ctx.conn
    plain = sql.SQL("COPY (DELETE FROM ONLY {t} WHERE {w} RETURNING {r}) TO STDOUT (FORMAT csv)").format(
        t=leaf.ident, w=where, r=returning)
    if not skip_locked:
        try:
            with conn.transaction():  # a savepoint: undone when a row is held
                return _write_csv(ctx, leaf, columns, plain, tier, storage)
        except (psycopg.errors.LockNotAvailable, psycopg.errors.SerializationFailure):
            pass  # held by the application, or moved to another partition while we waited on it
    conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true)", (ctx.settings.lock_timeout,))
    locked_first = sql.SQL(
        "COPY (DELETE FROM ONLY {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY {t} WHERE {w}"
        " FOR UPDATE SKIP LOCKED)) RETURNING {r}) TO STDOUT (FORMAT csv)").format(t=leaf.ident, w=where, r=returning)
    return _write_csv(ctx, leaf, columns, locked_first, tier, storage)


def _write_csv(ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], stmt: sql.Composed, tier: int,
               storage: BaseStorage) -> tuple[int, int, int]:
    """Run ``stmt`` (a COPY of the rows it deletes) and write those rows, one object per
    day, each listed in the manifest: the rows, bytes and objects."""
    conn = ctx.conn
    data = bytearray()
    with conn.cursor() as cur:
        with cur.copy(stmt) as copy:
            for block in copy:
                data += block
        deleted = cur.rowcount
    if not deleted:
        return 0, 0, 0
    rows = parquet.table_from_csv(columns, bytes(data), {ROW_TIME: "timestamptz"})
    if rows.num_rows != deleted:
        raise StorageError(f"{deleted} rows were deleted but {rows.num_rows} read: the batch is undone")
    size, objects = 0, 0
    for day, group, lo, hi in parquet.by_day(rows, ROW_TIME):
        listed = _put_object(ctx, leaf, group, lo, hi, day, tier, storage)
        conn.execute(MANIFEST, listed)
        size, objects = size + int(listed["bytes"]), objects + 1
    return deleted, size, objects


def _put_object(ctx: UnitContext, leaf: Unit, rows: Any, lo: Any, hi: Any, day: str, tier: int,
                storage: BaseStorage) -> dict[str, Any]:
    """One object of a day's rows (an Arrow table; ``lo``/``hi``: their earliest and latest
    instant), written whole and verified: the object holds the rows (its Parquet footer's
    count), and the storage holds exactly its bytes (BaseStorage.verify: read back, or S3's
    checksum of what it received); its manifest row, not yet inserted."""
    policy = ctx.policy
    data = parquet.encode_table(rows)
    if parquet.count(data) != rows.num_rows:
        raise StorageError(f"an object of {rows.num_rows} rows was encoded with {parquet.count(data)}")
    key = f"{object_prefix(policy, storage.name)}date={day}/{leaf.relid}-{ctx.run_id}-{uuid.uuid4().hex}.parquet"
    storage.put(key, data)
    storage.verify(key, data)
    return {"relid": policy.relid, "table": policy.name, "tier": tier, "storage": storage.name, "key": key,
            "rows": rows.num_rows, "bytes": len(data), "sha": parquet.sha256(data), "min": lo, "max": hi,
            "run": ctx.run_id}


def _to_postgres(ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], values: list[tuple[Any, ...]],
                 times: list[Any], tier: int, storage: PostgresTarget) -> dict[str, Any]:
    """The batch into the target table, committed and verified there; its manifest row, not
    yet inserted."""
    conn, policy = ctx.conn, ctx.policy
    keys = [str(k) for (k,) in conn.execute(PRIMARY_KEY, (leaf.relid,))]
    target = storage.table(policy.schema, policy.relname)
    found = storage.write(target, columns, keys, values)
    if found != len(values):
        raise StorageError(f'storage "{storage.name}": {found} of {len(values)} rows are in '
                           f"{target.as_string(conn)} after the insert: the batch is undone here")
    digest = parquet.sha256("\n".join(sorted(repr(r) for r in values)).encode())
    return {"relid": policy.relid, "table": policy.name, "tier": tier, "storage": storage.name,
            "key": f"{target.as_string(conn)}#{leaf.relid}-{ctx.run_id}-{uuid.uuid4().hex}",
            "rows": len(values), "bytes": 0, "sha": digest, "min": min(times), "max": max(times),
            "run": ctx.run_id}


def _delete(ctx: UnitContext, leaf: Unit, rows: list[tuple[Any, ...]], width: int, where: sql.Composable) -> int:
    conn = ctx.conn
    ctids = [str(r[width]) for r in rows]
    deleted = conn.execute(sql.SQL("DELETE FROM ONLY {} WHERE ctid = ANY(CAST({} AS pg_catalog.tid[])) AND {}").format(
        leaf.ident, sql.Literal(ctids), where)).rowcount
    if deleted != len(rows):  # locked by us: cannot happen; never keep an object for rows still here
        raise StorageError(f"{len(rows)} rows were archived but {deleted} deleted: the batch is undone")
    return deleted


# -- whole partitions -------------------------------------------------------------------

class _Stays(Exception):
    """The partition cannot be exported whole in this run (why): its rows go batch by batch."""


@dataclass
class _Export:
    """What phase one wrote: the manifest rows to list, the objects to remove if they are not
    listed, and the count and hash sum of every row read (archived or not)."""

    listed: list[dict[str, Any]]
    keys: list[str]
    rows: int = 0
    digest: int = 0
    moved: int = 0
    bytes: int = 0


def _archive_partition(ctx: UnitContext) -> str:
    """A partition every row of which reached storage tier ``unit.tier``: exported whole, then
    dropped or detached; when it cannot be (held, changed, busy, its lock refused), its
    leaves' rows move batch by batch as any leaf's and it stays."""
    conn, unit = ctx.conn, ctx.unit
    leaves = [(Unit(int(oid), str(schema), str(name), "archive"), str(kind))
              for oid, schema, name, kind in conn.execute(WHOLE_LEAVES, (unit.relid,)).fetchall()]
    claimed: list[int] = []
    try:
        # The unit is claimed (engine.run_unit); its leaves too, as the units they would be:
        # no batch of another run is under way in them (objects unlisted are removed here).
        busy: list[Unit] = []
        for leaf, _kind in leaves:
            if leaf.relid == unit.relid:
                continue
            got = conn.execute("SELECT pg_catalog.pg_try_advisory_lock(ttl._claim_key(%s))", (leaf.relid,)).fetchone()
            if got and got[0]:
                claimed.append(leaf.relid)
            else:
                busy.append(leaf)
                history.skip_unit(conn, ctx.run_id, leaf.relid, leaf.name, "busy: another run is working on it")
        tables = [leaf for leaf, kind in leaves if kind == "r" and leaf not in busy]
        if not busy and len(tables) == len(leaves):
            try:
                _export_whole(ctx, tables)
                return "ok"
            except _Stays:
                if ctx.stopping():
                    return "partial"
        conn.execute("UPDATE ttl.run_unit SET strategy = 'ctid' WHERE run_id = %s AND unit_relid = %s",
                     (ctx.run_id, unit.relid))
        status = "ok"
        for leaf in tables:
            if _archive_leaf(ctx, leaf) != "ok":
                status = "partial"
                if ctx.stopping():
                    break
        return status
    finally:
        if not conn.broken:
            for oid in claimed:
                conn.execute("SELECT pg_catalog.pg_advisory_unlock(ttl._claim_key(%s))", (oid,))


def _export_whole(ctx: UnitContext, leaves: list[Unit]) -> None:
    """Export the unit's rows, then list them and drop or detach it in one transaction;
    raises _Stays (nothing listed, nothing removed, its objects gone) when it must stay."""
    conn, policy, unit = ctx.conn, ctx.policy, ctx.unit
    assert unit.tier is not None
    found = conn.execute(TIERS, (policy.relid,)).fetchall()
    storages = {int(position): open_storage(str(name), str(url)) for position, name, url in found}
    storage = storages.get(unit.tier)
    if storage is None:
        raise _Stays(f"tier {unit.tier} is gone")
    # objects an earlier run wrote for these leaves and never listed, in any storage tier;
    # exports an earlier run left prepared in a PostgreSQL one
    for other in storages.values():
        if isinstance(other, PostgresTarget):
            other.resolve(conn)
        else:
            _remove_unlisted(conn, other, object_prefix(policy, other.name), [leaf.relid for leaf in leaves])
    if isinstance(storage, PostgresTarget) and not storage.can_prepare():
        raise _Stays(f'storage "{storage.name}" does not allow prepared transactions now')
    conn.execute("UPDATE ttl.run_unit SET strategy = 'export' WHERE run_id = %s AND unit_relid = %s",
                 (ctx.run_id, unit.relid))
    export = _Export([], [])
    sink = _PostgresExport(ctx, storage, _columns(conn, unit.relid)) if isinstance(storage, PostgresTarget) else None
    try:
        for leaf in leaves:
            _read_leaf(ctx, leaf, storage, export, sink)
        if sink is not None:
            sink.prepare(export)
        _list_and_remove(ctx, leaves, export)
    except BaseException as exc:
        # Nothing listed (the transaction that lists them did not commit: a connection still
        # up says so): its objects go now, its rows in a PostgreSQL storage are rolled back;
        # else the next run does it.
        if not conn.broken:
            if sink is not None:
                sink.abandon()
            else:
                assert isinstance(storage, BaseStorage)
                _remove_objects(storage, export.keys)
        if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.DeadlockDetected):
            raise _Stays(f"locked: {exc.diag.message_primary or exc}") from exc
        raise
    if sink is not None:
        sink.commit()
    _count_moved(ctx.run_id, unit.relid, storage.name, unit.tier, export.moved, export.bytes, len(export.listed))
    ctx.selected += export.moved
    ctx.deleted += export.moved
    ctx.progress.batch_done(policy.name, unit.name, export.moved, export.moved)


def _hash_sql(columns: list[parquet.Column]) -> sql.Composable:
    """A 64-bit hash of a row's values (their text form), the same for every leaf."""
    return sql.SQL("pg_catalog.hashtextextended(CAST(ROW({}) AS pg_catalog.text), 0)").format(
        sql.SQL(", ").join(sql.Identifier(c.name) for c in columns))


def _read_leaf(ctx: UnitContext, leaf: Unit, storage: BaseStorage | PostgresTarget, export: _Export,
               sink: _PostgresExport | None) -> None:
    """Phase one, for one leaf: its rows read in row ranges (short transactions, no row
    lock), the ones to archive written as objects (or into the open transaction of a
    PostgreSQL storage, ``sink``); counted and hashed."""
    conn, policy, unit = ctx.conn, ctx.policy, ctx.unit
    assert unit.tier is not None
    columns = _columns(conn, unit.relid)  # the partition's columns, by name in every leaf
    width = len(columns)
    row = conn.execute("SELECT ttl.row_time_sql(%s), ttl.partition_tier_sql(%s, %s)",
                       (policy.relid, policy.relid, ctx.pred.cutoff)).fetchone()
    assert row is not None and row[0] is not None and row[1] is not None
    # the values, the row's instant, its day, whether it goes to storage, its hash
    day = sql.SQL("pg_catalog.to_char(({}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')").format(sql.SQL(row[0]))
    select = sql.SQL(", ").join([*_values(columns), sql.SQL(row[0]), day, sql.SQL(row[1]), _hash_sql(columns)])
    size = conn.execute(SIZE, (leaf.relid, leaf.relid)).fetchone()
    assert size is not None
    nblocks, per_block = int(size[0] or 0), float(size[1] or 100)
    step = max(1, int(policy.select_batch_size / per_block))
    buffered: list[tuple[Any, ...]] = []
    block = 0
    while block < nblocks:
        if ctx.stopping():
            raise _Stays("stopped")
        rows = conn.execute(sql.SQL(
            "SELECT {} FROM ONLY {} WHERE ctid >= CAST({} AS pg_catalog.tid) AND ctid < CAST({} AS pg_catalog.tid)"
        ).format(select, leaf.ident, sql.Literal(f"({block},0)"), sql.Literal(f"({block + step},0)"))).fetchall()
        for r in rows:
            export.rows += 1
            export.digest += int(r[width + 3])
            if r[width + 2]:
                buffered.append(r)
        ctx.select_limiter.add(len(rows))
        if len(buffered) >= OBJECT_ROWS:
            _write(ctx, leaf, columns, buffered, storage, export, sink)
            buffered = []
        block += step
    if buffered:
        _write(ctx, leaf, columns, buffered, storage, export, sink)


def _write(ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], rows: list[tuple[Any, ...]],
           storage: BaseStorage | PostgresTarget, export: _Export, sink: _PostgresExport | None) -> None:
    """Rows of a partition exported whole, written (one object per day, at most OBJECT_ROWS
    rows each) and verified, or inserted into a PostgreSQL storage's open transaction;
    listed later."""
    unit = ctx.unit
    assert unit.tier is not None
    width = len(columns)
    if sink is not None:
        sink.add([r[:width] for r in rows], [r[width] for r in rows])
        export.moved += len(rows)
        return
    assert isinstance(storage, BaseStorage)
    for start in range(0, len(rows), OBJECT_ROWS):
        chunk = rows[start:start + OBJECT_ROWS]
        by_day: dict[str, list[tuple[Any, ...]]] = {}
        for r in chunk:
            by_day.setdefault(r[width + 1], []).append(r)
        for day, group in sorted(by_day.items()):
            times = [r[width] for r in group]
            listed = _put_object(ctx, leaf, parquet.table(columns, [r[:width] for r in group]), min(times),
                                 max(times), day, unit.tier, storage)
            export.keys.append(str(listed["key"]))
            export.listed.append(listed)
            export.moved += len(group)
            export.bytes += int(listed["bytes"])


def _list_and_remove(ctx: UnitContext, leaves: list[Unit], export: _Export) -> None:
    """Phase two, one transaction: the partition locked against writers (NOWAIT: a row the
    application holds, or a write under way, refuses it), judged again, checked to hold
    exactly the rows written, its objects listed, the partition dropped or detached and the
    unit's history row finished."""
    conn, policy, unit = ctx.conn, ctx.policy, ctx.unit
    columns = _columns(conn, unit.relid)
    with conn.transaction():
        conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE NOWAIT").format(unit.ident))
        bound = conn.execute("SELECT pg_catalog.pg_get_expr(c.relpartbound, 0) FROM pg_catalog.pg_class c"
                             " WHERE c.oid = %s", (unit.relid,)).fetchone()
        upper = upper_bound(str(bound[0])) if bound and bound[0] is not None else None
        tier = conn.execute("SELECT ttl.partition_tier(%s, %s, %s)",
                            (policy.relid, ctx.pred.cutoff, upper)).fetchone() if upper is not None else None
        if bound is None or bound[0] != unit.bound or tier is None or tier[0] != unit.tier:
            raise _Stays("its bound or the tiers changed during the run")
        rows, digest = 0, 0
        hashed = _hash_sql(columns)
        for leaf in leaves:
            size = conn.execute(SIZE, (leaf.relid, leaf.relid)).fetchone()
            assert size is not None
            for block in range(0, int(size[0] or 0), CHECK_BLOCKS):
                got = conn.execute(sql.SQL(
                    "SELECT count(*), coalesce(sum(CAST({} AS pg_catalog.numeric)), 0) FROM ONLY {}"
                    " WHERE ctid >= CAST({} AS pg_catalog.tid) AND ctid < CAST({} AS pg_catalog.tid)").format(
                    hashed, leaf.ident, sql.Literal(f"({block},0)"),
                    sql.Literal(f"({block + CHECK_BLOCKS},0)"))).fetchone()
                assert got is not None
                rows, digest = rows + int(got[0]), digest + int(got[1])
        if (rows, digest) != (export.rows, export.digest):
            raise _Stays(f"written to while it was exported ({export.rows} rows read, {rows} there now)")
        for listed in export.listed:
            conn.execute(MANIFEST, listed)
        action = partitions.remove_in_transaction(ctx)
        conn.execute(ACCOUNT_WHOLE, {"action": action, "n": export.moved, "bytes": export.bytes,
                                     "objects": len(export.listed), "run_id": ctx.run_id, "unit": unit.relid})
        conn.execute("SELECT ttl._finish_unit(%s, %s, 'ok', NULL)", (ctx.run_id, unit.relid))
    ctx.removed = action  # committed


class _PostgresExport:
    """A partition's rows going to a PostgreSQL storage in one transaction there: inserted
    (rows whose key is there already: skipped) and checked, then prepared (PREPARE
    TRANSACTION: durable, not visible) before the source lists the export and drops the
    partition, and committed after that. The unit's checkpoint names the prepared
    transaction first, so a run that ends in between leaves one the next run decides from
    the manifest (PostgresTarget.resolve)."""

    def __init__(self, ctx: UnitContext, storage: PostgresTarget, columns: list[parquet.Column]) -> None:
        self.ctx, self.storage, self.columns = ctx, storage, columns
        self.keys = [str(k) for (k,) in ctx.conn.execute(PRIMARY_KEY, (ctx.policy.relid,))]
        self.target = storage.table(ctx.policy.schema, ctx.policy.relname)
        storage.ensure(self.target, columns, self.keys)
        self.gid = f"{storage.PREPARED}{uuid.uuid4().hex}"
        self.conn = storage.connect()
        self.conn.autocommit = False
        self.prepared = self.committed = False
        self.rows, self.first, self.last = 0, None, None
        self.digest = hashlib.sha256()

    def add(self, values: list[tuple[Any, ...]], times: list[Any]) -> None:
        try:
            self.storage.insert(self.conn, self.target, self.columns, values)
            found = self.storage.found(self.conn, self.target, self.columns, self.keys, values)
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.storage.name}": {str(exc).strip()}') from exc
        if found != len(values):
            raise StorageError(f'storage "{self.storage.name}": {found} of {len(values)} rows are in '
                               f"{self.target.as_string(self.conn)} after the insert: the export is undone")
        self.rows += len(values)
        self.first = min([t for t in (self.first, *times) if t is not None])
        self.last = max([t for t in (self.last, *times) if t is not None])
        for r in values:
            self.digest.update(repr(r).encode())

    def prepare(self, export: _Export) -> None:
        """Name the transaction in the unit's checkpoint (committed), then prepare it; its
        manifest row joins the export's."""
        ctx = self.ctx
        ctx.conn.execute("UPDATE ttl.run_unit SET checkpoint = %s WHERE run_id = %s AND unit_relid = %s",
                         (Jsonb({"strategy": "export", "prepared": self.gid}), ctx.run_id, ctx.unit.relid))
        try:
            self.conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(self.gid)))
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.storage.name}": {str(exc).strip()}') from exc
        self.prepared = True
        self.conn.close()
        if self.rows:
            export.listed.append({
                "relid": ctx.policy.relid, "table": ctx.policy.name, "tier": ctx.unit.tier,
                "storage": self.storage.name, "key": f"{self.target.as_string(ctx.conn)}#{self.gid}",
                "rows": self.rows, "bytes": 0, "sha": self.digest.hexdigest(), "min": self.first, "max": self.last,
                "run": ctx.run_id})

    def commit(self) -> None:
        """After the source committed: the rows become visible there (or, if this fails, at
        the next run's PostgresTarget.resolve)."""
        with contextlib.suppress(StorageError):
            self.storage.finish_prepared(self.gid, commit=True)

    def abandon(self) -> None:
        """The export did not happen: its rows there go (best effort: else the next run)."""
        if self.prepared:
            with contextlib.suppress(StorageError):
                self.storage.finish_prepared(self.gid, commit=False)
        elif not self.conn.closed:
            with contextlib.suppress(psycopg.Error):
                self.conn.rollback()
            self.conn.close()


def _remove_objects(storage: BaseStorage, keys: list[str]) -> None:
    """Objects written and never listed (best effort: the next run removes what is left)."""
    for key in keys:
        with contextlib.suppress(StorageError):
            storage.delete(key)


def _remove_unlisted(conn: psycopg.Connection[Any], storage: BaseStorage, prefix: str, leaves: list[int]) -> None:
    """Objects of these leaves the manifest does not list: written by a batch (or a whole
    partition's export) that never committed (we hold the leaves' claims: none is under way)."""
    mine = tuple(name for leaf in leaves for name in (f"{leaf}-", f".partial-{leaf}-"))
    keys = [k for k in storage.list(prefix) if k.rsplit("/", 1)[-1].startswith(mine)]
    if not keys:
        return
    listed = {str(k) for (k,) in conn.execute("SELECT object_key FROM ttl.archive WHERE object_key = ANY(%s)",
                                              (keys,))}
    for key in keys:
        if key not in listed:  # a .partial- file is never listed
            storage.delete(key)
