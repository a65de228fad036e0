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
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pg_ttl.archive import parquet
from pg_ttl.archive.postgres import PostgresTarget
from pg_ttl.archive.storage import BaseStorage, StorageError, open_storage
from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.orphans import LEAVES
from pg_ttl.expire.predicate import EnginePolicy
from pg_ttl.expire.units import Unit

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


def has_tiers(conn: psycopg.Connection[Any], relid: int) -> bool:
    return conn.execute("SELECT 1 FROM ttl.tier WHERE relid = %s LIMIT 1", (relid,)).fetchone() is not None


def archives_before_delete(conn: psycopg.Connection[Any], relid: int) -> bool:
    """Rows past the DELETE are archived first (the deletion waits for a complete archive run)."""
    return conn.execute("SELECT 1 FROM ttl.tier WHERE relid = %s AND archive_before_delete LIMIT 1",
                        (relid,)).fetchone() is not None


def archive_units(conn: psycopg.Connection[Any], policy: EnginePolicy) -> list[Unit]:
    """Every leaf of the table (or the table itself)."""
    return [Unit(int(oid), str(schema), str(name), "archive")
            for oid, schema, name in conn.execute(LEAVES, {"t": policy.relid}).fetchall()]


def object_prefix(policy: EnginePolicy, storage: str) -> str:
    return f"table={policy.schema}.{policy.relname}/tier={storage}/"


def archive(ctx: UnitContext) -> str:
    """Move the unit's rows that reached a storage tier; 'ok' or 'partial' (stopped)."""
    conn, policy, unit = ctx.conn, ctx.policy, ctx.unit
    columns = [parquet.Column(str(n), str(t), str(f), int(m)) for n, t, f, m in conn.execute(COLUMNS, (unit.relid,))]
    row = conn.execute("SELECT ttl.row_time_sql(%s)", (policy.relid,)).fetchone()
    assert row is not None and row[0] is not None
    select = sql.SQL(", ").join(
        [sql.SQL("CAST({} AS pg_catalog.text)").format(sql.Identifier(c.name)) if c.as_text
         else sql.Identifier(c.name) for c in columns]
        + [sql.SQL("ctid"), sql.SQL(row[0]),
           sql.SQL("pg_catalog.to_char(({}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')").format(sql.SQL(row[0]))])
    cp = ctx.checkpoint if (ctx.checkpoint or {}).get("strategy") == "archive" else None
    for position, storage_name, url in conn.execute(TIERS, (policy.relid,)).fetchall():
        if cp is not None and position < cp["tier"]:
            continue
        storage = open_storage(str(storage_name), str(url))
        if not isinstance(storage, PostgresTarget):
            _remove_unlisted(conn, storage, object_prefix(policy, str(storage_name)), unit.relid)
        pred = conn.execute("SELECT ttl.tier_sql(%s, %s, %s)", (policy.relid, position, ctx.pred.cutoff)).fetchone()
        assert pred is not None
        block = int(cp["from"]) if cp is not None and cp["tier"] == position else 0
        cp = None
        # This tier also takes the rows past the DELETE (archive_before_delete): the deletion run
        # waits for an archive run that left none of them behind (sql/82_tiers.sql).
        before_delete = conn.execute("SELECT archive_before_delete FROM ttl.tier WHERE relid = %s AND position = %s",
                                     (policy.relid, position)).fetchone()
        done = _sweep(ctx, columns, select, sql.SQL(pred[0]), int(position), storage, block,
                      count_left=bool(before_delete and before_delete[0]))
        if done != "ok":
            return done
    return "ok"


def _sweep(ctx: UnitContext, columns: list[parquet.Column], select: sql.Composable, pred: sql.Composable,
           tier: int, storage: BaseStorage | PostgresTarget, block: int, *, count_left: bool = False) -> str:
    """'ok', or 'partial': stopped, or (``count_left``) rows of a range were left behind, held by
    the application (SKIP LOCKED)."""
    conn, unit = ctx.conn, ctx.unit
    first_left: int | None = None  # the first range where the application held rows
    size = conn.execute("SELECT pg_catalog.pg_relation_size(%s::oid::regclass) / "
                        "pg_catalog.current_setting('block_size')::int8, "
                        "(SELECT CASE WHEN relpages > 0 AND reltuples > 0 THEN reltuples / relpages ELSE 100 END"
                        "   FROM pg_catalog.pg_class WHERE oid = %s)", (unit.relid, unit.relid)).fetchone()
    assert size is not None
    nblocks, per_block = int(size[0] or 0), float(size[1] or 100)
    # select_batch_size rows per range: an object per day of them, written, synced and
    # read back, costs much more per object than per row
    step = max(1, int(ctx.policy.select_batch_size / per_block))
    while block < nblocks:
        if ctx.stopping():
            return "partial"
        hi = block + step
        where = sql.SQL("ctid >= CAST({} AS pg_catalog.tid) AND ctid < CAST({} AS pg_catalog.tid) AND {}").format(
            sql.Literal(f"({block},0)"), sql.Literal(f"({hi},0)"), pred)
        with conn.transaction():
            rows = conn.execute(sql.SQL("SELECT {} FROM ONLY {} WHERE {} FOR UPDATE SKIP LOCKED").format(
                select, unit.ident, where)).fetchall()
            n, size, objects = _move(ctx, columns, rows, tier, storage, where) if rows else (0, 0, 0)
            if count_left and first_left is None and conn.execute(sql.SQL(
                    "SELECT 1 FROM ONLY {} WHERE {} LIMIT 1").format(unit.ident, where)).fetchone() is not None:
                first_left = block
            conn.execute(ACCOUNT, {"n": n, "bytes": size, "objects": objects, "run_id": ctx.run_id,
                                   "unit": unit.relid,
                                   "cp": Jsonb({"strategy": "archive", "tier": tier, "from": hi})})
        if n:  # committed
            _count_moved(ctx.run_id, unit.relid, storage.name, tier, n, size, objects)
        ctx.selected += n
        ctx.deleted += n
        ctx.progress.batch_done(ctx.policy.name, unit.name, n, n)
        ctx.delete_limiter.add(n)
        block = hi
    if first_left is None:
        return "ok"
    # Resumed from there: a later range's checkpoint must not skip the rows left behind.
    conn.execute(ACCOUNT, {"n": 0, "bytes": 0, "objects": 0, "run_id": ctx.run_id, "unit": unit.relid,
                           "cp": Jsonb({"strategy": "archive", "tier": tier, "from": first_left})})
    return "partial"


def _move(ctx: UnitContext, columns: list[parquet.Column], rows: list[tuple[Any, ...]], tier: int,
          storage: BaseStorage | PostgresTarget, where: sql.Composable) -> tuple[int, int, int]:
    """Write, verify and record the rows (one object per day of the TTL column, or one
    batch into a PostgreSQL table), then delete them; in the caller's transaction.
    Returns the rows deleted, the bytes and the objects written."""
    conn, policy, unit = ctx.conn, ctx.policy, ctx.unit
    width = len(columns)
    if isinstance(storage, PostgresTarget):
        _to_postgres(ctx, columns, rows, tier, storage)
        return _delete(ctx, rows, width, where), 0, 1
    size = 0
    by_day: dict[str, list[tuple[Any, ...]]] = {}
    for r in rows:
        by_day.setdefault(r[width + 2], []).append(r)
    for day, group in sorted(by_day.items()):
        data = parquet.encode(columns, [r[:width] for r in group])
        key = f"{object_prefix(policy, storage.name)}date={day}/{unit.relid}-{ctx.run_id}-{uuid.uuid4().hex}.parquet"
        storage.put(key, data)
        back = storage.get(key)
        if len(back) != len(data) or parquet.sha256(back) != parquet.sha256(data) or parquet.count(back) != len(group):
            raise StorageError(f'storage "{storage.name}": object {key} read back differs from what was written')
        times = [r[width + 1] for r in group]
        conn.execute(MANIFEST, {"relid": policy.relid, "table": policy.name, "tier": tier, "storage": storage.name,
                                "key": key, "rows": len(group), "bytes": len(data), "sha": parquet.sha256(data),
                                "min": min(times), "max": max(times), "run": ctx.run_id})
        size += len(data)
    return _delete(ctx, rows, width, where), size, len(by_day)


def _to_postgres(ctx: UnitContext, columns: list[parquet.Column], rows: list[tuple[Any, ...]], tier: int,
                 storage: PostgresTarget) -> None:
    """The batch into the target table, committed and verified there, then its manifest row."""
    conn, policy, unit = ctx.conn, ctx.policy, ctx.unit
    keys = [str(k) for (k,) in conn.execute(PRIMARY_KEY, (unit.relid,))]
    width = len(columns)
    target = storage.table(policy.schema, policy.relname)
    found = storage.write(target, columns, keys, [r[:width] for r in rows])
    if found != len(rows):
        raise StorageError(f'storage "{storage.name}": {found} of {len(rows)} rows are in {target.as_string(conn)} '
                           "after the insert: the batch is undone here")
    times = [r[width + 1] for r in rows]
    digest = parquet.sha256("\n".join(sorted(repr(r[:width]) for r in rows)).encode())
    conn.execute(MANIFEST, {"relid": policy.relid, "table": policy.name, "tier": tier, "storage": storage.name,
                            "key": f"{target.as_string(conn)}#{unit.relid}-{ctx.run_id}-{uuid.uuid4().hex}",
                            "rows": len(rows), "bytes": 0, "sha": digest, "min": min(times), "max": max(times),
                            "run": ctx.run_id})


def _delete(ctx: UnitContext, rows: list[tuple[Any, ...]], width: int, where: sql.Composable) -> int:
    conn, unit = ctx.conn, ctx.unit
    ctids = [str(r[width]) for r in rows]
    deleted = conn.execute(sql.SQL("DELETE FROM ONLY {} WHERE ctid = ANY(CAST({} AS pg_catalog.tid[])) AND {}").format(
        unit.ident, sql.Literal(ctids), where)).rowcount
    if deleted != len(rows):  # locked by us: cannot happen; never keep an object for rows still here
        raise StorageError(f"{len(rows)} rows were archived but {deleted} deleted: the batch is undone")
    return deleted


def _remove_unlisted(conn: psycopg.Connection[Any], storage: BaseStorage, prefix: str, leaf: int) -> None:
    """Objects of this leaf the manifest does not list: written by a batch that never
    committed (we hold the leaf's claim: no batch of it is under way)."""
    mine = (f"{leaf}-", f".partial-{leaf}-")
    keys = [k for k in storage.list(prefix) if k.rsplit("/", 1)[-1].startswith(mine)]
    if not keys:
        return
    listed = {str(k) for (k,) in conn.execute("SELECT object_key FROM ttl.archive WHERE object_key = ANY(%s)",
                                              (keys,))}
    for key in keys:
        if key not in listed:  # a .partial- file is never listed
            storage.delete(key)
