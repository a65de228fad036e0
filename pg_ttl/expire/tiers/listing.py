"""Which tables have tiers, and the archive run's units: each leaf, or a range partition
every row of which reached a storage tier that takes partitions whole (exports.py)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.archive.postgres import PostgresTarget
from pg_ttl.archive.storage import BaseStorage, open_storage
from pg_ttl.expire.orphans import LEAVES
from pg_ttl.expire.predicate import EnginePolicy, Predicate
from pg_ttl.expire.units import CHILDREN, Unit, range_key, upper_bound

TIERS = """
SELECT t.position, t.storage, s.url FROM ttl.tier t JOIN ttl.storage s ON s.name = t.storage
 WHERE t.relid = %s ORDER BY t.position
"""


def archives_before_delete(conn: psycopg.Connection[Any], relid: int) -> bool:
    """Rows past the DELETE are archived first (the deletion waits for a complete archive run)."""
    return conn.execute("SELECT 1 FROM ttl.tier WHERE relid = %s AND archive_before_delete LIMIT 1",
                        (relid,)).fetchone() is not None


def archive_units(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate | None = None) -> list[Unit]:
    """Every leaf of the table (or the table itself). With the run's predicate, a range
    partition on the TTL column whose every row reached a storage tier at its cutoff is one
    unit (``tier`` set: exported whole, then dropped or detached) instead of its leaves."""
    leaves = [Unit(int(oid), str(schema), str(name), "archive")
              for oid, schema, name in conn.execute(LEAVES, {"t": policy.relid}).fetchall()]
    if pred is None or policy.relkind != "p" or policy.column is None or policy.expression is not None:
        return leaves
    # A PostgreSQL storage takes a partition whole in a transaction prepared there (taken back
    # if the partition must stay): only where its server allows prepared transactions
    whole_tiers = {int(position) for position, name, url in conn.execute(TIERS, (policy.relid,)).fetchall()
                   if _exports_whole(open_storage(str(name), str(url)))}
    whole: list[Unit] = []
    if whole_tiers:
        _whole_partitions(conn, policy, pred, whole_tiers, policy.relid, policy.ident, whole)
    if not whole:
        return leaves
    covered = {int(oid) for (oid,) in conn.execute(
        "SELECT t.relid::oid FROM pg_catalog.unnest(%s::oid[]) w, pg_catalog.pg_partition_tree(w::regclass) t",
        ([u.relid for u in whole],))}
    return whole + [u for u in leaves if u.relid not in covered]


def _exports_whole(storage: BaseStorage | PostgresTarget) -> bool:
    return not isinstance(storage, PostgresTarget) or storage.can_prepare()


def _whole_partitions(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, whole_tiers: set[int],
                      relid: int, ident: sql.Identifier, out: list[Unit]) -> None:
    """The highest range partitions on the TTL column under ``relid`` whose upper bound
    reached a storage tier that takes partitions whole (sql/82_tiers.sql:
    ttl.partition_tier), as units.py's walk finds expired ones."""
    key = range_key(conn, relid)
    on_column = key is not None and key.column == policy.column
    children = conn.execute(CHILDREN, (relid,)).fetchall()
    tier_of: dict[str, int] = {}
    if on_column:
        uppers = [u for u in (upper_bound(b) for *_, b, _p, _n in children) if u is not None]
        if uppers:
            tier_of = {str(u): int(k) for u, k in conn.execute(
                "SELECT u, ttl.partition_tier(%s, %s, u) FROM pg_catalog.unnest(%s::text[]) u",
                (policy.relid, pred.cutoff, uppers)) if k is not None and int(k) in whole_tiers}
    for oid, schema, relname, relkind, bound, pending, _pages in children:
        if relkind not in ("r", "p") or pending:
            continue  # a foreign table, or one being detached: its leaves stay units of their own
        upper = upper_bound(bound) if on_column else None
        if upper is not None and upper in tier_of:
            out.append(Unit(int(oid), str(schema), str(relname), "archive", parent=ident, parent_relid=relid,
                            upper=upper, bound=bound, tier=tier_of[upper]))
        elif relkind == "p":
            _whole_partitions(conn, policy, pred, whole_tiers, int(oid), sql.Identifier(str(schema), str(relname)),
                              out)
