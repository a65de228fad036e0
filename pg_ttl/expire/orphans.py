"""Orphan deletion: a child table's rows whose parent row is gone.

Which rows are orphans is the database's definition (``ttl.orphans_sql`` in
sql/80_orphans.sql): no row with the same key in the parent, found through the
parent's unique index, and older than ``min_age`` by the age column. The
engine runs it like row expiry: each leaf of the child is a unit (claimed,
checkpointed, resumable), swept in ctid block ranges of about
``range_bytes``, each DELETE re-checking the condition, so a parent committed
meanwhile keeps its child. The history records these units as 'orphans'.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.expire.predicate import EnginePolicy, Predicate
from pg_ttl.expire.units import Unit

# Orphan policies of the given tables (as children) and of the children of the
# given tables (as parents: children follow their parents in the same pass).
ORPHAN_QUERY = """
SELECT o.relid, n.nspname, c.relname, pg_catalog.pg_get_userbyid(c.relowner), o.delete_batch_size,
       o.range_bytes, c.relkind, o.parent_relid
  FROM ttl.orphan_policy o
  JOIN pg_catalog.pg_class c ON c.oid = o.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE %(tables)s::oid[] IS NULL OR o.relid = ANY(%(tables)s::oid[]) OR o.parent_relid = ANY(%(tables)s::oid[])
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
    for relid, schema, relname, owner, dbs, range_bytes, relkind, _parent in conn.execute(
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


def orphan_predicate(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime) -> Predicate:
    """The orphan condition for a run that started at ``cutoff``, from the database."""
    row = conn.execute("SELECT ttl.orphans_sql(%(relid)s, %(cutoff)s), ttl._table_search_path(%(relid)s)",
                       {"relid": policy.relid, "cutoff": cutoff}).fetchone()
    assert row is not None
    return Predicate(cutoff, sql.SQL(row[0]), None, None, None, str(row[1]), row_expiry=False)


def orphan_units(conn: psycopg.Connection[Any], policy: EnginePolicy) -> list[Unit]:
    """Every leaf of the child: partitions are never dropped for orphans."""
    return [Unit(int(oid), str(schema), str(relname), "orphans")
            for oid, schema, relname in conn.execute(LEAVES, {"t": policy.relid}).fetchall()]
