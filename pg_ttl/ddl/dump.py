"""``pg-ttl dump``: the TTL DDL that recreates the current policies (SHOW CREATE's analogue)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from pglast import ast
from pglast.enums import AlterTableType, ObjectType
from pglast.stream import RawStream

# Tables with a table or column TTL, under schema-qualified names so the dump
# does not depend on search_path.
_TABLES = """
SELECT t.relid, n.nspname, c.relname
  FROM (SELECT relid FROM ttl.policy UNION SELECT relid FROM ttl.column_policy
        UNION SELECT relid FROM ttl.orphan_policy) AS t
  JOIN pg_catalog.pg_class c ON c.oid = t.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE %(table)s::text IS NULL OR t.relid = %(table)s::regclass
 ORDER BY n.nspname, c.relname
"""
_TABLE_OPTIONS = """
SELECT d.option, d.value FROM ttl.describe(%s::oid::regclass) AS d
 WHERE (d.option LIKE 'ttl\\_%%' OR d.option = 'row_expiry_column') AND d.value IS NOT NULL
   AND (EXISTS (SELECT 1 FROM ttl.policy p WHERE p.relid = %s::oid) OR d.option LIKE 'ttl\\_orphan\\_%%')
"""
_COLUMN_OPTIONS = """
SELECT a.attname, cp.expire_after::text, pg_catalog.to_jsonb(cp) ->> 'relative_to'
  FROM ttl.column_policy cp
  JOIN pg_catalog.pg_attribute a ON a.attrelid = cp.relid AND a.attnum = cp.attnum AND NOT a.attisdropped
 WHERE cp.relid = %s::oid
 ORDER BY cp.attnum
"""


class NoTtlError(LookupError):
    pass


@dataclass
class TablePolicy:
    schema: str
    name: str
    options: list[tuple[str, str]]  # ("ttl_expire_after", "30 days"), ...
    columns: list[tuple[str, str, str | None]]  # ("email", "90 days", "write"), ...


def read(conn: psycopg.Connection[Any], table: str | None = None) -> list[TablePolicy]:
    policies: list[TablePolicy] = []
    for relid, schema, name in conn.execute(_TABLES, {"table": table}).fetchall():
        rows = [(str(o), str(v)) for o, v in conn.execute(_TABLE_OPTIONS, (relid, relid)).fetchall()]
        options = [(o, v) for o, v in rows if o != "row_expiry_column"]
        if len(options) != len(rows):
            # Per-row expiry: the expression over the column pg_ttl added is
            # internal; "ttl_expire_after" alone recreates both.
            options = [(o, v) for o, v in options if o != "ttl_expiration_expression"]
        columns = [(str(c), str(v), None if r is None else str(r))
                   for c, v, r in conn.execute(_COLUMN_OPTIONS, (relid,)).fetchall()]
        policies.append(TablePolicy(str(schema), str(name), options, columns))
    if table is not None and not policies:
        raise NoTtlError(f"table {table} has no TTL")
    return policies


def _alter(policy: TablePolicy, cmd: ast.AlterTableCmd) -> str:
    stmt = ast.AlterTableStmt(
        relation=ast.RangeVar(schemaname=policy.schema, relname=policy.name, inh=True, relpersistence="p"),
        cmds=(cmd,), objtype=ObjectType.OBJECT_TABLE, missing_ok=False)
    return str(RawStream()(stmt)) + ";"


def _defs(pairs: list[tuple[str, str]]) -> tuple[ast.DefElem, ...]:
    return tuple(ast.DefElem(defname=name, arg=ast.String(sval=value)) for name, value in pairs)


def statements(policies: list[TablePolicy]) -> list[str]:
    out: list[str] = []
    for p in policies:
        if p.options:
            out.append(_alter(p, ast.AlterTableCmd(subtype=AlterTableType.AT_SetRelOptions, def_=_defs(p.options))))
        for column, interval, relative_to in p.columns:
            # relative_to exists once column TTL can count from write time (row/column TTL issue).
            pairs = [("ttl_expire_after", interval)] + ([("ttl_relative_to", relative_to)] if relative_to else [])
            out.append(_alter(p, ast.AlterTableCmd(subtype=AlterTableType.AT_SetOptions, name=column,
                                                   def_=_defs(pairs))))
    return out


def dump(conn: psycopg.Connection[Any], table: str | None = None) -> str:
    """TTL DDL for every policy (or ``table``'s), one statement per line; '' when there is none."""
    lines = statements(read(conn, table))
    return "".join(line + "\n" for line in lines)
