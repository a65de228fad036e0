"""Run history (ttl.run, ttl.run_unit) and the per-unit checkpoints kept in it.

Counters and checkpoint of a unit are updated by the same statement that
deletes its rows (see rows.py), so they are exact whatever happens to the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pg_ttl.expire import owner

# The run's row (ttl._start_run) and, with a search_path, the session's set to it.
START_RUN = """
SELECT ttl._start_run(%s, %s, %s, %s, %s, %s, %s),
       CASE WHEN %s::text IS NOT NULL THEN pg_catalog.set_config('search_path', %s, false) END
"""


def start_run(conn: psycopg.Connection[Any], relid: int, table: str, worker: str | None, cutoff: datetime,
              status: str = "running", error: str | None = None, search_path: str | None = None,
              finished: bool = False) -> int:
    """The run's row (``finished``: one that ends as it starts); with ``search_path``, the
    session's search_path set to it by the same statement (the run's statements that
    follow use the table's)."""
    row = conn.execute(START_RUN, (relid, table, worker, cutoff, status, error, finished, search_path,
                                   search_path)).fetchone()
    assert row is not None
    return int(row[0])


# The caller's claim on a unit released, if it holds one (a statement that claimed it failed after)
RELEASE_IF_HELD = """
SELECT ttl._release_claim(%(unit)s, NULL)
 WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid() AND l.objsubid = 1
                  AND ((l.classid::int8 << 32) | l.objid::int8) = ttl._claim_key(%(unit)s))
"""


@contextlib.contextmanager
def claiming(conn: psycopg.Connection[Any], unit_relid: int) -> Iterator[None]:
    """Around a statement that claims a unit (ttl._begin_unit) and does more: if it fails
    after the claim, its transaction is undone but not the claim (a session advisory lock),
    which would keep every other run off the unit for as long as this session lives."""
    try:
        yield
    except psycopg.Error:
        if not conn.broken:
            with contextlib.suppress(psycopg.Error):
                conn.execute(RELEASE_IF_HELD, {"unit": unit_relid})
        raise


def close_dead_runs(conn: psycopg.Connection[Any]) -> None:
    """Runs whose session is gone (killed, server restarted) become 'interrupted'."""
    conn.execute("SELECT ttl.close_dead_runs()")


def start_unit(conn: psycopg.Connection[Any], run_id: int, unit_relid: int, name: str, action: str,
               strategy: str | None, checkpoint: dict[str, Any] | None, lock_timeout: str | None = None) -> None:
    """The unit's history row, resuming from ``checkpoint`` (sql/50_history.sql); with
    ``lock_timeout``, the session's set to it by the same statement."""
    cp = Jsonb(checkpoint) if checkpoint is not None else None
    conn.execute("SELECT ttl._start_unit(%s, %s, %s, %s, %s, %s), CASE WHEN %s::text IS NOT NULL "
                 "THEN pg_catalog.set_config('lock_timeout', %s, false) END",
                 (run_id, unit_relid, name, action, strategy, cp, lock_timeout, lock_timeout))


def skip_unit(conn: psycopg.Connection[Any], run_id: int, unit_relid: int, name: str, reason: str) -> None:
    """A unit left without starting it, and why."""
    conn.execute("SELECT ttl._skip_unit(%s, %s, %s, %s)", (run_id, unit_relid, name, reason))


@dataclass
class UnitEnd:
    """A unit's end left to the statement that ends its run (a table of one unit: one round
    trip less): its status and error, and the lock_timeout to set back (None: unchanged)."""

    unit_relid: int
    status: str
    error: str | None
    lock_timeout: str | None


# The run's end (sql/50_history.sql), after its last unit's end if left to it, and the
# session's role and search_path back to its own when asked: one statement, in this order.
FINISH_RUN = """
SELECT CASE WHEN %(unit)s::oid IS NOT NULL
            THEN ttl._end_unit(%(run)s, %(unit)s, %(unit_status)s, %(unit_error)s, true) END,
       CASE WHEN %(lock)s::text IS NOT NULL THEN pg_catalog.set_config('lock_timeout', %(lock)s, false) END,
       ttl._finish_run(%(run)s, %(status)s, %(error)s),
       CASE WHEN %(path)s::text IS NOT NULL THEN pg_catalog.set_config('role', 'none', false) END,
       CASE WHEN %(path)s::text IS NOT NULL THEN pg_catalog.set_config('search_path', %(path)s, false) END
"""


def finish_run(conn: psycopg.Connection[Any], run_id: int, status: str | None, error: str | None = None, *,
               unit_end: UnitEnd | None = None, restore: str | None = None) -> str | None:
    """The run's end, with its units' totals (sql/50_history.sql); ``status`` None: judged
    from its units. ``unit_end``: its last unit ended first; ``restore``: then the session
    back to its own role and to this search_path. Returns the status recorded, None when
    nothing was: row security hid the run from the role ending it (the table's owner
    changed since the run took its role; see ``close_run_after_owner_change``)."""
    end = unit_end or UnitEnd(0, "", None, None)
    row = conn.execute(FINISH_RUN, {"unit": unit_end.unit_relid if unit_end else None, "run": run_id,
                                    "unit_status": end.status, "unit_error": end.error, "lock": end.lock_timeout,
                                    "status": status, "error": error, "path": restore}).fetchone()
    return str(row[2]) if row and row[2] else None


# The run's units left running closed as failed, by the session's own role.
CLOSE_UNITS = """
SELECT ttl._finish_unit(u.run_id, u.unit_relid, 'failed', %(error)s)
  FROM ttl.run_unit u WHERE u.run_id = %(run)s AND u.status = 'running'
"""


CHANGED_OWNER = "the table's owner changed during the run; the next run works as the new owner"


def close_run_after_owner_change(conn: psycopg.Connection[Any], run_id: int) -> tuple[str, str]:
    """A run whose end the owner's role could not record (the table changed owner during the
    run: its history rows are the new owner's): the session's own role (and search_path)
    taken back, and the run closed as failed by it, with its units left running (their
    claims went with their ends). Returns the status and error to report."""
    owner.restore(conn, local=False, search_path=owner.SEARCH_PATH)
    conn.execute(CLOSE_UNITS, {"run": run_id, "error": CHANGED_OWNER})
    finish_run(conn, run_id, "failed", CHANGED_OWNER)
    return "failed", CHANGED_OWNER


def end_unit(conn: psycopg.Connection[Any], run_id: int, end: UnitEnd) -> None:
    """A unit's end (its history row finished, its claim released), lock_timeout set back."""
    conn.execute("SELECT ttl._end_unit(%s, %s, %s, %s, true), CASE WHEN %s::text IS NOT NULL "
                 "THEN pg_catalog.set_config('lock_timeout', %s, false) END",
                 (run_id, end.unit_relid, end.status, end.error, end.lock_timeout, end.lock_timeout))


def close_failed_run(conn: psycopg.Connection[Any], run_id: int, error: str, unit_end: UnitEnd | None = None) -> None:
    """An unexpected error is leaving the run: record it failed, with ``error``, before the
    error goes on (else the run would read 'running' until the next pass closes it). A
    statement refused here must not replace that error, so it is let go."""
    with contextlib.suppress(psycopg.Error):
        finish_run(conn, run_id, "failed", error, unit_end=unit_end)


def prune(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT ttl.prune_history()").fetchone()
    return int(row[0]) if row else 0
