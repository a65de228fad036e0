"""Expiration queues: a table's rows' expiries kept in N shards beside it
(the ``ttl_queue_shards`` option, sql/78_queues.sql).

Every row with an expiry has an entry at or before it: an UPDATE that makes the
expiry later leaves the entry early, and the drain moves it. A table with a
queue is not swept: each shard with an entry due is a unit of work (claimed,
checkpointed, resumable, several workers drain different shards at once; a
shard with none is not claimed). A shard is read in
(expiry, key) order from its checkpoint, ``delete_batch_size`` entries per
statement: the rows of the entries whose expiry has passed are deleted with
the expiry re-checked on the row itself and application row locks skipped,
with these entries, and the unit's counters and checkpoint move in that same
statement (one round trip, one commit per batch). When some rows stayed, the
entries of that range whose row is gone are removed and those whose row now
expires at another instant (early ones) are moved there, their rows locked
meanwhile, in a second short transaction. The statements are the database's
(``ttl.queue_drain_sql``, built once per table run for all its shards); this
module runs them.

A queue being filled (existing rows added by ``ttl.queue_backfill``) is
filled first, batch by batch; a pass stopped meanwhile sweeps the table as if
it had no queue, and the next one goes on filling.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from pg_ttl.expire.context import UnitContext
from pg_ttl.expire.predicate import EnginePolicy
from pg_ttl.expire.ranges import UnitTimeout
from pg_ttl.expire.units import Unit

SHARDS = """
SELECT c.oid, c.relname, p.relname
  FROM ttl.queue q
  JOIN pg_catalog.pg_class p ON p.oid = q.queue_relid
  JOIN pg_catalog.pg_inherits i ON i.inhparent = q.queue_relid
  JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
 WHERE q.relid = %s
 ORDER BY c.relname
"""
# The shards with an entry due at a cutoff: one probe of each shard's primary key.
DUE = """
SELECT k FROM pg_catalog.generate_series(0, {last}) k
 WHERE EXISTS (SELECT 1 FROM {queue} q WHERE q.shard = k::pg_catalog.int2 AND q.expires_at <= {cutoff})
"""
BACKFILL = "SELECT ttl.queue_backfill(%s::oid::regclass, %s)"
BACKFILL_BATCH = 10_000
# The statements of a table's run, by its predicate (id, with the object itself to tell
# a new one at the same address): see _statements.
_STATEMENTS: dict[int, tuple[Any, tuple[str, str, str]]] = {}
# A batch whose rows keep moving to other partitions under its repair is left for the next pass.
MOVED_RETRIES = 3


def fill(conn: psycopg.Connection[Any], policy: EnginePolicy, stopping: Any) -> bool:
    """Add the table's existing rows to its queue until it is filled (one short
    transaction per batch); False when the table has no queue or it is not filled yet
    (stopped meanwhile)."""
    if policy.queue in ("none", "filled"):  # as read with the policy, at the pass's start
        return policy.queue == "filled"
    row = conn.execute("SELECT backfilled FROM ttl.queue WHERE relid = %s", (policy.relid,)).fetchone()
    if row is None:
        return False
    while not row[0]:
        if stopping():
            return False
        n = conn.execute(BACKFILL, (policy.relid, BACKFILL_BATCH)).fetchone()
        row = conn.execute("SELECT backfilled FROM ttl.queue WHERE relid = %s", (policy.relid,)).fetchone()
        if row is None or (n is not None and n[0] == 0 and not row[0]):
            return False
    policy.queue = "filled"
    return True


def filled(conn: psycopg.Connection[Any], policy: EnginePolicy) -> bool:
    """Has the table a queue, filled with its existing rows? (As read with the policy when it
    was read so; a queue being filled is asked again.)"""
    if policy.queue in ("none", "filled"):
        return policy.queue == "filled"
    row = conn.execute("SELECT backfilled FROM ttl.queue WHERE relid = %s", (policy.relid,)).fetchone()
    return bool(row and row[0])


def shard_number(unit: Unit) -> int:
    """A shard table is named ..._queue_<k>."""
    return int(unit.relname.rsplit("_", 1)[1])


def shard_units(conn: psycopg.Connection[Any], policy: EnginePolicy, due: datetime | None = None) -> list[Unit]:
    """One unit per shard of the table's queue; with ``due`` (a pass's cutoff), only the
    shards with an entry due then: a shard with none costs one index probe here instead
    of a claim, a history row and a drain statement."""
    rows = conn.execute(SHARDS, (policy.relid,)).fetchall()
    units = [Unit(int(oid), "ttl", str(relname), "queue") for oid, relname, _ in rows]
    if due is None or not rows:
        return units
    query = sql.SQL(DUE).format(last=sql.Literal(len(rows) - 1), queue=sql.Identifier("ttl", str(rows[0][2])),
                                cutoff=sql.Literal(due))
    wanted = {int(k) for (k,) in conn.execute(query)}
    return [unit for unit in units if shard_number(unit) in wanted]


def _statements(ctx: UnitContext) -> tuple[str, str, str]:
    """The drain, repair and recheck statements of the table's run (``ttl.queue_drain_sql``),
    built once for all its shards: the predicate is built once per table run, so it
    names the run (building them costs more than draining a shard with a few due rows)."""
    got = _STATEMENTS.get(id(ctx.pred))
    if got is not None and got[0] is ctx.pred:
        return got[1]
    row = ctx.conn.execute("SELECT drain, repair, recheck FROM ttl.queue_drain_sql(%s, %s)",
                           (ctx.policy.relid, ctx.pred.cutoff)).fetchone()
    assert row is not None
    statements = (str(row[0]), str(row[1]), str(row[2]))
    if len(_STATEMENTS) >= 16:  # runs of other tables, done
        _STATEMENTS.clear()
    _STATEMENTS[id(ctx.pred)] = (ctx.pred, statements)
    return statements


def drain(ctx: UnitContext) -> str:
    """Drain one shard at the run's cutoff; returns 'ok' or 'partial' (stopped)."""
    shard = shard_number(ctx.unit)
    drain_sql, repair_sql, recheck_sql = _statements(ctx)
    after = (ctx.checkpoint or {}).get("after") if (ctx.checkpoint or {}).get("strategy") == "queue" else None
    batch = max(1, ctx.policy.delete_batch_size)
    cur = psycopg.RawCursor(ctx.conn)
    while True:
        if ctx.stopping():
            return "partial"
        position = Jsonb(after) if after is not None else None
        try:
            # One statement (the session is in autocommit): the batch's rows and entries, its
            # counters and its checkpoint commit together, in one round trip.
            got = cur.execute(drain_sql, (position, batch, shard, ctx.run_id, ctx.unit.relid)).fetchone()
        except errors.LockNotAvailable as exc:
            raise _timeout(ctx) from exc
        except errors.SerializationFailure:
            continue  # a row moved to another partition meanwhile: a new statement no longer sees it
        assert got is not None
        selected, deleted, last = int(got[0]), int(got[1]), got[2]
        if selected == 0:
            return "ok"
        ctx.selected += selected
        ctx.deleted += deleted
        ctx.progress.batch_done(ctx.policy.name, ctx.unit.name, selected, deleted)
        if deleted < selected:  # some entries' rows stayed (held, gone, or expiring later): check them
            _repair(ctx, cur, (repair_sql, recheck_sql), position, Jsonb(last), shard)
        after = last
        ctx.select_limiter.add(selected)
        ctx.delete_limiter.add(deleted)
        if selected < batch:
            return "ok"


def _repair(ctx: UnitContext, cur: psycopg.RawCursor[Any], statements: tuple[str, str], position: Jsonb | None,
            last: Jsonb, shard: int) -> None:
    """The entries of a drained batch whose rows stayed, checked against them in one
    transaction: the recheck needs a new snapshot after the repair, and a row must not
    be left between them without an entry. Left as they are (early or extra, never
    late) when rows keep moving to other partitions under them: the next pass reads
    them again."""
    repair_sql, recheck_sql = statements
    for _ in range(MOVED_RETRIES):
        try:
            with ctx.conn.transaction():
                repaired = cur.execute(repair_sql, (position, last, shard)).fetchone()
                if repaired is not None and repaired[1] is not None:  # rows gone: inserted since?
                    cur.execute(recheck_sql, (Jsonb(repaired[1]), shard))
            return
        except errors.LockNotAvailable as exc:
            raise _timeout(ctx) from exc
        except errors.SerializationFailure:
            continue


def _timeout(ctx: UnitContext) -> UnitTimeout:
    return UnitTimeout(f"lock_timeout ({ctx.settings.lock_timeout}) reached: a lock on the table is held "
                       "by another session")
