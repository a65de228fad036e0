"""Units of work: the leaf partitions of a table (any depth), or the table itself.

A range partition on the TTL column whose upper bound has expired holds only
expired rows (every row in it is below the bound, expiry is monotone in the
column, and NULLs go to the default partition), so it is removed whole: the
highest such partition in the tree becomes one ``drop``/``detach`` unit. The
same holds for an expiration expression that provably never decreases as one
column grows (``monotone_column``) when the table is range-partitioned on that
column: the expression at the upper bound is the latest expiry in it.
Everything else (hash and list partitions, default partitions, partitions with
a live bound, expressions we cannot prove monotone) is a ``delete`` unit
processed row by row.

A table with tiers gets ``archive`` units first (tiers/): its leaves, swept
row range by row range, except that a range partition on the TTL column whose
upper bound has reached a storage tier is one unit (``tier`` set), exported
whole and then dropped or detached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.expire.predicate import EnginePolicy, Predicate

CHILDREN = """
SELECT c.oid, n.nspname, c.relname, c.relkind, pg_catalog.pg_get_expr(c.relpartbound, 0), i.inhdetachpending,
       c.relpages
  FROM pg_catalog.pg_inherits i
  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE i.inhparent = %s
 ORDER BY c.relname
"""
# Every partition's bounds judged at once (each bound a cast and some arithmetic).
JUDGE_BOUNDS = """
SELECT 'upper', b.bound, b.expired FROM ttl.bounds_expired(%(t)s, %(c)s, %(u)s::text[]) b
UNION ALL
SELECT 'lower', b.bound, b.unexpired FROM ttl.bounds_unexpired(%(t)s, %(c)s, %(l)s::text[]) b
"""
# pg_get_expr(bound, 0): a partition bound holds constants only, and with no relation
# to open the call neither waits on a lock held on the partition nor fails when
# a concurrent DROP removed it.
PARTITION_KEY = """
SELECT pt.partstrat, pt.partnatts, a.attname, tn.nspname, t.typname
  FROM pg_catalog.pg_partitioned_table pt
  LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
  LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace
 WHERE pt.partrelid = %s
"""
# Partitions a run of this table detached but did not move to detach_schema (killed between
# the DETACH and the move, or the move failed) and no later run finished: moved now.
DETACHED_NOT_MOVED = """
SELECT DISTINCT c.oid, n.nspname, c.relname
  FROM ttl.run r
  JOIN ttl.run_unit u ON u.run_id = r.run_id
  JOIN pg_catalog.pg_class c ON c.oid = u.unit_relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE r.relid = %(t)s AND u.action = 'detach' AND u.status IN ('interrupted', 'failed', 'timeout')
   AND NOT c.relispartition AND c.relkind IN ('r', 'p') AND n.nspname <> %(schema)s
   AND NOT EXISTS (SELECT 1 FROM ttl.run_unit l WHERE l.unit_relid = u.unit_relid AND l.run_id > u.run_id
                                                  AND l.status = 'ok')
"""
# Casts between these keep the order (the engine's session runs in UTC: no DST fold).
_TIME_TYPES = frozenset({"timestamptz", "timestamp", "date"})
_UPPER = re.compile(r"\bTO \((.*)\)\s*$", re.S)
_LOWER = re.compile(r"^FOR VALUES FROM \((.*)\) TO \(", re.S)


@dataclass
class Unit:
    relid: int
    schema: str
    relname: str
    action: str  # 'delete' | 'drop' | 'detach'
    parent: sql.Identifier | None = None  # the partitioned table it is removed from
    parent_relid: int | None = None  # (its oid: the names may change during a run)
    upper: str | None = None  # upper bound, as text in the TTL column's type
    bound: str | None = None  # FOR VALUES ... as the server prints it
    detach_pending: bool = False  # an interrupted DETACH ... CONCURRENTLY to finalize
    detached: bool = False  # detached by an interrupted run, not yet moved to detach_schema
    # judged by the writes it received (per-row TTL): judged again under the partition's lock
    recheck: bool = False
    # an archive unit: the storage tier (position) every row of this range partition has
    # reached, so it is exported whole, then dropped or detached (tiers/exports.py); None: row ranges
    tier: int | None = None
    pages: int = 0  # its size in blocks as of its last VACUUM or ANALYZE (pg_class.relpages)

    @property
    def name(self) -> str:
        return f"{self.schema}.{self.relname}" if self.schema != "public" else self.relname

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.relname)


def upper_bound(bound: str | None) -> str | None:
    """The TO value of a single-column range bound, unquoted; None for MAXVALUE, DEFAULT, lists."""
    return _bound_value(_UPPER.search(bound) if bound else None)


def lower_bound(bound: str | None) -> str | None:
    """The FROM value of a single-column range bound, unquoted; None for MINVALUE, DEFAULT, lists."""
    return _bound_value(_LOWER.search(bound) if bound else None)


def _bound_value(m: re.Match[str] | None) -> str | None:
    if not m:
        return None
    value = m.group(1).strip()
    if value.startswith("'") and value.endswith("'") and len(value) >= 2:
        return value[1:-1].replace("''", "'")
    if "," in value or value.upper() in ("MAXVALUE", "MINVALUE"):
        return None
    return value


@dataclass
class RangeKey:
    column: str
    type: sql.Identifier
    typname: str  # the type's name in pg_catalog, e.g. 'date'


def range_key(conn: psycopg.Connection[Any], relid: int) -> RangeKey | None:
    """The column a table is RANGE-partitioned on, if it is one plain column."""
    row = conn.execute(PARTITION_KEY, (relid,)).fetchone()
    if row is None or row[0] != "r" or row[1] != 1 or row[2] is None:
        return None
    return RangeKey(str(row[2]), sql.Identifier(str(row[3]), str(row[4])), str(row[4]))


def monotone_column(expression: str) -> str | None:
    """The column ``expression`` never decreases with, when that is provable from its
    form: the (unqualified) column, ``col + c``, ``c + col`` or ``col - c`` with ``c`` a
    constant (literals and operators only: no column, function or subquery), or a
    cast of such a term to date, timestamp or timestamptz. Else None."""
    found = _monotone(expression)
    return found[0] if found else None


def _monotone(expression: str) -> tuple[str, list[str]] | None:
    """(column, the constants added to or subtracted from it, as SQL text)."""
    # pglast is imported here: loading its parser would slow every command's start-up.
    from pglast import parse_sql
    from pglast.parser import ParseError

    try:
        statements: Any = parse_sql(f"SELECT {expression}")
        if len(statements) != 1 or len(statements[0].stmt.targetList) != 1:
            return None
        terms: list[str] = []
        column = _grows_with(statements[0].stmt.targetList[0].val, terms)
        return (column, terms) if column is not None else None
    except (ParseError, AttributeError, IndexError, TypeError):
        return None


# pglast's node attributes are all Optional; these walk them as Any and let a
# missing piece raise (caught above: not provably monotone).
def _grows_with(node: Any, terms: list[str]) -> str | None:
    from pglast import ast
    from pglast.enums.parsenodes import A_Expr_Kind
    from pglast.stream import RawStream

    n: Any = node
    if isinstance(node, ast.ColumnRef):  # unqualified only: evaluated below over a stand-in row
        return n.fields[0].sval if len(n.fields) == 1 and isinstance(n.fields[0], ast.String) else None
    if isinstance(node, ast.TypeCast):
        name = n.typeName.names[-1]
        ok = isinstance(name, ast.String) and name.sval in _TIME_TYPES and not n.typeName.arrayBounds
        return _grows_with(n.arg, terms) if ok else None
    if isinstance(node, ast.A_Expr) and n.kind == A_Expr_Kind.AEXPR_OP and len(n.name) == 1:
        op = n.name[0].sval
        if op in ("+", "-") and n.lexpr is not None and _constant(n.rexpr):
            terms.append(RawStream()(n.rexpr))
            return _grows_with(n.lexpr, terms)
        if op == "+" and n.lexpr is not None and _constant(n.lexpr):
            terms.append(RawStream()(n.lexpr))
            return _grows_with(n.rexpr, terms)
    return None


def _constant(node: Any) -> bool:
    from pglast import ast
    from pglast.enums.parsenodes import A_Expr_Kind

    n: Any = node
    if isinstance(node, ast.A_Const):
        return True
    if isinstance(node, ast.TypeCast):
        return _constant(n.arg)
    if isinstance(node, ast.A_Expr) and n.kind == A_Expr_Kind.AEXPR_OP:
        return (n.lexpr is None or _constant(n.lexpr)) and _constant(n.rexpr)
    return False


def bound_expired(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, upper: str,
                  key: RangeKey) -> bool:
    """Has everything below ``upper`` (a partition's exclusive upper bound) expired?"""
    if policy.expression is None:
        row = conn.execute("SELECT ttl.partition_expired(%s, %s, %s)", (policy.relid, pred.cutoff, upper)).fetchone()
        return bool(row and row[0])
    # Month arithmetic clamps at month ends, so on a time of day the expression is
    # not monotone within the last day below the bound (Mar 30 23:00 + 1 month is
    # later than Mar 31 00:00 + 1 month): the bound must then have expired a day ago.
    cutoff = pred.cutoff
    if key.typname != "date" and _adds_months(conn, policy.expression):
        cutoff -= timedelta(days=1)
    # The expression at the bound, evaluated over a one-row stand-in for the table
    # (as the table's owner, with pg_catalog first: the engine's session rules).
    query = sql.SQL("SELECT ({}) OPERATOR(pg_catalog.<=) {} FROM (SELECT CAST({} AS {}) AS {}) AS t").format(
        sql.SQL(policy.expression), sql.Literal(cutoff), sql.Literal(upper), key.type,
        sql.Identifier(key.column))
    try:
        with conn.transaction():  # a savepoint inside plan()'s transaction
            row = conn.execute(query).fetchone()
    except (psycopg.errors.DataError, psycopg.errors.ProgrammingError):
        return False  # the expression fails at the bound (e.g. out of range): not provably expired
    return bool(row and row[0])


def _adds_months(conn: psycopg.Connection[Any], expression: str) -> bool:
    """Does a constant the monotone expression adds have a month or year part?"""
    found = _monotone(expression)
    for term in found[1] if found else []:
        try:
            with conn.transaction():
                row = conn.execute(sql.SQL("SELECT ttl._has_months(CAST(({}) AS pg_catalog.interval))").format(
                    sql.SQL(term))).fetchone()
        except (psycopg.errors.DataError, psycopg.errors.ProgrammingError):
            continue  # not an interval (a number of days added to a date): no months
        if row and row[0]:
            return True
    return False


def _written_out(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, leaves: list[int]) -> set[int]:
    """The ``leaves`` whose every row and value expired by the writes they received. A
    partition with rows from before its writes were tracked is scanned once to know them;
    one whose scan outlasts statement_timeout (or meets a lock) is left to be expired row
    by row this time, not the whole table's run: the others are judged one by one."""
    try:
        with conn.transaction():  # (a savepoint inside plan()'s transaction)
            return {int(r[0]) for r in conn.execute("SELECT ttl.partitions_expired(%s, %s::oid[], %s)",
                                                    (policy.relid, leaves, pred.cutoff))}
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable):
        if len(leaves) == 1:
            return set()
    return {oid for leaf in leaves for oid in _written_out(conn, policy, pred, [leaf])}


def list_units(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate) -> list[Unit]:
    if policy.relkind != "p":
        return [Unit(policy.relid, policy.schema, policy.relname, "delete", pages=policy.pages)]
    units: list[Unit] = []
    if policy.partition_action == "detach" and policy.detach_schema:
        units.extend(Unit(int(oid), str(schema), str(relname), "detach", detached=True)
                     for oid, schema, relname in conn.execute(
                         DETACHED_NOT_MOVED, {"t": policy.relid, "schema": policy.detach_schema}))
    _walk(conn, policy, pred, policy.relid, sql.Identifier(policy.schema, policy.relname), units)
    return units


def _walk(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, relid: int,
          ident: sql.Identifier, units: list[Unit]) -> None:
    key = range_key(conn, relid)
    grows_with = policy.column if policy.expression is None else monotone_column(policy.expression)
    on_ttl_column = key is not None and grows_with is not None and key.column == grows_with
    children = conn.execute(CHILDREN, (relid,)).fetchall()
    # A column policy's bounds, all judged in one statement (thousands of partitions): the
    # partitions every row of which expired (dropped or detached whole), and, unless column
    # TTLs need every partition visited, those no row of which expired yet (not visited).
    expired_bounds: set[str] = set()
    unexpired_bounds: set[str] = set()
    if on_ttl_column and policy.expression is None:
        uppers = [u for u in (upper_bound(b) for *_, b, _p, _n in children) if u is not None]
        lowers = [v for v in (lower_bound(b) for *_, b, _p, _n in children) if v is not None] \
            if not policy.has_column_ttls else []
        if uppers or lowers:
            for kind, value, judged in conn.execute(JUDGE_BOUNDS, {"t": policy.relid, "c": pred.cutoff,
                                                                   "u": uppers, "l": lowers}):
                if judged:
                    (expired_bounds if kind == "upper" else unexpired_bounds).add(str(value))
    # Per-row TTL: partitions whose every row and value expired, by the latest write
    # and expiry each one received (sql/73_value_ttls.sql); empty for other policies.
    leaves = [int(c[0]) for c in children if c[3] == "r" and not c[5]]
    written_out: set[int] = set()
    if leaves and policy.expression is not None and not on_ttl_column:
        written_out = _written_out(conn, policy, pred, leaves)

    def expired(upper: str | None) -> bool:
        return upper is not None and key is not None and (
            upper in expired_bounds if policy.expression is None else bound_expired(conn, policy, pred, upper, key))

    for oid, schema, relname, relkind, bound, pending, pages in children:
        if relkind not in ("r", "p"):
            continue  # foreign tables are not ours to delete from
        child = Unit(int(oid), str(schema), str(relname), "delete", parent=ident, parent_relid=relid, bound=bound,
                     pages=int(pages))
        upper = upper_bound(bound) if on_ttl_column else None
        if pending:
            # Ours to finish only when this policy detaches and its bound expired (a run was
            # interrupted between DETACH ... CONCURRENTLY's two transactions); else the
            # application's own detach: leave it.
            if policy.partition_action == "detach" and expired(upper):
                child.action, child.detach_pending = "detach", True
                units.append(child)
            continue
        if expired(upper):
            child.action, child.upper = policy.partition_action, upper
            units.append(child)
        elif int(oid) in written_out:
            child.action, child.recheck = policy.partition_action, True
            units.append(child)
        elif on_ttl_column and lower_bound(bound) in unexpired_bounds:
            continue  # nothing in it has expired yet
        elif relkind == "p":
            _walk(conn, policy, pred, int(oid), child.ident, units)
        else:
            units.append(child)
