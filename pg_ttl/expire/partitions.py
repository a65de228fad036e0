"""Removing a whole expired range partition: DROP, or DETACH (+ move to detach_schema).

DETACH ... CONCURRENTLY cannot run in a transaction block; on an autocommit
connection we can issue it (pg_partman cannot, its issue 677). The server
refuses it when the parent has a default partition: then a plain DETACH under
lock_timeout. A CONCURRENTLY detach interrupted between its two transactions
leaves the partition "detach pending"; units.py hands it back and we FINALIZE.
A partition exported whole to a storage tier (tiers/exports.py) is dropped, or
detached plainly, in the transaction that lists its objects
(remove_in_transaction).

Statements that name a table take no parameters: psycopg would read a '%' in a
name as a placeholder (parameters go in statements of their own).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors, sql

from pg_ttl.expire.context import EngineSettings, UnitContext
from pg_ttl.expire.units import Unit

# Expired partitions dropped by one DROP TABLE (ttl._drop_units): a claim and a history row
# each, but one statement for all. Dropping a partition locks its parent (ACCESS EXCLUSIVE)
# until the transaction ends: a batch keeps that to a few milliseconds.
DROP_BATCH = 16
# The claims a batch that failed before its DROP still holds (session advisory locks
# outlive the transaction), released.
RELEASE_BATCH = """
SELECT pg_catalog.pg_advisory_unlock(s.k)
  FROM (SELECT ttl._claim_key(u) AS k FROM pg_catalog.unnest(%s::oid[]) AS u) s
 WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1
                  AND l.mode = 'ExclusiveLock' AND ((l.classid::int8 << 32) | l.objid::int8) = s.k)
"""


def _timeouts(ctx: UnitContext) -> None:
    ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true), "
                     "pg_catalog.set_config('statement_timeout', %s, true)",
                     (ctx.settings.lock_timeout, ctx.settings.statement_timeout))


def in_place(ctx: UnitContext, how: str) -> tuple[sql.Identifier, sql.Identifier, str]:
    """(parent, partition, its schema) as they are named now, once the partition is locked (``how``:
    'drop', 'partition', 'check' or 'export', sql/50_history.sql ttl._lock_partition) and checked to be still the
    one judged: attached to the same parent with the same bound (the application may have
    detached or renamed it, or given its name to another table, since it was listed).
    Raises ObjectNotInPrerequisiteState when it is not."""
    row = ctx.conn.execute("SELECT nsp, rel, parent_nsp, parent_rel FROM ttl._lock_partition(%s, %s, %s, %s)",
                           (ctx.unit.relid, ctx.unit.parent_relid, ctx.unit.bound, how)).fetchone()
    assert row is not None
    return sql.Identifier(str(row[2]), str(row[3])), sql.Identifier(str(row[0]), str(row[1])), str(row[0])


def _recheck(ctx: UnitContext) -> None:
    """For a partition judged by the writes it received (per-row TTL), under its lock: the
    judgement again, since a write may have committed in between (sql/73_value_ttls.sql)."""
    if ctx.unit.recheck:
        ctx.conn.execute("SELECT ttl._partition_still_expired(%s, %s, %s)",
                         (ctx.policy.relid, ctx.unit.relid, ctx.pred.cutoff))


class Kept(Exception):
    """The partition stays (the unit is skipped, ended): written to since it was judged expired,
    or detach_schema cannot take it."""


def _kept(ctx: UnitContext, exc: errors.ObjectNotInPrerequisiteState) -> Kept:
    reason = exc.diag.message_primary or str(exc)
    ctx.conn.execute("SELECT ttl._end_unit(%s, %s, 'skipped', %s, true)", (ctx.run_id, ctx.unit.relid, reason))
    return Kept(reason)


def drop_partition(ctx: UnitContext) -> None:
    """DROP TABLE, its history row and its claim's release in one transaction, the
    partition locked (with its parent) and checked first."""
    conn = ctx.conn
    try:
        with conn.transaction():
            _timeouts(ctx)
            # (judged again under the partition's lock alone: the parent's only for the DROP)
            _parent, table, _schema = in_place(ctx, "partition" if ctx.unit.recheck else "drop")
            _recheck(ctx)
            conn.execute(sql.SQL("DROP TABLE {}").format(table))
            conn.execute("SELECT ttl._end_unit(%s, %s, 'ok', NULL, true)", (ctx.run_id, ctx.unit.relid))
    except errors.ObjectNotInPrerequisiteState as exc:
        raise _kept(ctx, exc) from None


def droppable_together(unit: Unit) -> bool:
    """A partition dropped without a second look (not one judged by the writes it received)."""
    return unit.action == "drop" and not unit.recheck


def drop_together(conn: psycopg.Connection[Any], table: int, run_id: int, units: list[Unit], cutoff: datetime,
                  settings: EngineSettings) -> dict[int, str | None]:
    """Claim, record and drop ``units`` with one statement (ttl._drop_units). Per unit: None
    (dropped), the reason it was skipped, or 'retry' (nothing done: drop it on its own)."""
    try:
        with conn.transaction():
            # each locked and checked to be still the partition judged (ttl._lock_partition):
            # one that is not makes the batch go one by one, where it is skipped with the reason
            conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true), "
                         "pg_catalog.set_config('statement_timeout', %s, true)",
                         (settings.lock_timeout, settings.statement_timeout))
            conn.execute("SELECT ttl._lock_partition(u, p, b, 'drop') "
                         "FROM ROWS FROM (pg_catalog.unnest(%s::oid[]), pg_catalog.unnest(%s::oid[]), "
                         "pg_catalog.unnest(%s::text[])) AS x(u, p, b)",
                         ([u.relid for u in units], [u.parent_relid for u in units], [u.bound for u in units]))
            rows = conn.execute("SELECT unit, reason FROM ttl._drop_units(%s, %s, %s, %s, %s, %s, %s, "
                                "pg_catalog.current_setting('search_path'))",
                                (run_id, table, [u.relid for u in units], [u.name for u in units], cutoff,
                                 settings.lock_timeout, settings.statement_timeout)).fetchall()
    except psycopg.Error:
        if conn.broken:
            raise
        conn.execute(RELEASE_BATCH, ([u.relid for u in units],))
        return {u.relid: "retry" for u in units}
    return {int(unit): reason for unit, reason in rows}


# Can the session's role (the table's owner) move the partition into detach_schema: the
# schema exists, the role may create in it, it has no relation of the partition's name?
DESTINATION = """
SELECT n.oid IS NOT NULL, n.oid IS NOT NULL AND pg_catalog.has_schema_privilege(n.oid, 'CREATE'),
       EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = %s)
  FROM (SELECT 1) x LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = %s
"""


def _check_destination(ctx: UnitContext) -> None:
    """A partition is detached only when it can then be moved to detach_schema: a schema
    dropped, the owner's CREATE on it revoked since the policy named it, or a table of the
    partition's name there (an earlier year's ev_03_01, say) would leave it detached where
    it was. Else it stays attached and the unit is skipped with the reason
    (the next run tries again)."""
    schema = ctx.policy.detach_schema
    if not schema or schema == ctx.unit.schema:
        return
    row = ctx.conn.execute(DESTINATION, (ctx.unit.relname, schema)).fetchone()
    assert row is not None
    if row[1] and not row[2]:
        return
    reason = (f'schema "{schema}" of "ttl_detach_schema" does not exist' if not row[0] else
              f'the owner of {ctx.policy.name} may not create tables in schema "{schema}" of "ttl_detach_schema"'
              if not row[1] else f'schema "{schema}" of "ttl_detach_schema" already has a relation named '
              f'"{ctx.unit.relname}"')
    reason += ": the partition stays attached"
    ctx.conn.execute("SELECT ttl._end_unit(%s, %s, 'skipped', %s, true)", (ctx.run_id, ctx.unit.relid, reason))
    raise Kept(reason)


def detach_partition(ctx: UnitContext) -> str:
    """Detach the partition and move it to detach_schema; returns how it was detached."""
    unit, conn = ctx.unit, ctx.conn
    how = "finalize"
    if not unit.detached and not unit.detach_pending:
        _check_destination(ctx)
    parent, table, in_schema = unit.parent, unit.ident, unit.schema
    try:
        if unit.detached:
            how = "moved"  # (detached by the run that was interrupted; where it is now, by oid)
            row = conn.execute("SELECT n.nspname, c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n"
                               " ON n.oid = c.relnamespace WHERE c.oid = %s", (unit.relid,)).fetchone()
            if row is None:
                raise errors.UndefinedTable("the partition was dropped during the run")
            table, in_schema = sql.Identifier(str(row[0]), str(row[1])), str(row[0])
        elif unit.recheck:
            # judged again under the lock that the plain DETACH then keeps
            how = "plain"
            with conn.transaction():
                _timeouts(ctx)
                parent, table, in_schema = in_place(ctx, "partition")
                _recheck(ctx)
                conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(parent, table))
        elif unit.detach_pending:
            assert parent is not None
            with conn.transaction():
                _timeouts(ctx)
                conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {} FINALIZE").format(parent, table))
        else:
            how = "concurrently"
            # CONCURRENTLY cannot run in a transaction: checked just before, without a lock.
            parent, table, in_schema = in_place(ctx, "check")
            # Outside a transaction block: the session's lock_timeout/statement_timeout apply.
            try:
                conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {} CONCURRENTLY").format(parent, table))
            except (errors.ObjectNotInPrerequisiteState, errors.FeatureNotSupported):
                # e.g. "cannot detach partitions concurrently when a default partition exists"
                how = "plain"
                with conn.transaction():
                    _timeouts(ctx)
                    parent, table, in_schema = in_place(ctx, "drop")
                    conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(parent, table))
    except errors.ObjectNotInPrerequisiteState as exc:
        raise _kept(ctx, exc) from None
    with conn.transaction():
        _timeouts(ctx)
        schema = ctx.policy.detach_schema
        if schema and schema != in_schema:
            conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(table, sql.Identifier(schema)))
        conn.execute("SELECT ttl._end_unit(%s, %s, 'ok', NULL, true)", (ctx.run_id, unit.relid))
    return how


def remove_in_transaction(ctx: UnitContext) -> str:
    """Drop the unit's partition, or detach it (plain: CONCURRENTLY cannot run in a
    transaction block) and move it to detach_schema, per ttl_partition_action, in the
    caller's transaction (tiers/exports.py: the one that lists the partition's objects). Returns
    the action done, 'drop' or 'detach'."""
    unit, conn = ctx.unit, ctx.conn
    _timeouts(ctx)
    if ctx.policy.partition_action != "detach":
        conn.execute(sql.SQL("DROP TABLE {}").format(unit.ident))
        return "drop"
    assert unit.parent is not None
    conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(unit.parent, unit.ident))
    schema = ctx.policy.detach_schema
    if schema and schema != unit.schema:
        conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(unit.ident, sql.Identifier(schema)))
    return "detach"
