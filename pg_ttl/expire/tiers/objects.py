"""What goes to a storage, whatever moves it: a leaf's columns as read, Parquet objects
written and verified, their manifest rows (``ttl.archive``), objects never listed removed,
and what each archive unit moved per tier (the worker's metrics)."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.archive import parquet
from pg_ttl.archive.storage import BaseStorage, StorageError
from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.predicate import EnginePolicy
from pg_ttl.expire.units import Unit

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


# The row's instant, read after its columns when it is not one of them: a name longer than
# any PostgreSQL name (63 bytes), so no column of the table has it (also batches.ROW_XMIN).
ROW_TIME = "pg_ttl row time".ljust(64, ".")


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


def count_moved(run_id: int, unit: int, storage: str, tier: int, rows: int, size: int, objects: int) -> None:
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


def object_prefix(policy: EnginePolicy, storage: str) -> str:
    return f"table={policy.schema}.{policy.relname}/tier={storage}/"


def leaf_columns(conn: psycopg.Connection[Any], relid: int) -> list[parquet.Column]:
    return [parquet.Column(str(n), str(t), str(f), int(m)) for n, t, f, m in conn.execute(COLUMNS, (relid,))]


def column_values(columns: list[parquet.Column]) -> list[sql.Composable]:
    """The columns as fetched and written: text for the types Parquet has none for."""
    return [sql.SQL("CAST({} AS pg_catalog.text)").format(sql.Identifier(c.name)) if c.as_text
            else sql.Identifier(c.name) for c in columns]


def put_object(ctx: UnitContext, leaf: Unit, rows: Any, lo: Any, hi: Any, day: str, tier: int,
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


def remove_objects(storage: BaseStorage, keys: list[str]) -> None:
    """Objects written and never listed (best effort: the next run removes what is left)."""
    for key in keys:
        with contextlib.suppress(StorageError):
            storage.delete(key)


def remove_unlisted(conn: psycopg.Connection[Any], storage: BaseStorage, prefix: str, leaves: list[int]) -> None:
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
