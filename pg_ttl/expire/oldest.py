"""The expiry of a table's oldest expired row still present: the lag metric's number."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.expire import queues
from pg_ttl.expire.predicate import EnginePolicy, Predicate


def min_expiry(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate) -> sql.Composable:
    """The expression ``min(<expiry of the row>)`` over a table's rows."""
    if pred.column is None:
        assert policy.expression is not None
        return sql.SQL("min(({}))").format(sql.SQL(policy.expression))
    assert pred.min_expiry is not None  # read with the predicate (build_predicate)
    return pred.min_expiry


def oldest_left(conn: psycopg.Connection[Any], policy: EnginePolicy, pred: Predicate) -> datetime | None:
    """Expiry time of the oldest row expired by ``pred``'s cutoff still in the table (None: none).
    The caller acts as the table's owner with its search_path (the expression is the owner's).

    For column policies ``min(col)`` under ``col <= threshold`` is one index
    probe per partition when the column is indexed.
    """
    if queues.filled(conn, policy):
        # the queue knows: each shard's first due entries, their rows re-checked (an entry may be
        # early); a shard with no entry due has none to offer (one probe finds those that have)
        found = []
        for unit in queues.shard_units(conn, policy, due=pred.cutoff):
            query = conn.execute("SELECT ttl.queue_oldest_sql(%s, %s, %s)",
                                 (policy.relid, queues.shard_number(unit), pred.cutoff)).fetchone()
            assert query is not None
            found.append(psycopg.RawCursor(conn).execute(query[0]).fetchone())
        return min((r[0] for r in found if r and r[0] is not None), default=None)
    query = sql.SQL("SELECT {} FROM {} WHERE {}").format(min_expiry(conn, policy, pred), policy.ident, pred.expired)
    row = conn.execute(query).fetchone()
    return row[0] if row else None
