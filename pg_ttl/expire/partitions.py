"""Removing a whole expired range partition: DROP, or DETACH (+ move to detach_schema).

DETACH ... CONCURRENTLY cannot run in a transaction block; on an autocommit
connection we can issue it (pg_partman cannot, its issue 677). The server
refuses it when the parent has a default partition: then a plain DETACH under
lock_timeout. A CONCURRENTLY detach interrupted between its two transactions
leaves the partition "detach pending"; units.py hands it back and we FINALIZE.

Statements that name a table take no parameters: psycopg would read a '%' in a
name as a placeholder (parameters go in statements of their own).
"""

from __future__ import annotations

from psycopg import errors, sql

from pg_ttl.expire.context import UnitContext


def _timeouts(ctx: UnitContext) -> None:
    ctx.conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, true), "
                     "pg_catalog.set_config('statement_timeout', %s, true)",
                     (ctx.settings.lock_timeout, ctx.settings.statement_timeout))


def drop_partition(ctx: UnitContext) -> None:
    """DROP TABLE, its history row and its claim's release in one transaction and one
    round trip: several statements with no parameters go as one simple query, which
    the server runs as one transaction."""
    ctx.conn.execute(sql.SQL(
        "SELECT pg_catalog.set_config('lock_timeout', {lock}, true),"
        " pg_catalog.set_config('statement_timeout', {stmt}, true);"
        " DROP TABLE {t};"
        " SELECT ttl._end_unit({run}, {unit}, 'ok', NULL, true)").format(
        lock=sql.Literal(ctx.settings.lock_timeout), stmt=sql.Literal(ctx.settings.statement_timeout),
        t=ctx.unit.ident, run=sql.Literal(ctx.run_id), unit=sql.Literal(ctx.unit.relid)))


def detach_partition(ctx: UnitContext) -> str:
    """Detach the partition and move it to detach_schema; returns how it was detached."""
    unit, conn = ctx.unit, ctx.conn
    assert unit.parent is not None
    how = "finalize"
    if unit.detach_pending:
        with conn.transaction():
            _timeouts(ctx)
            conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {} FINALIZE").format(unit.parent, unit.ident))
    else:
        how = "concurrently"
        # Outside a transaction block: the session's lock_timeout/statement_timeout apply.
        try:
            conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {} CONCURRENTLY").format(unit.parent, unit.ident))
        except (errors.ObjectNotInPrerequisiteState, errors.FeatureNotSupported):
            # e.g. "cannot detach partitions concurrently when a default partition exists"
            how = "plain"
            with conn.transaction():
                _timeouts(ctx)
                conn.execute(sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(unit.parent, unit.ident))
    with conn.transaction():
        _timeouts(ctx)
        schema = ctx.policy.detach_schema
        if schema and schema != unit.schema:
            conn.execute(sql.SQL("ALTER TABLE {} SET SCHEMA {}").format(unit.ident, sql.Identifier(schema)))
        conn.execute("SELECT ttl._end_unit(%s, %s, 'ok', NULL, true)", (ctx.run_id, unit.relid))
    return how

