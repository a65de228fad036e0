"""Orphan deletion: a child table's rows whose parent row is gone.

Which rows are orphans is the database's definition (``ttl.orphans_sql`` in
sql/80_orphans.sql): no row with the same key in any of the parents, each found
through its unique index, and older than ``min_age`` by the age column. Each
leaf of the child is a unit, whose claim several runs share: they sweep its
block ranges of about ``range_bytes`` together (sweeps.py), each range claimed
by one run at a time and checkpointed with every DELETE (``ttl.block_range``),
so a killed run's range is taken up where it stopped. Each DELETE re-checks the
condition, so a parent committed meanwhile keeps its child.

Block ranges, not key ranges: a child's rows of one key range can be read
without a scan of the child only through an index on the child's key, which a
child need not have; a block range is read sequentially, and each of its rows
probes each parent's unique index (about 0.8-0.9 us a row on a 2-core machine;
sorting the range's keys first made it no cheaper). The planner's other plans
read a whole parent once per range: a hash of it, or a merge with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors, sql

from pg_ttl.expire import sweeps
from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.predicate import EnginePolicy, Predicate
from pg_ttl.expire.units import Unit

# Orphan policies of the given tables (as children) and of the children of the
# given tables (as parents: children follow their parents in the same pass).
ORPHAN_QUERY = """
SELECT o.relid, n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner), o.delete_batch_size,
       o.range_bytes, c.relkind
  FROM ttl.orphan_policy o
  JOIN pg_catalog.pg_class c ON c.oid = o.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE %(tables)s::oid[] IS NULL OR o.relid = ANY(%(tables)s::oid[]) OR o.parent_relids && %(tables)s::oid[]
 ORDER BY n.nspname, c.relname
"""
# The child's leaves: its partitions, or itself (pg_partition_tree lists nothing for a
# table that is not partitioned).
_LEAVES = """
SELECT l.oid FROM pg_catalog.pg_class l
 WHERE l.relkind = 'r' AND (l.oid = %(t)s::oid OR l.oid IN (
       SELECT p.relid FROM pg_catalog.pg_partition_tree(%(t)s::oid::regclass) p WHERE p.isleaf))
"""
# Rows per block of the child as a whole, to turn range_bytes into the select batch.
DENSITY = """
SELECT coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples > 0), 0), coalesce(sum(c.relpages), 0),
       pg_catalog.current_setting('block_size')::int8
  FROM pg_catalog.pg_class c WHERE c.oid IN (""" + _LEAVES + """)
"""
LEAVES = """
SELECT c.oid, n.nspname, c.relname
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid IN (""" + _LEAVES + """)
 ORDER BY n.nspname, c.relname
"""


def load_orphan_policies(conn: psycopg.Connection[Any], tables: list[int] | None) -> list[EnginePolicy]:
    """The orphan policies to run, as engine policies of their child tables: row
    deletion by ctid ranges, with the select batch sized to ``range_bytes``."""
    policies: list[EnginePolicy] = []
    for relid, schema, relname, owner, dbs, range_bytes, relkind in conn.execute(
            ORPHAN_QUERY, {"tables": tables}).fetchall():
        row = conn.execute(DENSITY, {"t": relid}).fetchone()
        assert row is not None
        tuples, pages, block_size = float(row[0]), int(row[1]), int(row[2])
        per_block = tuples / pages if pages > 0 and tuples > 0 else 100.0
        blocks = max(1, int(range_bytes) // block_size)
        policies.append(EnginePolicy(
            relid=int(relid), schema=str(schema), relname=str(relname), owner=str(owner), column=None,
            typname=None, typid=None, expression=None, expire_after_text=None, unit=None,
            select_batch_size=max(1, int(blocks * per_block)), delete_batch_size=int(dbs),
            select_rate_limit=0, delete_rate_limit=0, paused=False, partition_action="drop",
            detach_schema=None, relkind=str(relkind)))
    return policies


def orphan_predicate(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime,
                     follows_parents: bool = False) -> Predicate:
    """The orphan condition for a run that started at ``cutoff``, from the database;
    ``follows_parents``: a run right after its parents' (Predicate.follows_parents)."""
    row = conn.execute("SELECT ttl.orphans_sql(%(relid)s, %(cutoff)s), ttl._table_search_path(%(relid)s)",
                       {"relid": policy.relid, "cutoff": cutoff}).fetchone()
    assert row is not None
    return Predicate(cutoff, sql.SQL(row[0]), None, None, None, str(row[1]), row_expiry=False,
                     follows_parents=follows_parents)


def orphan_units(conn: psycopg.Connection[Any], policy: EnginePolicy) -> list[Unit]:
    """Every leaf of the child: partitions are never dropped for orphans."""
    return [Unit(int(oid), str(schema), str(relname), "orphans")
            for oid, schema, relname in conn.execute(LEAVES, {"t": policy.relid}).fetchall()]


# -- execution: a sweep of block ranges, claimed range by range (sweeps.py) -------------

# The policy's range_bytes in blocks.
RANGE_BLOCKS = """
(SELECT o.range_bytes / pg_catalog.current_setting('block_size')::int8 FROM ttl.orphan_policy o
  WHERE o.relid = %(policy)s)
"""
# The blocks of one unit, and the policy's range_bytes in blocks.
SIZE = """
SELECT pg_catalog.pg_relation_size(c.oid) / pg_catalog.current_setting('block_size')::int8,
       """ + RANGE_BLOCKS + """
  FROM pg_catalog.pg_class c WHERE c.oid = %(unit)s
"""


def delete_orphans(ctx: UnitContext) -> str:
    """Delete the unit's orphans in a sweep of its block ranges shared with other runs
    (sweeps.run). Returns 'ok' or 'partial'."""
    conn = ctx.conn
    # Without an age column: a sample of the table's xid clock for later runs (as its
    # owner), and nothing to do while no sample is min_age old.
    row = conn.execute("SELECT ttl.xid_clock_tick(%(policy)s), ttl.orphans_waiting(%(policy)s, %(cutoff)s), "
                       + RANGE_BLOCKS, {"policy": ctx.policy.relid, "cutoff": ctx.pred.cutoff}).fetchone()
    assert row is not None
    if row[1] is not None:
        return "ok"
    if row[2] is None:
        raise errors.UndefinedTable(f"the partition {ctx.unit.name} was dropped during the run")
    return sweeps.run(ctx, range_delete(ctx), int(row[2]))


# The policy's parents, to lock before each DELETE's snapshot (LOCK TABLE takes none).
LOCK_PARENTS = """
SELECT 'LOCK TABLE ' || string_agg(pg_catalog.format('%%I.%%I', n.nspname, c.relname), ', ' ORDER BY u.n)
       || ' IN ACCESS SHARE MODE'
  FROM ttl.orphan_policy o, unnest(o.parent_relids) WITH ORDINALITY AS u(parent, n)
  JOIN pg_catalog.pg_class c ON c.oid = u.parent
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE o.relid = %(policy)s
"""


def range_delete(ctx: UnitContext) -> sweeps.RangeDelete:
    """The orphans of a block range ($1, $2), deleted; the SKIP LOCKED form leaves rows an
    application holds locked for the next pass."""
    t, cond = ctx.unit.ident, ctx.pred.expired
    where = sql.SQL("ctid OPERATOR(pg_catalog.>=) $1::pg_catalog.tid"
                    " AND ctid OPERATOR(pg_catalog.<) $2::pg_catalog.tid")
    plain = sql.SQL("DELETE FROM ONLY {t} WHERE {where} AND {cond}").format(t=t, where=where, cond=cond)
    skip = sql.SQL("DELETE FROM ONLY {t} WHERE ctid = ANY(ARRAY(SELECT ctid FROM ONLY {t} WHERE {where} AND {cond}"
                   " FOR UPDATE SKIP LOCKED)) AND {cond}").format(t=t, where=where, cond=cond)
    row = ctx.conn.execute(LOCK_PARENTS, {"policy": ctx.policy.relid}).fetchone()
    # REPEATABLE READ: a child updated meanwhile (moved to a parent committed after the
    # snapshot) fails the DELETE (40001, redone with a new snapshot) instead of being
    # re-checked against the parents as they were before that update (READ COMMITTED).
    prelude = ("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", *([row[0]] if row and row[0] else []))
    return sweeps.RangeDelete("orphans", plain.as_string(ctx.conn), skip.as_string(ctx.conn),
                              ctx.policy.delete_batch_size, True, prelude=prelude)


# -- read side: estimates per range (pg-ttl plan), a sweep's state (pg-ttl orphans status) --

# Blocks read per range for an estimate: a range of at most this many is counted whole
# (exact), a larger one from this many blocks spread over it, scaled to its size.
SAMPLE_BLOCKS = 8
SAMPLE_RANGES_PER_STATEMENT = 64
# The rows of the sampled blocks and their orphans, per range: a TID scan of every
# line pointer the blocks can hold, each row looked up in the parents as a run would.
SAMPLE = sql.SQL("""
SELECT CAST((CAST(CAST(ctid AS pg_catalog.text) AS pg_catalog.point))[0] AS pg_catalog.int8) / {rb},
       count(*), count(*) FILTER (WHERE {cond})
  FROM ONLY {t} WHERE ctid OPERATOR(pg_catalog.=) ANY (CAST({tids} AS pg_catalog.tid[]))
 GROUP BY 1
""")


@dataclass
class RangeEstimate:
    """What a run now would find in one block range of a unit."""

    range_no: int
    first_block: int
    end_block: int
    rows: int  # rows in the range
    orphans: int  # of them, orphans a run now would delete
    exact: bool  # every block counted; otherwise scaled from SAMPLE_BLOCKS of them


def estimate_ranges(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate,
                    unit: Unit) -> list[RangeEstimate]:
    """Per block range of the unit (of range_bytes, as a sweep would cut it now): its rows
    and the orphans a run now would delete, counted in SAMPLE_BLOCKS blocks of it. Runs
    the orphan condition: call it as the table's owner. Reads at most SAMPLE_BLOCKS
    blocks a range, never a scan of the unit."""
    row = conn.execute(SIZE, {"unit": unit.relid, "policy": policy.relid}).fetchone()
    if row is None or row[0] is None or row[1] is None:
        return []
    nblocks, range_blocks = int(row[0]), max(1, int(row[1]))
    bs = conn.execute("SELECT pg_catalog.current_setting('block_size')::int").fetchone()
    per_page = (int(bs[0]) - 24) // 28 if bs else 291  # MaxHeapTuplesPerPage
    ranges: list[tuple[int, int, list[int]]] = []
    for n in range(-(-nblocks // range_blocks)):
        lo, hi = n * range_blocks, min((n + 1) * range_blocks, nblocks)
        size = hi - lo
        picked = list(range(lo, hi)) if size <= SAMPLE_BLOCKS else \
            sorted({lo + (2 * i + 1) * size // (2 * SAMPLE_BLOCKS) for i in range(SAMPLE_BLOCKS)})
        ranges.append((lo, hi, picked))
    counted: dict[int, tuple[int, int]] = {}
    for first in range(0, len(ranges), SAMPLE_RANGES_PER_STATEMENT):  # a few MB of tids at most a statement
        tids = "{" + ",".join(f'"({b},{o})"' for _, _, picked in ranges[first:first + SAMPLE_RANGES_PER_STATEMENT]
                              for b in picked for o in range(1, per_page + 1)) + "}"
        counted.update({int(r): (int(rows), int(orphans)) for r, rows, orphans in execute_plain(conn, SAMPLE.format(
            rb=sql.Literal(range_blocks), cond=pred.expired, t=unit.ident, tids=sql.Literal(tids)))})
    out: list[RangeEstimate] = []
    for n, (lo, hi, picked) in enumerate(ranges):
        rows, orphans = counted.get(n, (0, 0))
        scale = (hi - lo) / len(picked)
        out.append(RangeEstimate(n, lo, hi, round(rows * scale), round(orphans * scale), len(picked) == hi - lo))
    return out


def execute_plain(conn: psycopg.Connection[Any], query: sql.Composed) -> list[tuple[Any, ...]]:
    # without parameters: a '%' in a name or the condition is no placeholder
    return conn.execute(query).fetchall()


@dataclass
class OrphanReport:
    """One orphan policy as pg-ttl orphans status / plan show it."""

    table: str
    parents: str  # as TTL DDL spells them: 'public.metadata(hash)'
    min_age: str
    age_column: str | None  # None: the transactions' ids tell a row's age (the xid clock)
    waiting: str | None  # why a run now would delete nothing yet
    units: list[sweeps.SweepState]
    ranges: dict[str, list[RangeEstimate]]  # per unit, when estimated


REPORT = """
SELECT (SELECT v.value FROM ttl._orphan_values(o.relid) v WHERE v.option = 'ttl_orphan_of'), o.min_age::text,
       ttl._attname(o.relid, o.age_attnum)::text, ttl.orphans_waiting(o.relid, %(cutoff)s)
  FROM ttl.orphan_policy o WHERE o.relid = %(t)s
"""


def report(conn: psycopg.Connection[Any], tables: list[int] | None, estimate: bool) -> list[OrphanReport]:
    """Each orphan policy of ``tables`` (None: every one the caller may act for): the
    rule that tells a row's age, each leaf's sweep and last run, and (``estimate``)
    each range's orphans estimated as a run now would find them. Reads only."""
    from pg_ttl.expire import owner
    from pg_ttl.expire.plan import _reading

    out: list[OrphanReport] = []
    with _reading(conn) as cutoff:
        for policy in load_orphan_policies(conn, tables):
            if tables is not None and policy.relid not in tables:
                continue  # a child of a table asked for: reported with its own table
            if tables is None and not owner.can_act_as(conn, policy.owner):
                continue
            row = conn.execute(REPORT, {"t": policy.relid, "cutoff": cutoff}).fetchone()
            assert row is not None
            units = orphan_units(conn, policy)
            rep = OrphanReport(policy.name, str(row[0]), str(row[1]), row[2], row[3],
                               [sweeps.sweep_state(conn, u.relid, u.name, "orphans") for u in units], {})
            if estimate:
                pred = orphan_predicate(conn, policy, cutoff)
                owner.become(conn, policy.owner, policy.name, local=True)
                conn.execute("SELECT pg_catalog.set_config('search_path', %s, true)", (pred.search_path,))
                rep.ranges = {u.name: estimate_ranges(conn, policy, pred, u) for u in units}
                owner.restore(conn, local=True)
            out.append(rep)
    return out
