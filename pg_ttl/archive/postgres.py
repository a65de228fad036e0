"""A PostgreSQL database as a tier's storage: ``postgresql://user@host:port/db?schema=archive``.

Rows go to ``<schema>.<table>`` there (the source table's name, prefixed with its
schema unless it is ``public``), created on first use with the source's columns
and primary key. A batch is inserted with ``ON CONFLICT DO NOTHING`` and
committed there, then verified (every key of the batch is there) before the
source deletes it: a batch retried after a crash inserts nothing twice. The
password comes from libpq's usual places (``PGPASSWORD``, ``~/.pgpass``), never
from the catalog.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import psycopg
from psycopg import sql

from pg_ttl.archive.parquet import Column
from pg_ttl.archive.storage import StorageError


class PostgresTarget:
    def __init__(self, name: str, url: str) -> None:
        parsed = urlparse(url)
        query = dict(parse_qsl(parsed.query))
        self.name = name
        self.schema = query.pop("schema", "archive")
        self.dsn = urlunparse(parsed._replace(query=urlencode(query)))

    def connect(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.dsn, autocommit=True, application_name="pg-ttl archive", connect_timeout=10)
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.name}": cannot connect: {str(exc).strip()}') from exc

    def table(self, source_schema: str, source_table: str) -> sql.Identifier:
        name = source_table if source_schema == "public" else f"{source_schema}_{source_table}"
        return sql.Identifier(self.schema, name)

    def write(self, target: sql.Identifier, columns: list[Column], keys: list[str], rows: list[tuple[Any, ...]]) -> int:
        """Insert ``rows`` (committed there), then return how many of their keys the target
        holds: all of them, or the caller must not delete."""
        try:
            with self.connect() as conn:
                self._ensure(conn, target, columns, keys)
                with conn.transaction():
                    self.insert(conn, target, columns, rows)
                return self.found(conn, target, columns, keys, rows)
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.name}": {str(exc).strip()}') from exc

    def insert(self, conn: psycopg.Connection[Any], target: sql.Identifier, columns: list[Column],
               rows: list[tuple[Any, ...]]) -> None:
        """Insert ``rows`` in ``conn``'s transaction (rows whose key is there already: skipped)."""
        psycopg.RawCursor(conn).executemany(_insert(conn, target, columns), rows)

    def found(self, conn: psycopg.Connection[Any], target: sql.Identifier, columns: list[Column], keys: list[str],
              rows: list[tuple[Any, ...]]) -> int:
        """How many of the keys of ``rows`` the target holds (as ``conn`` sees it)."""
        key_at = [next(i for i, c in enumerate(columns) if c.name == k) for k in keys]
        query = sql.SQL("SELECT count(*) FROM {} WHERE ({}) IN (SELECT * FROM {})").format(
            target, sql.SQL(", ").join(sql.Identifier(k) for k in keys),
            # one unnest per key column, side by side (a multi-column key: ROWS FROM)
            sql.SQL("ROWS FROM ({})").format(sql.SQL(", ").join(
                sql.SQL("pg_catalog.unnest(CAST(${} AS {}[]))").format(sql.SQL(str(n + 1)),
                                                                       sql.SQL(columns[i].sqltype))
                for n, i in enumerate(key_at))))
        row = psycopg.RawCursor(conn).execute(query.as_string(conn), [[r[i] for r in rows] for i in key_at]).fetchone()
        return int(row[0]) if row else 0

    def ensure(self, target: sql.Identifier, columns: list[Column], keys: list[str]) -> None:
        """The target table, created (and committed) if it is not there."""
        try:
            with self.connect() as conn:
                self._ensure(conn, target, columns, keys)
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.name}": {str(exc).strip()}') from exc

    # A partition exported whole (pg_ttl/expire/tiers/exports.py) goes to the target in one transaction prepared
    # there (PREPARE TRANSACTION) before the source lists it and drops the partition, then
    # committed: a crash in between leaves it prepared, decided by the next run from the
    # source's manifest. Needs max_prepared_transactions > 0 on the target's server.
    PREPARED = "pg_ttl_export_"

    def can_prepare(self) -> bool:
        """The target's server allows prepared transactions (False when unreachable)."""
        try:
            with self.connect() as conn:
                row = conn.execute("SELECT pg_catalog.current_setting('max_prepared_transactions')::int > 0").fetchone()
        except (StorageError, psycopg.Error):
            return False
        return bool(row and row[0])

    def prepared(self) -> list[str]:
        """The exports prepared in the target's database and not yet committed or rolled back."""
        try:
            with self.connect() as conn:
                return [str(g) for (g,) in conn.execute(
                    "SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE database = pg_catalog.current_database()"
                    " AND starts_with(gid, %s) ORDER BY prepared", (self.PREPARED,))]
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.name}": {str(exc).strip()}') from exc

    def resolve(self, source: psycopg.Connection[Any]) -> None:
        """Exports a run left prepared here (it ended between PREPARE and COMMIT PREPARED):
        committed when the source database's manifest lists them (the partition went),
        rolled back when its history names them and the manifest does not; others' exports
        are left alone."""
        for gid in self.prepared():
            if source.execute("SELECT 1 FROM ttl.archive WHERE storage = %s AND object_key LIKE %s LIMIT 1",
                              (self.name, f"%#{gid}")).fetchone():
                self.finish_prepared(gid, commit=True)
            elif source.execute("SELECT 1 FROM ttl.run_unit WHERE checkpoint ->> 'prepared' = %s LIMIT 1",
                                (gid,)).fetchone():
                self.finish_prepared(gid, commit=False)

    def finish_prepared(self, gid: str, commit: bool) -> None:
        try:
            with self.connect() as conn:
                conn.execute(sql.SQL("COMMIT PREPARED {}" if commit else "ROLLBACK PREPARED {}").format(
                    sql.Literal(gid)))
        except psycopg.errors.UndefinedObject:
            pass  # finished meanwhile
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.name}": {str(exc).strip()}') from exc

    def read(self, target: sql.Identifier, columns: list[str], condition: sql.Composable) -> list[tuple[Any, ...]]:
        """Rows of ``target`` matching ``condition``, each value in PostgreSQL's text form
        (cast back by whoever inserts them: exact for every type)."""
        try:
            with self.connect() as conn:
                return conn.execute(sql.SQL("SELECT {} FROM {} WHERE {}").format(
                    sql.SQL(", ").join(sql.SQL("CAST({} AS pg_catalog.text)").format(sql.Identifier(c))
                                       for c in columns), target, condition)).fetchall()
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.name}": {str(exc).strip()}') from exc

    def check(self) -> None:
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))

    def _ensure(self, conn: psycopg.Connection[Any], target: sql.Identifier, columns: list[Column],
                keys: list[str]) -> None:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
        conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))").format(
            target, sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.sqltype))
                                       for c in columns),
            sql.SQL(", ").join(sql.Identifier(k) for k in keys)))


def _insert(conn: psycopg.Connection[Any], target: sql.Identifier, columns: list[Column]) -> str:
    # $n placeholders (a raw cursor): a '%' in a name is not a placeholder
    return sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT DO NOTHING").format(
        target, sql.SQL(", ").join(sql.Identifier(c.name) for c in columns),
        sql.SQL(", ").join(sql.SQL("CAST(${} AS {})").format(sql.SQL(str(i + 1)), sql.SQL(c.sqltype))
                           for i, c in enumerate(columns))).as_string(conn)
