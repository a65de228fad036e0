"""Dry run (``pg-ttl plan``) and the lag metric; both only read."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.expire import orphans, owner, queues, tiers
from pg_ttl.expire.context import EngineSettings
from pg_ttl.expire.engine import resolve_tables
from pg_ttl.expire.oldest import min_expiry, oldest_left
from pg_ttl.expire.predicate import EnginePolicy, Predicate, build_predicate, load_policies
from pg_ttl.expire.units import Unit, list_units


@dataclass
class UnitPlan:
    table: str
    unit: str
    # 'delete' | 'drop' | 'detach' | 'orphans' | 'queue' (a shard of the expiration queue) | 'archive' (rows
    # moved to a storage tier) | 'export' (a partition moved whole to a storage tier, then dropped or detached)
    action: str
    rows: int  # rows that would go
    total_rows: int  # rows in the unit now
    oldest_expiry: datetime | None  # of the rows that would go
    bytes_reclaimed: int  # estimate: the whole relation for drop/detach, the expired share of it otherwise
    bound: str | None = None
    paused: bool = False
    target: str | None = None  # 'archive', 'export': the storage the tier moves rows to
    then: str | None = None  # 'export': 'drop' or 'detach', once its rows are in storage


# One statement (the worker's periodic lag lookups count every one): the engine's
# session rules, with the timeouts read from ttl.settings in the same breath.
READING = """
SELECT now(), pg_catalog.set_config('TimeZone', 'UTC', true),
       pg_catalog.set_config('statement_timeout',
                             coalesce((SELECT value FROM ttl.settings WHERE name = 'statement_timeout'), %s), true),
       pg_catalog.set_config('lock_timeout',
                             coalesce((SELECT value FROM ttl.settings WHERE name = 'lock_timeout'), %s), true)
"""


@contextmanager
def _reading(conn: psycopg.Connection[Any]) -> Iterator[datetime]:
    """A transaction with the engine's session rules (UTC, timeouts); yields its now()."""
    with conn.transaction():
        row = conn.execute(READING, (EngineSettings.statement_timeout, EngineSettings.lock_timeout)).fetchone()
        assert row is not None
        yield row[0]


def plan(conn: psycopg.Connection[Any], table: str | None = None) -> list[UnitPlan]:
    """Per unit: what a run now would remove. Changes nothing."""
    out: list[UnitPlan] = []
    with _reading(conn) as cutoff:
        relids = resolve_tables(conn, [table]) if table is not None else None
        for policy in load_policies(conn, relids):
            if relids is None and not owner.can_act_as(conn, policy.owner):
                continue  # someone else's table: its owner plans it
            pred = build_predicate(conn, policy, cutoff)
            owner.become(conn, policy.owner, policy.name, local=True)
            conn.execute("SELECT pg_catalog.set_config('search_path', %s, true)", (pred.search_path,))
            for unit in tiers.archive_units(conn, policy, pred):  # rows a tier would move first
                out.extend(_plan_tiers(conn, policy, cutoff, unit) if unit.tier is None
                           else [_plan_export(conn, policy, unit)])
            if queues.filled(conn, policy):
                out.extend(_plan_shard(conn, policy, cutoff, unit) for unit in queues.shard_units(conn, policy))
            else:
                for unit in list_units(conn, policy, pred):
                    out.append(_plan_unit(conn, policy, pred, unit))
            owner.restore(conn, local=True)
        for policy in orphans.load_orphan_policies(conn, relids):
            if relids is not None and policy.relid not in relids:
                continue  # a child of a table asked for: planned with its own table
            if relids is None and not owner.can_act_as(conn, policy.owner):
                continue
            pred = orphans.orphan_predicate(conn, policy, cutoff)
            owner.become(conn, policy.owner, policy.name, local=True)
            conn.execute("SELECT pg_catalog.set_config('search_path', %s, true)", (pred.search_path,))
            for unit in orphans.orphan_units(conn, policy):
                out.append(_plan_orphans(conn, policy, pred, unit))
            owner.restore(conn, local=True)
    return out


def _plan_orphans(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, unit: Unit) -> UnitPlan:
    """A leaf's orphans, estimated range by range from a few blocks of each (exact for
    a small leaf): a count of them all would look up every row in the parents."""
    ranges = orphans.estimate_ranges(conn, policy, pred, unit)
    rows, total = sum(r.orphans for r in ranges), sum(r.rows for r in ranges)
    size = conn.execute("SELECT pg_catalog.pg_total_relation_size(%s::oid::regclass)", (unit.relid,)).fetchone()
    reclaimed = int(size[0]) * rows // total if size and total else 0
    return UnitPlan(policy.name, unit.name, "orphans", rows, total, None, reclaimed, None, policy.paused)


def _plan_unit(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate, unit: Unit) -> UnitPlan:
    whole = unit.action in ("drop", "detach")
    condition = sql.SQL("true") if whole else pred.expired
    only = sql.SQL("") if whole else sql.SQL("ONLY ")
    oldest = min_expiry(conn, policy, pred)
    query = sql.SQL(
        "SELECT count(*) FILTER (WHERE {cond}), count(*), (SELECT {oldest} FROM {only}{t} WHERE {cond}),"
        " (SELECT coalesce(sum(pg_catalog.pg_total_relation_size(p.relid)),"
        "                  pg_catalog.pg_total_relation_size({oid}::regclass))"
        "    FROM pg_catalog.pg_partition_tree({oid}::regclass) p WHERE p.isleaf)"
        " FROM {only}{t}"
    ).format(cond=condition, oldest=oldest, only=only, t=unit.ident,
             oid=sql.Literal(unit.relid))
    row = conn.execute(query).fetchone()
    assert row is not None
    rows, total, oldest, size = int(row[0]), int(row[1]), row[2], int(row[3])
    reclaimed = size if whole else (size * rows // total if total else 0)
    return UnitPlan(policy.name, unit.name, unit.action, rows, total, oldest, reclaimed, unit.bound, policy.paused)


def _plan_shard(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime, unit: Unit) -> UnitPlan:
    """A shard of the table's expiration queue: its entries due at the cutoff, counted
    exactly through its primary key (what a pass reads; rows the application holds
    then, or moved meanwhile, stay)."""
    shard = queues.shard_number(unit)
    # values as literals: a '%' in the table's name must not read as a placeholder
    row = conn.execute(sql.SQL(
        "SELECT count(*) FILTER (WHERE expires_at <= {c}), count(*), min(expires_at) FILTER (WHERE expires_at <= {c}),"
        " pg_catalog.pg_total_relation_size({t}::regclass) FROM ONLY {q} WHERE shard = {s}").format(
        c=sql.Literal(cutoff), t=sql.Literal(policy.relid), q=unit.ident, s=sql.Literal(shard))).fetchone()
    assert row is not None
    rows, total, oldest, size = int(row[0]), int(row[1]), row[2], int(row[3])
    table_rows = conn.execute("SELECT greatest(reltuples, 1) FROM pg_catalog.pg_class WHERE oid = %s",
                              (policy.relid,)).fetchone()
    share = rows / float(table_rows[0]) if table_rows else 0.0
    return UnitPlan(policy.name, unit.name, "queue", rows, total, oldest, int(size * min(share, 1.0)), None,
                    policy.paused)


def _plan_tiers(conn: psycopg.Connection[Any], policy: EnginePolicy, cutoff: datetime, unit: Unit) -> list[UnitPlan]:
    """Per storage tier: the rows of the leaf it would move now (sql/82_tiers.sql)."""
    out: list[UnitPlan] = []
    for position, storage, _url in conn.execute(tiers.TIERS, (policy.relid,)).fetchall():
        row = conn.execute("SELECT ttl.tier_sql(%s, %s, %s), ttl.row_time_sql(%s)",
                           (policy.relid, position, cutoff, policy.relid)).fetchone()
        assert row is not None
        counted = conn.execute(sql.SQL(
            "SELECT count(*) FILTER (WHERE {p}), count(*), min({t}) FILTER (WHERE {p}),"
            " pg_catalog.pg_total_relation_size({oid}::regclass) FROM ONLY {u}").format(
            p=sql.SQL(row[0]), t=sql.SQL(row[1]), oid=sql.Literal(unit.relid), u=unit.ident)).fetchone()
        assert counted is not None
        rows, total, oldest, size = int(counted[0]), int(counted[1]), counted[2], int(counted[3])
        out.append(UnitPlan(policy.name, unit.name, "archive", rows, total, oldest,
                            size * rows // total if total else 0, None, policy.paused, str(storage)))
    return out


def _plan_export(conn: psycopg.Connection[Any], policy: EnginePolicy, unit: Unit) -> UnitPlan:
    """A partition every row of which reached a storage tier: all its rows go to that tier,
    then it is dropped or detached (tiers/exports.py)."""
    when = conn.execute("SELECT ttl.row_time_sql(%s)", (policy.relid,)).fetchone()
    assert when is not None and when[0] is not None
    row = conn.execute(sql.SQL(
        "SELECT count(*), min({t}), (SELECT sum(pg_catalog.pg_total_relation_size(relid))"
        " FROM pg_catalog.pg_partition_tree({oid}::regclass)), (SELECT s.storage FROM ttl.tier s"
        " WHERE s.relid = {relid} AND s.position = {tier}) FROM {u}").format(
        t=sql.SQL(when[0]), oid=sql.Literal(unit.relid), relid=sql.Literal(policy.relid),
        tier=sql.Literal(unit.tier), u=unit.ident)).fetchone()
    assert row is not None
    rows = int(row[0])
    return UnitPlan(policy.name, unit.name, "export", rows, rows, row[1], int(row[2] or 0), unit.bound, policy.paused,
                    str(row[3]), "detach" if policy.partition_action == "detach" else "drop")


def oldest_expired(conn: psycopg.Connection[Any], relid: int) -> datetime | None:
    """Expiry time of the oldest expired row still present (None: nothing expired)."""
    with _reading(conn) as cutoff:
        policies = load_policies(conn, [relid])
        if not policies:
            return None
        policy = policies[0]
        pred = build_predicate(conn, policy, cutoff)
        owner.become(conn, policy.owner, policy.name, local=True)
        conn.execute("SELECT pg_catalog.set_config('search_path', %s, true)", (pred.search_path,))
        return oldest_left(conn, policy, pred)
