"""Units of work: the leaf partitions of a table (any depth), or the table itself.

A range partition on the TTL column whose upper bound has expired holds only
expired rows (every row in it is below the bound, expiry is monotone in the
column, and NULLs go to the default partition), so it is removed whole: the
highest such partition in the tree becomes one ``drop``/``detach`` unit.
Everything else (hash and list partitions, default partitions, partitions with
a live bound, expression policies, which we cannot prove monotone) is a
``delete`` unit processed row by row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.expire.predicate import EnginePolicy, Predicate, expires_at

CHILDREN = """
SELECT c.oid, n.nspname, c.relname, c.relkind, pg_catalog.pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending
  FROM pg_catalog.pg_inherits i
  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE i.inhparent = %s
 ORDER BY c.relname
"""
PARTITION_KEY = """
SELECT pt.partstrat, pt.partnatts, a.attname
  FROM pg_catalog.pg_partitioned_table pt
  LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
 WHERE pt.partrelid = %s
"""
_UPPER = re.compile(r"\bTO \((.*)\)\s*$", re.S)


@dataclass
class Unit:
    relid: int
    schema: str
    relname: str
    action: str  # 'delete' | 'drop' | 'detach'
    parent: sql.Identifier | None = None  # the partitioned table it is removed from
    upper: str | None = None  # upper bound, as text in the TTL column's type
    bound: str | None = None  # FOR VALUES ... as the server prints it
    detach_pending: bool = False  # an interrupted DETACH ... CONCURRENTLY to finalize

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.relname}" if self.schema != "public" else self.relname

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.relname)


def upper_bound(bound: str | None) -> str | None:
    """The TO value of a single-column range bound, unquoted; None for MAXVALUE, DEFAULT, lists."""
    if not bound:
        return None
    m = _UPPER.search(bound)
    if not m:
        return None
    value = m.group(1).strip()
    if value.startswith("'") and value.endswith("'") and len(value) >= 2:
        return value[1:-1].replace("''", "'")
    if "," in value or value.upper() in ("MAXVALUE", "MINVALUE"):
        return None
    return value


def _range_key(conn: psycopg.Connection[Any], relid: int) -> str | None:
    """The column a table is RANGE-partitioned on, if it is one plain column."""
    row = conn.execute(PARTITION_KEY, (relid,)).fetchone()
    if row is None or row[0] != "r" or row[1] != 1 or row[2] is None:
        return None
    return str(row[2])


def bound_expired(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, upper: str) -> bool:
    assert pred.coltype is not None
    term = pred.cast(sql.Literal(upper))
    query = sql.SQL("SELECT {} <= {}").format(expires_at(policy, term), sql.Literal(pred.cutoff))
    row = conn.execute(query).fetchone()
    return bool(row and row[0])


def list_units(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate) -> list[Unit]:
    if policy.relkind != "p":
        return [Unit(policy.relid, policy.schema, policy.relname, "delete")]
    units: list[Unit] = []
    _walk(conn, policy, pred, policy.relid, sql.Identifier(policy.schema, policy.relname), units)
    return units


def _walk(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, relid: int,
          ident: sql.Identifier, units: list[Unit]) -> None:
    key = _range_key(conn, relid)
    on_ttl_column = key is not None and policy.column is not None and key == policy.column
    for oid, schema, relname, relkind, bound, pending in conn.execute(CHILDREN, (relid,)).fetchall():
        if relkind not in ("r", "p"):
            continue  # foreign tables are not ours to delete from
        child = Unit(int(oid), str(schema), str(relname), "delete", parent=ident, bound=bound)
        if pending:
            # Ours to finish only when this policy detaches (a run was interrupted
            # between DETACH ... CONCURRENTLY's two transactions); else leave it.
            if policy.partition_action == "detach":
                child.action, child.detach_pending = "detach", True
                units.append(child)
            continue
        upper = upper_bound(bound) if on_ttl_column else None
        if upper is not None and bound_expired(conn, policy, pred, upper):
            child.action, child.upper = policy.partition_action, upper
            units.append(child)
        elif relkind == "p":
            _walk(conn, policy, pred, int(oid), child.ident, units)
        else:
            units.append(child)
