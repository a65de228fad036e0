"""Bring archived rows back (``pg-ttl restore``): the objects the manifest
lists for a table, read from their storage, verified (SHA-256; from a
PostgreSQL storage: the target table's rows of each batch's time range), and inserted
again with ``ON CONFLICT DO NOTHING``, so a restore run twice inserts nothing
the second time (idempotent on the table's primary key or unique indexes).
Objects hold one day of the TTL column each: ``--from``/``--to`` select whole
objects that overlap the range."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.archive import parquet
from pg_ttl.archive.postgres import PostgresTarget
from pg_ttl.archive.storage import StorageError, open_storage

OBJECTS = """
SELECT a.object_key, a.storage, s.url, a.sha256, a.rows, a.min_time, a.max_time
  FROM ttl.archive a JOIN ttl.storage s ON s.name = a.storage
 WHERE a.relid = %(relid)s
   AND (%(since)s::timestamptz IS NULL OR a.max_time >= %(since)s)
   AND (%(until)s::timestamptz IS NULL OR a.min_time < %(until)s)
   AND (%(storage)s::text IS NULL OR a.storage = %(storage)s)
 ORDER BY a.object_id
"""
COLUMNS = """
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attgenerated <> ''
  FROM pg_catalog.pg_attribute a
 WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
"""


@dataclass
class Restored:
    objects: int = 0
    rows_read: int = 0
    rows_inserted: int = 0


def restore(conn: psycopg.Connection[Any], table: str, since: datetime | None = None,
            until: datetime | None = None, storage: str | None = None) -> Restored:
    row = conn.execute("SELECT pg_catalog.to_regclass(%s)::oid", (table,)).fetchone()
    if row is None or row[0] is None:
        raise StorageError(f'table "{table}" does not exist')
    relid = int(row[0])
    found = conn.execute(COLUMNS, (relid,)).fetchall()
    types = {str(n): str(t) for n, t, g in found if not g}
    generated = {str(n) for n, _, g in found if g}  # archived as they were, computed again here
    # the text forms intervals are archived in (engine.connect)
    conn.execute("SELECT pg_catalog.set_config('IntervalStyle', 'postgres', false)")
    done = Restored()
    objects = conn.execute(OBJECTS, {"relid": relid, "since": since, "until": until, "storage": storage}).fetchall()
    schema, relname = _split(conn, relid)
    resolved: set[str] = set()
    for key, storage_name, url, sha, count, lo, hi in objects:
        target = open_storage(str(storage_name), str(url))
        if isinstance(target, PostgresTarget):
            if storage_name not in resolved:  # a partition's export left prepared there: decided now
                target.resolve(conn)
                resolved.add(str(storage_name))
            # the target table's rows of this batch's time range (rows of other batches in it
            # are inserted once: ON CONFLICT DO NOTHING)
            names = list(types)
            row = conn.execute("SELECT ttl.row_time_sql(%s)", (relid,)).fetchone()
            if row is None or row[0] is None:
                raise StorageError(f'table "{table}" has no TTL column: its rows cannot be found in "{storage_name}"')
            rows = target.read(target.table(schema, relname), names, sql.SQL("{} BETWEEN {} AND {}").format(
                sql.SQL(row[0]), sql.Literal(lo), sql.Literal(hi)))
        else:
            data = target.get(str(key))
            if parquet.sha256(data) != sha:
                raise StorageError(f"object {key} of storage \"{storage_name}\" does not match its manifest (SHA-256)")
            as_csv = parquet.to_csv(data, drop=generated)
            if as_csv is not None:  # COPY, not a statement per row
                names, text, n = as_csv
                if n != count:
                    raise StorageError(f"object {key} holds {n} rows, its manifest says {count}")
                _check_columns(key, names, types)
                done.rows_inserted += _copy_in(conn, schema, relname, names, text)
                done.objects += 1
                done.rows_read += n
                continue
            names, rows = parquet.decode(data)
            if len(rows) != count:
                raise StorageError(f"object {key} holds {len(rows)} rows, its manifest says {count}")
            keep = [i for i, n in enumerate(names) if n not in generated]
            names, rows = [names[i] for i in keep], [tuple(r[i] for i in keep) for r in rows]
        _check_columns(key, names, types)
        # $n placeholders (a raw cursor): a '%' in a name is not a placeholder
        stmt = sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE VALUES ({}) ON CONFLICT DO NOTHING").format(
            sql.Identifier(schema, relname), sql.SQL(", ").join(sql.Identifier(n) for n in names),
            sql.SQL(", ").join(sql.SQL("CAST(${} AS {})").format(sql.SQL(str(i + 1)), sql.SQL(types[n]))
                               for i, n in enumerate(names)))
        with conn.transaction():
            cur = psycopg.RawCursor(conn)
            cur.executemany(stmt.as_string(conn), rows)  # pipelined; rowcount: the rows inserted
            done.rows_inserted += cur.rowcount
        done.objects += 1
        done.rows_read += len(rows)
    return done


def _check_columns(key: str, names: list[str], types: dict[str, str]) -> None:
    unknown = [n for n in names if n not in types]
    if unknown:
        raise StorageError(f"object {key} has columns the table no longer has: {', '.join(unknown)}")


def _copy_in(conn: psycopg.Connection[Any], schema: str, relname: str, names: list[str], text: bytes) -> int:
    """The rows (CSV) into a temporary table of the table's column types, then into the
    table (ON CONFLICT DO NOTHING), in one transaction: the rows inserted."""
    table = sql.Identifier(schema, relname)
    cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
    with conn.transaction():
        # dropped here, not at commit: the caller's transaction may restore several objects
        conn.execute(sql.SQL("CREATE TEMPORARY TABLE pg_ttl_restore AS SELECT {} FROM {} WITH NO DATA")
                     .format(cols, table))
        with conn.cursor() as cur, cur.copy(sql.SQL("COPY pg_ttl_restore ({}) FROM STDIN (FORMAT csv)").format(
                cols)) as copy:
            copy.write(text)
        inserted = conn.execute(sql.SQL("INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM pg_ttl_restore"
                                        " ON CONFLICT DO NOTHING")
                                .format(table, cols, cols)).rowcount
        conn.execute("DROP TABLE pg_ttl_restore")
        return inserted


def _split(conn: psycopg.Connection[Any], relid: int) -> tuple[str, str]:
    row = conn.execute("SELECT n.nspname, c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
                       " ON n.oid = c.relnamespace WHERE c.oid = %s", (relid,)).fetchone()
    assert row is not None
    return str(row[0]), str(row[1])
