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
        key_at = [next(i for i, c in enumerate(columns) if c.name == k) for k in keys]
        try:
            with self.connect() as conn:
                self._ensure(conn, target, columns, keys)
                cur = psycopg.RawCursor(conn)
                with conn.transaction():
                    cur.executemany(_insert(conn, target, columns), rows)
                found = cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE ({}) IN (SELECT * FROM {})").format(
                    target, sql.SQL(", ").join(sql.Identifier(k) for k in keys),
                    # one unnest per key column, side by side (a multi-column key: ROWS FROM)
                    sql.SQL("ROWS FROM ({})").format(sql.SQL(", ").join(
                        sql.SQL("pg_catalog.unnest(CAST(${} AS {}[]))").format(sql.SQL(str(n + 1)),
                                                                               sql.SQL(columns[i].sqltype))
                        for n, i in enumerate(key_at)))).as_string(conn),
                    [[r[i] for r in rows] for i in key_at]).fetchone()
        except psycopg.Error as exc:
            raise StorageError(f'storage "{self.name}": {str(exc).strip()}') from exc
        return int(found[0]) if found else 0

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
