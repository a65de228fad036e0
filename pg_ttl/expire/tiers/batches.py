"""A leaf's rows that reached a storage tier, moved range by range (block ranges of about
``select_batch_size`` rows), each range in one short transaction that deletes them and
lists what holds them. Docs: docs/tiers.md, "How rows move"."""

from __future__ import annotations

import contextlib
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pg_ttl.archive import parquet
from pg_ttl.archive.postgres import PostgresTarget
from pg_ttl.archive.storage import BaseStorage, StorageError, open_storage
from pg_ttl.expire import owner
from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.ranges import set_lock_timeout
from pg_ttl.expire.tiers.listing import TIERS
from pg_ttl.expire.tiers.objects import (
    MANIFEST,
    PRIMARY_KEY,
    ROW_TIME,
    column_values,
    count_moved,
    leaf_columns,
    object_prefix,
    put_object,
    remove_objects,
    remove_unlisted,
)
from pg_ttl.expire.units import Unit

ACCOUNT = """
UPDATE ttl.run_unit SET rows_selected = rows_selected + %(n)s, rows_deleted = rows_deleted + %(n)s,
       bytes_archived = bytes_archived + %(bytes)s, objects_archived = objects_archived + %(objects)s,
       checkpoint = %(cp)s
 WHERE run_id = %(run_id)s AND unit_relid = %(unit)s
"""


SIZE = """
SELECT pg_catalog.pg_relation_size(%s::oid::regclass) / pg_catalog.current_setting('block_size')::int8,
       (SELECT CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages ELSE 100 END
          FROM pg_catalog.pg_class WHERE oid = %s)
"""




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


# (run id, storage) whose prepared exports this process has resolved (PostgresTarget.resolve)
_resolved: set[tuple[int, str]] = set()


def archive_leaf(ctx: UnitContext, leaf: Unit) -> str:
    """Sweep one leaf (the unit, or a leaf of a partition that stays) tier by tier."""
    conn, policy = ctx.conn, ctx.policy
    columns = leaf_columns(conn, leaf.relid)
    row = conn.execute("SELECT ttl.row_time_sql(%s)", (policy.relid,)).fetchone()
    assert row is not None and row[0] is not None
    # a PostgreSQL storage's batch: the rows, their ctid and instant; a Parquet one's: the rows
    # and their instant (as the DELETE returns them)
    select = sql.SQL(", ").join([*column_values(columns), sql.SQL("ctid"), sql.SQL(row[0])])
    returning = sql.SQL(", ").join([*column_values(columns), sql.SQL(row[0])])
    cp = ctx.checkpoint if (ctx.checkpoint or {}).get("strategy") == "archive" else None
    if cp is not None and int(cp.get("leaf", ctx.unit.relid)) != leaf.relid:
        cp = None  # another leaf's
    for position, storage_name, url in conn.execute(TIERS, (policy.relid,)).fetchall():
        if cp is not None and position < cp["tier"]:
            continue
        storage = open_storage(str(storage_name), str(url))
        if not isinstance(storage, PostgresTarget):
            remove_unlisted(conn, storage, object_prefix(policy, str(storage_name)), [leaf.relid])
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
    # Rows per range: to a PostgreSQL storage they are locked while they are written, as a
    # deletion run's select batch (select_batch_size); to objects they are read without a
    # lock, and the range sets the objects' size (one per day of its rows) and its DELETE's
    # (archive_batch_size)
    per_range = ctx.policy.select_batch_size
    if isinstance(storage, BaseStorage):
        found = conn.execute("SELECT archive_batch_size FROM ttl.policy WHERE relid = %s",
                             (ctx.policy.relid,)).fetchone()
        per_range = int(found[0]) if found else per_range
    step = max(1, int(per_range / per_block))
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
    the transactions that wrote the rows as they were read (their xmin), an xid[] literal."""

    lo: int
    hi: int
    rows: int = 0
    listed: list[dict[str, Any]] = field(default_factory=list)
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
        # the leaf's file when its sweep began: a rewrite (VACUUM FULL, CLUSTER) moves rows to
        # other ctids with their xmin, so (ctid range, xmin) no longer names the rows read
        self.filenode: int | None = None
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
            count_moved(ctx.run_id, ctx.unit.relid, self.storage.name, self.tier, n, size, objects)
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
    deleted and the objects listed. They are the range's rows of the tier written by a
    transaction that wrote a row read (xmin): a row version written later is another
    transaction's (one that had committed before the read wrote nothing after it, and
    everything it wrote, visible to the read, was read if it was of the tier: the tier's
    condition compares the column with constants), so a row updated, deleted or held since
    it was read is not deleted, and the count of rows deleted says so. If any of them was
    not deleted, the transaction is undone, the objects removed and the range moved again
    with its rows deleted first (move_as_csv).
    The ranges commit in order: the checkpoint never passes a range not done."""
    ctx, conn = sweep.ctx, sweep.ctx.conn
    assert isinstance(sweep.storage, BaseStorage)
    storage = sweep.storage
    # the rows' instant: one of their columns (a timestamptz TTL column), else read after them
    row = conn.execute(ROW_TIME_COLUMN, (sweep.leaf.relid, ctx.policy.relid)).fetchone()
    assert row is not None and row[0] is not None
    time_column = str(row[1]) if row[1] is not None else None
    read = sql.SQL(", ").join([*column_values(sweep.columns), *([] if time_column else [sql.SQL(row[0])]),
                               sql.SQL("xmin")])
    parquet.load()  # outside the batches' transactions
    found = conn.execute("SELECT pg_catalog.pg_relation_filenode(%s)", (sweep.leaf.relid,)).fetchone()
    sweep.filenode = int(found[0]) if found and found[0] is not None else None
    reader = _second_session(ctx)
    reading = threading.Lock()  # one COPY at a time on the reader's session

    def read_range(session: psycopg.Connection[Any], lo: int, hi: int) -> bytes:
        with reading:
            return _copy_out(session, sql.SQL("COPY (SELECT {} FROM ONLY {} WHERE {}) TO STDOUT (FORMAT csv)")
                             .format(read, sweep.leaf.ident, sweep.where(lo, hi)))[0]

    def read_and_write(lo: int, hi: int) -> _Written:
        assert reader is not None
        return _write_range(sweep, lo, hi, read_range(reader, lo, hi), time_column)

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
                    pending.append(pool.submit(_write_range, sweep, lo, hi, read_range(conn, lo, hi), time_column))
                else:
                    pending.append(pool.submit(read_and_write, lo, hi))
                if len(pending) > READ_AHEAD:
                    _commit_range(sweep, pending.pop(0).result(), returning)
            while pending:
                _commit_range(sweep, pending.pop(0).result(), returning)
    except BaseException:
        for future in pending:  # written, never listed: removed now (else by the next run)
            with contextlib.suppress(Exception):
                remove_objects(storage, [str(m["key"]) for m in future.result().listed])
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


def _copy_out(conn: psycopg.Connection[Any], stmt: sql.Composed) -> tuple[bytes, int]:
    """What a ``COPY ... TO STDOUT`` sends, and its row count."""
    data = bytearray()
    with conn.cursor() as cur:
        with cur.copy(stmt) as copy:
            for block in copy:
                data += block
        return bytes(data), cur.rowcount


def _put_objects(ctx: UnitContext, leaf: Unit, rows: Any, time: str, keep: bool, tier: int,
                 storage: BaseStorage) -> list[dict[str, Any]]:
    """The rows (an Arrow table) as objects, one per day of their ``time`` column (kept in
    them if ``keep``), each verified: their manifest rows, not yet inserted. Those written
    are removed if one fails."""
    listed: list[dict[str, Any]] = []
    try:
        for day, group, first, last in parquet.by_day(rows, time, keep=keep):
            listed.append(put_object(ctx, leaf, group, first, last, day, tier, storage))
    except BaseException:
        remove_objects(storage, [str(m["key"]) for m in listed])
        raise
    return listed


def _write_range(sweep: _Sweep, lo: int, hi: int, data: bytes, time_column: str | None) -> _Written:
    """In a writer thread: the range's rows (CSV) as objects, one per day, verified.
    ``time_column``: the column that is the rows' instant (else it follows the columns)."""
    done = _Written(lo, hi)
    if not data:
        return done
    extra = {ROW_XMIN: "text"} if time_column else {ROW_TIME: "timestamptz", ROW_XMIN: "text"}
    rows = parquet.table_from_csv(sweep.columns, data, extra)
    done.rows = rows.num_rows
    done.xmins = "{" + ",".join(parquet.load().compute.unique(rows.column(ROW_XMIN)).to_pylist()) + "}"
    rows = rows.drop_columns([ROW_XMIN])
    assert isinstance(sweep.storage, BaseStorage)
    done.listed = _put_objects(sweep.ctx, sweep.leaf, rows, time_column or ROW_TIME, bool(time_column), sweep.tier,
                               sweep.storage)
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
                    "DELETE FROM ONLY {} WHERE xmin = ANY(CAST({} AS pg_catalog.xid[])) AND {}").format(
                    sweep.leaf.ident, sql.Literal(written.xmins), sweep.where(written.lo, written.hi))).rowcount
                # under the DELETE's lock no rewrite can happen before the commit
                now = conn.execute("SELECT pg_catalog.pg_relation_filenode(%s)", (sweep.leaf.relid,)).fetchone()
                if now is None or now[0] is None or int(now[0]) != sweep.filenode:
                    raise _Changed("the table was rewritten (VACUUM FULL, CLUSTER) since its rows were read")
                if deleted != written.rows:
                    raise _Changed(f"{written.rows - deleted} of {written.rows} rows changed since they were read")
                conn.cursor().executemany(MANIFEST, written.listed)
            sweep.account(written.lo, written.hi, written.rows, sum(int(m["bytes"]) for m in written.listed),
                          len(written.listed))
    except (_Changed, psycopg.errors.LockNotAvailable, psycopg.errors.SerializationFailure) as exc:
        held = isinstance(exc, psycopg.errors.LockNotAvailable)
    except BaseException:
        # a connection lost may have lost the answer to a COMMIT the server did: the objects
        # may be listed; the next run removes them if they are not (remove_unlisted)
        if not conn.broken:
            remove_objects(sweep.storage, [str(m["key"]) for m in written.listed])
        raise
    else:
        sweep.counted(written.rows, sum(int(m["bytes"]) for m in written.listed), len(written.listed))
        return
    remove_objects(sweep.storage, [str(m["key"]) for m in written.listed])
    with conn.transaction():
        moved = move_as_csv(ctx, sweep.leaf, sweep.columns, returning, sweep.where(written.lo, written.hi),
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


def move_as_csv(ctx: UnitContext, leaf: Unit, columns: list[parquet.Column], returning: sql.Composable,
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
    data, deleted = _copy_out(ctx.conn, stmt)
    if not deleted:
        return 0, 0, 0
    rows = parquet.table_from_csv(columns, data, {ROW_TIME: "timestamptz"})
    if rows.num_rows != deleted:
        raise StorageError(f"{deleted} rows were deleted but {rows.num_rows} read: the batch is undone")
    listed = _put_objects(ctx, leaf, rows, ROW_TIME, False, tier, storage)
    ctx.conn.cursor().executemany(MANIFEST, listed)
    return deleted, sum(int(m["bytes"]) for m in listed), len(listed)


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
