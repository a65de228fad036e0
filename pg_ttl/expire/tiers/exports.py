"""A range partition every row of which reached a storage tier, exported whole, then
dropped or detached in the transaction that lists its objects (or, to a PostgreSQL
storage, its transaction prepared there); when it must stay, its rows move batch by
batch (batches.py). Docs: docs/tiers.md, "Whole partitions"."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pg_ttl.archive import parquet
from pg_ttl.archive.postgres import PostgresTarget
from pg_ttl.archive.storage import BaseStorage, StorageError, open_storage
from pg_ttl.expire import history, partitions
from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.tiers.batches import SIZE, archive_leaf
from pg_ttl.expire.tiers.listing import TIERS
from pg_ttl.expire.tiers.objects import (
    MANIFEST,
    PRIMARY_KEY,
    column_values,
    count_moved,
    leaf_columns,
    object_prefix,
    put_object,
    remove_objects,
    remove_unlisted,
)
from pg_ttl.expire.units import Unit, upper_bound

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


# A whole partition's rows go to storage in objects of at most this many rows (one object per
# day of the TTL column, as batches): they are held in memory until written.
OBJECT_ROWS = 100_000


# Blocks per statement of the check made under the partition's lock (each statement stays
# well within statement_timeout; the lock is held for all of them).
CHECK_BLOCKS = 8192


class _Stays(Exception):
    """The partition cannot be exported whole in this run (why): its rows go batch by batch."""


@dataclass
class _Export:
    """What phase one wrote: the manifest rows to list (their objects are removed if they are
    not listed), and the count and hash sum of every row read (archived or not)."""

    listed: list[dict[str, Any]] = field(default_factory=list)
    rows: int = 0
    digest: int = 0
    moved: int = 0
    bytes: int = 0


def archive_partition(ctx: UnitContext) -> str:
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
            if archive_leaf(ctx, leaf) != "ok":
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
            remove_unlisted(conn, other, object_prefix(policy, other.name), [leaf.relid for leaf in leaves])
    if isinstance(storage, PostgresTarget) and not storage.can_prepare():
        raise _Stays(f'storage "{storage.name}" does not allow prepared transactions now')
    conn.execute("UPDATE ttl.run_unit SET strategy = 'export' WHERE run_id = %s AND unit_relid = %s",
                 (ctx.run_id, unit.relid))
    export = _Export()
    sink = None
    if isinstance(storage, PostgresTarget):
        sink = _PostgresExport(ctx, storage, leaf_columns(conn, unit.relid))
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
                remove_objects(storage, [str(m["key"]) for m in export.listed])
        if isinstance(exc, psycopg.errors.LockNotAvailable | psycopg.errors.DeadlockDetected):
            raise _Stays(f"locked: {exc.diag.message_primary or exc}") from exc
        raise
    if sink is not None:
        sink.commit()
    count_moved(ctx.run_id, unit.relid, storage.name, unit.tier, export.moved, export.bytes, len(export.listed))
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
    columns = leaf_columns(conn, unit.relid)  # the partition's columns, by name in every leaf
    width = len(columns)
    row = conn.execute("SELECT ttl.row_time_sql(%s), ttl.partition_tier_sql(%s, %s)",
                       (policy.relid, policy.relid, ctx.pred.cutoff)).fetchone()
    assert row is not None and row[0] is not None and row[1] is not None
    # the values, the row's instant, its day, whether it goes to storage, its hash
    day = sql.SQL("pg_catalog.to_char(({}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')").format(sql.SQL(row[0]))
    select = sql.SQL(", ").join([*column_values(columns), sql.SQL(row[0]), day, sql.SQL(row[1]), _hash_sql(columns)])
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
            listed = put_object(ctx, leaf, parquet.table(columns, [r[:width] for r in group]), min(times),
                                 max(times), day, unit.tier, storage)
            export.listed.append(listed)
            export.moved += len(group)
            export.bytes += int(listed["bytes"])


def _list_and_remove(ctx: UnitContext, leaves: list[Unit], export: _Export) -> None:
    """Phase two, one transaction: the partition locked against writers (NOWAIT: a row the
    application holds, or a write under way, refuses it), judged again, checked to hold
    exactly the rows written, its objects listed, the partition dropped or detached and the
    unit's history row finished."""
    conn, policy, unit = ctx.conn, ctx.policy, ctx.unit
    columns = leaf_columns(conn, unit.relid)
    with conn.transaction():
        # Locked by oid, and checked to be still the partition read (the application may have
        # detached it, moved it to another table or renamed it meanwhile).
        try:
            parent, table, _schema = partitions.in_place(ctx, "export")
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            raise _Stays(exc.diag.message_primary or str(exc)) from None
        if table != unit.ident or parent != unit.parent:
            raise _Stays("renamed during the run")
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
        conn.cursor().executemany(MANIFEST, export.listed)
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
        self.prepared = False
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
