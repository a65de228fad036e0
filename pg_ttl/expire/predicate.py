"""The expiry predicate of one policy, for one run.

The cutoff is taken once per run from the server clock (``now()``) and every
statement of the run compares against it. Engine sessions run with
``TimeZone = UTC``: ``timestamp`` columns are read as UTC and ``+ interval``
on ``timestamptz`` counts days as 24 hours.

For an ``expire_after`` without months, ``col + expire_after <= cutoff`` is
the same as ``col <= cutoff - expire_after``: the threshold is computed once on
the server, in the column's own type, so the predicate is exact and can use an
index on the column. With months (not a fixed length) the threshold is widened
by the longest month-end clamp and the exact sum is re-checked per row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

# Unix time units: values per second.
UNIT_SCALE = {"seconds": 1, "milliseconds": 1_000, "microseconds": 1_000_000, "nanoseconds": 1_000_000_000}

POLICY_QUERY = """
SELECT p.relid, n.nspname, c.relname, a.attname, t.typname, p.expiration_expression, p.expire_after,
       p.expire_after::text, (extract(month FROM p.expire_after) <> 0 OR extract(year FROM p.expire_after) <> 0),
       p.unit, p.select_batch_size, p.delete_batch_size, p.select_rate_limit, p.delete_rate_limit, p.paused,
       p.partition_action, p.detach_schema, c.relkind
  FROM ttl.policy p
  JOIN pg_catalog.pg_class c ON c.oid = p.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = p.relid AND a.attnum = p.ttl_attnum AND NOT a.attisdropped
  LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
"""


@dataclass
class EnginePolicy:
    """What the engine needs of one ``ttl.policy`` row, with names resolved."""

    relid: int
    schema: str
    relname: str
    column: str | None
    typname: str | None
    expression: str | None
    expire_after: timedelta | None
    expire_after_text: str | None
    has_months: bool
    unit: str | None
    select_batch_size: int
    delete_batch_size: int
    select_rate_limit: int
    delete_rate_limit: int
    paused: bool
    partition_action: str
    detach_schema: str | None
    relkind: str

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.relname}" if self.schema != "public" else self.relname

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.relname)


def load_policies(conn: psycopg.Connection[Any], tables: list[int] | None = None) -> list[EnginePolicy]:
    where = sql.SQL(" WHERE p.relid = ANY(%s::oid[])") if tables is not None else sql.SQL("")
    query = sql.SQL(POLICY_QUERY) + where + sql.SQL(" ORDER BY n.nspname, c.relname")
    rows = conn.execute(query, (tables,) if tables is not None else None).fetchall()
    return [EnginePolicy(*row) for row in rows]


@dataclass
class Predicate:
    """``expired`` is the exact row condition; ``bound`` (column policies) is an
    index-friendly ``col <= threshold`` implied by it, ``None`` for expressions."""

    cutoff: datetime
    expired: sql.Composable
    bound: sql.Composable | None
    threshold: str | None  # the threshold in the column's type, as text
    column: sql.Identifier | None
    coltype: sql.Identifier | None
    search_path: str  # for SET LOCAL search_path when the expression names functions

    def cast(self, text_value: sql.Composable) -> sql.Composable:
        """A text value cast to the TTL column's type."""
        assert self.coltype is not None
        # A quoted literal cast to the type is folded into a constant at parse time
        # (a text-typed value would be converted again for every row).
        return sql.SQL("CAST({} AS {})").format(text_value, self.coltype)


def expires_at(policy: EnginePolicy, term: sql.Composable) -> sql.Composable:
    """The expiry instant (timestamptz) of a TTL column value ``term``."""
    after = sql.SQL("CAST({} AS interval)").format(sql.Literal(policy.expire_after_text))
    kind = policy.typname
    if kind == "timestamptz":
        base: sql.Composable = term
    elif kind == "timestamp":
        base = sql.SQL("({} AT TIME ZONE 'UTC')").format(term)
    elif kind == "date":
        base = sql.SQL("(CAST({} AS timestamp) AT TIME ZONE 'UTC')").format(term)
    else:
        assert policy.unit is not None
        base = sql.SQL("pg_catalog.to_timestamp(CAST({} AS numeric) / {})").format(
            term, sql.Literal(UNIT_SCALE[policy.unit]))
    return sql.SQL("({} + {})").format(base, after)


def _threshold_sql(policy: EnginePolicy) -> sql.SQL:
    """``cutoff - expire_after`` in the column's own type (a superset bound with months)."""
    after = "CAST(%(after)s AS interval)"
    slack = " + interval '3 days'" if policy.has_months else ""
    point = f"((%(cutoff)s - {after}){slack})"
    kind = policy.typname
    if kind == "timestamptz":
        expr = point
    elif kind == "timestamp":
        expr = f"({point} AT TIME ZONE 'UTC')"
    elif kind == "date":
        # A date expires at its midnight UTC + expire_after: midnight <= t  <=>  date <= t::date.
        expr = f"CAST({point} AT TIME ZONE 'UTC' AS date)"
    else:
        epoch = f"(extract(epoch FROM {point}) * %(scale)s)"
        expr = epoch if kind == "numeric" else f"CAST(floor({epoch}) AS bigint)"
    # Built from the fixed fragments above only; values travel as parameters.
    return sql.SQL("SELECT CAST(" + expr + " AS text)")


def build_predicate(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime) -> Predicate:
    search_path = "pg_catalog, pg_temp"
    if policy.expression is not None:
        # As ttl._expression_error validated it: names resolve in the table's schema first.
        search_path = str(sql.SQL("{}, pg_catalog, pg_temp").format(sql.Identifier(policy.schema)).as_string(conn))
        # The expression is SQL by definition; ttl._expression_error (sql/10_validate.sql) has
        # checked it is one subquery-free timestamptz expression over the table's columns.
        expired = sql.SQL("(({}) <= {})").format(sql.SQL(policy.expression), sql.Literal(cutoff))
        return Predicate(cutoff, expired, None, None, None, None, search_path)
    assert policy.column is not None and policy.typname is not None
    params = {"cutoff": cutoff, "after": policy.expire_after_text,
              "scale": UNIT_SCALE.get(policy.unit or "seconds", 1)}
    row = conn.execute(_threshold_sql(policy), params).fetchone()
    assert row is not None
    threshold = str(row[0])
    column = sql.Identifier(policy.column)
    coltype = sql.Identifier("pg_catalog", policy.typname)
    # int4 seconds compare with an int8 threshold (cross-type btree operator; no overflow).
    bound_type = sql.Identifier("pg_catalog", "int8") if policy.typname == "int4" else coltype
    bound = sql.SQL("{} <= CAST({} AS {})").format(column, sql.Literal(threshold), bound_type)
    expired = bound
    if policy.has_months:
        expired = sql.SQL("({} AND {} <= {})").format(bound, expires_at(policy, column), sql.Literal(cutoff))
    return Predicate(cutoff, expired, bound, threshold, column, coltype, search_path)
