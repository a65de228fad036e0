"""The expiry predicate of one policy, for one run.

When a row expires is defined once, in the database (``ttl.expired_sql`` in
sql/15_expiry.sql); this module asks it for the policy's SQL at the run's
cutoff. The cutoff is taken once per run from the server clock (``now()``) and
every statement of the run compares against it.

``expired`` is exact; ``bound`` (column policies) is ``col <= threshold`` in
the column's own type, which a btree on the column can use: the same condition
for fixed intervals, a superset re-checked by ``expired`` with months.
Expressions are evaluated with ``pg_catalog`` first, then the table's schema,
and as the table's owner (the engine's session takes the owner's role).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

POLICY_COLUMNS = """
p.relid, n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner), a.attname, t.typname, t.oid,
       p.expiration_expression, p.expire_after::text,
       p.unit, p.select_batch_size, p.delete_batch_size, p.select_rate_limit, p.delete_rate_limit, p.paused,
       p.partition_action, p.detach_schema, c.relkind,
       p.value_ttls OR EXISTS (SELECT 1 FROM ttl.column_policy cp WHERE cp.relid = p.relid),
       EXISTS (SELECT 1 FROM ttl.tier s WHERE s.relid = p.relid),
       EXISTS (SELECT 1 FROM ttl.orphan_policy o WHERE o.relid = p.relid OR p.relid = ANY(o.parent_relids)),
       coalesce((SELECT CASE WHEN q.backfilled THEN 'filled' ELSE 'filling' END FROM ttl.queue q
                  WHERE q.relid = p.relid), 'none'),
       c.relpages"""
POLICY_FROM = """
  FROM ttl.policy p
  JOIN pg_catalog.pg_class c ON c.oid = p.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = p.relid AND a.attnum = p.ttl_attnum AND NOT a.attisdropped
  LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
"""
POLICY_QUERY = "SELECT " + POLICY_COLUMNS + POLICY_FROM


@dataclass
class EnginePolicy:
    """What the engine needs of one ``ttl.policy`` row, with names resolved."""

    relid: int
    schema: str
    relname: str
    owner: str  # the engine does this table's work as this role
    column: str | None
    typname: str | None
    typid: int | None
    expression: str | None
    expire_after_text: str | None
    unit: str | None
    select_batch_size: int
    delete_batch_size: int
    select_rate_limit: int
    delete_rate_limit: int
    paused: bool
    partition_action: str
    detach_schema: str | None
    relkind: str
    # Read with the policy, so a run skips the lookups of what a table does not have.
    has_column_ttls: bool = True  # column TTLs, or a CQL-style table's value TTLs
    has_tiers: bool = True
    has_orphans: bool = True  # an orphan policy on the same table, or on a child of it
    queue: str = "unknown"  # its expiration queue: 'none', 'filling', 'filled' (or not read: 'unknown')
    pages: int = 0  # the table's size in blocks as of its last VACUUM or ANALYZE

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.relname}" if self.schema != "public" else self.relname

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.relname)


# With one table's policy: the session takes its owner's role in the same statement, when
# the session user is a member of it (the engine works as the owner; owner.py).
AS_OWNER = """,
       CASE WHEN pg_catalog.pg_has_role(session_user, c.relowner, 'MEMBER')
            THEN pg_catalog.set_config('role', pg_catalog.pg_get_userbyid(c.relowner)::text, false) END"""


def load_policy_as_owner(conn: psycopg.Connection[Any], relid: int) -> tuple[EnginePolicy | None, bool]:
    """Table ``relid``'s policy (None: it has none) and whether the session took its owner's
    role with it (one round trip; False: the session may not act as the owner)."""
    query = "SELECT " + POLICY_COLUMNS + AS_OWNER + POLICY_FROM + " WHERE p.relid = %s"
    row = conn.execute(query, (relid,)).fetchone()
    if row is None:
        return None, False
    return EnginePolicy(*row[:-1]), row[-1] is not None


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
    column: sql.Identifier | None
    coltype: sql.Identifier | None
    search_path: str  # pg_catalog first, then the table's schema
    # Row expiry (the table's TTL policy): its ctid ranges are deleted by
    # ttl.delete_rows_sql's statement; orphans (sql/80_orphans.sql) by the condition above.
    row_expiry: bool = True
    # min(<expiry of the TTL column>) over a table's rows (column policies: ttl._expiry_sql),
    # read with the predicate for the lag and plans (oldest.py)
    min_expiry: sql.Composable | None = None
    # An orphan run that follows its parents' run (their rows just went): a sweep of the
    # child finished in this round counts only if it began after this run did.
    follows_parents: bool = False
    # ``expired`` and ``bound`` with their constants hidden from the planner's estimates
    # (ttl._constant_sql), read when a run's key windows first need them (window_forms)
    hidden: tuple[sql.Composable, sql.Composable | None] | None = None

    def cast(self, text_value: sql.Composable) -> sql.Composable:
        """A text value cast to the TTL column's type."""
        assert self.coltype is not None
        # A quoted literal cast to the type is folded into a constant at parse time
        # (a text-typed value would be converted again for every row).
        return sql.SQL("CAST({} AS {})").format(text_value, self.coltype)


# The policy's expiry SQL at the run's cutoff (ttl.expired_sql), the table's search_path
# and the min(<expiry of the TTL column>) term (column policies). The column's min() is a
# parameter value: a '%' in its name is no placeholder.
PREDICATE = """
SELECT e.expired, e.bound, ttl._table_search_path(%(relid)s) AS search_path,
       CASE WHEN %(term)s::text IS NOT NULL
            THEN ttl._expiry_sql(%(typ)s::oid::regtype, %(unit)s, %(after)s::interval, %(term)s) END AS min_expiry
  FROM ttl.expired_sql(%(relid)s, %(cutoff)s) e WHERE e.expired IS NOT NULL
"""
# A run's row in ttl.run and its predicate, in one statement; the session's search_path
# set to the table's by it too (the run's statements that follow use it).
START_RUN = """
SELECT e.expired, e.bound, e.search_path, e.min_expiry,
       ttl._start_run(%(relid)s, %(table)s, %(worker)s, %(cutoff)s),
       pg_catalog.set_config('search_path', e.search_path, false)
  FROM (""" + PREDICATE + """) e
"""


def _params(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime) -> dict[str, Any]:
    term = None if policy.column is None else sql.SQL("min({})").format(sql.Identifier(policy.column)).as_string(conn)
    return {"relid": policy.relid, "cutoff": cutoff, "term": term, "typ": policy.typid, "unit": policy.unit,
            "after": policy.expire_after_text}


def _predicate(policy: EnginePolicy, cutoff: datetime, row: Sequence[Any] | None) -> Predicate:
    if row is None or row[0] is None:
        raise LookupError(f"table {policy.name} has no TTL policy any more")
    expired, bound, search_path = sql.SQL(row[0]), (sql.SQL(row[1]) if row[1] else None), str(row[2])
    if policy.expression is not None:
        return Predicate(cutoff, expired, None, None, None, search_path)
    assert policy.column is not None and policy.typname is not None
    return Predicate(cutoff, expired, bound, sql.Identifier(policy.column),
                     sql.Identifier("pg_catalog", policy.typname), search_path,
                     min_expiry=sql.SQL(row[3]))


def build_predicate(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime) -> Predicate:
    """The policy's predicate at ``cutoff`` (LookupError: it has no policy any more)."""
    return _predicate(policy, cutoff, conn.execute(PREDICATE, _params(conn, policy, cutoff)).fetchone())


def start_run(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime,
              worker: str | None) -> tuple[Predicate, int]:
    """The run's row (status 'running') and its predicate, in one round trip, the session's
    search_path set to the table's; LookupError, and no row, when it has no policy any more.
    (history.start_run records runs of other work.)"""
    row = conn.execute(START_RUN, {**_params(conn, policy, cutoff), "table": policy.name,
                                   "worker": worker}).fetchone()
    return _predicate(policy, cutoff, row), int(row[4]) if row else 0


WINDOW_FORMS = "SELECT w.expired, w.bound FROM ttl.expired_sql(%s, %s, true) w"


def window_forms(conn: psycopg.Connection[Any], policy_relid: int,
                 pred: Predicate) -> tuple[sql.Composable, sql.Composable | None]:
    """``expired`` and ``bound`` as key windows past a unit's first one delete and read by:
    their constants hidden from the planner's estimates (ttl.expired_sql's
    hide_constants; the windows before left dead index entries that an estimate would
    walk). Read once a run, when first needed: a table deleted in one window never
    needs them. The run's own forms if the policy went meanwhile."""
    if pred.hidden is None:
        row = conn.execute(WINDOW_FORMS, (policy_relid, pred.cutoff)).fetchone()
        if row is None or row[0] is None:
            pred.hidden = (pred.expired, pred.bound)
        else:
            pred.hidden = (sql.SQL(row[0]), sql.SQL(row[1]) if row[1] is not None else None)
    return pred.hidden
