"""Run history (ttl.run, ttl.run_unit) and the per-unit checkpoints kept in it.

Counters and checkpoint of a unit are updated by the same statement that
deletes its rows (see rows.py), so they are exact whatever happens to the run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

START_RUN = """
INSERT INTO ttl.run (relid, table_name, worker, cutoff, status, error)
VALUES (%s, %s, %s, %s, %s, %s) RETURNING run_id
"""
START_UNIT = """
INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, strategy, checkpoint)
VALUES (%s, %s, %s, %s, %s, %s)
"""
# A unit row with a checkpoint (stopped, timed out) or still 'running' while we
# hold its claim (its run died) is unfinished: we take over its checkpoint.
TAKE_OVER = """
UPDATE ttl.run_unit u SET status = CASE WHEN u.status = 'running' THEN 'interrupted' ELSE u.status END,
       finished_at = coalesce(u.finished_at, clock_timestamp()), checkpoint = NULL
 WHERE u.unit_relid = %s AND (u.status = 'running' OR u.checkpoint IS NOT NULL)
RETURNING u.run_id, u.checkpoint, u.status, (SELECT r.status FROM ttl.run r WHERE r.run_id = u.run_id)
"""
FINISH_UNIT = """
UPDATE ttl.run_unit SET status = %s, error = %s, finished_at = clock_timestamp(),
       rows_selected = rows_selected + %s, rows_deleted = rows_deleted + %s,
       checkpoint = CASE WHEN %s THEN NULL ELSE checkpoint END
 WHERE run_id = %s AND unit_relid = %s
"""
FINISH_RUN = """
UPDATE ttl.run r SET status = %s, error = %s, finished_at = clock_timestamp(),
       rows_selected = u.rows_selected, rows_deleted = u.rows_deleted,
       partitions_dropped = u.dropped, partitions_detached = u.detached
  FROM (SELECT coalesce(sum(rows_selected), 0) AS rows_selected, coalesce(sum(rows_deleted), 0) AS rows_deleted,
               count(*) FILTER (WHERE action = 'drop' AND status = 'ok') AS dropped,
               count(*) FILTER (WHERE action = 'detach' AND status = 'ok') AS detached
          FROM ttl.run_unit WHERE run_id = %s) u
 WHERE r.run_id = %s
"""
# Runs older than history_retention go, except each table's latest run.
PRUNE = """
DELETE FROM ttl.run r
 WHERE r.started_at < now() - coalesce((SELECT value::interval FROM ttl.settings WHERE name = 'history_retention'),
                                       interval '30 days')
   AND r.run_id <> (SELECT max(l.run_id) FROM ttl.run l WHERE l.relid = r.relid)
"""


def start_run(conn: psycopg.Connection[Any], relid: int, table: str, worker: str | None, cutoff: datetime,
              status: str = "running", error: str | None = None) -> int:
    row = conn.execute(START_RUN, (relid, table, worker, cutoff, status, error)).fetchone()
    assert row is not None
    return int(row[0])


def take_over(conn: psycopg.Connection[Any], unit_relid: int) -> dict[str, Any] | None:
    """Checkpoint of an interrupted run of this unit (we hold its claim), if any."""
    found: dict[str, Any] | None = None
    for run_id, checkpoint, status, run_status in sorted(conn.execute(TAKE_OVER, (unit_relid,)).fetchall()):
        if checkpoint:
            found = dict(checkpoint)
        if status == "interrupted" and run_status == "running":  # its run died on this unit
            finish_run(conn, run_id, "interrupted", "the run ended before this unit was done")
    return found


def start_unit(conn: psycopg.Connection[Any], run_id: int, unit_relid: int, name: str, action: str,
               strategy: str | None, checkpoint: dict[str, Any] | None) -> None:
    conn.execute(START_UNIT, (run_id, unit_relid, name, action, strategy,
                              Jsonb(checkpoint) if checkpoint is not None else None))


def finish_unit(conn: psycopg.Connection[Any], run_id: int, unit_relid: int, status: str, error: str | None,
                selected: int = 0, deleted: int = 0) -> None:
    done = status in ("ok", "skipped")
    conn.execute(FINISH_UNIT, (status, error, selected, deleted, done, run_id, unit_relid))


def finish_run(conn: psycopg.Connection[Any], run_id: int, status: str, error: str | None = None) -> None:
    conn.execute(FINISH_RUN, (status, error, run_id, run_id))


def prune(conn: psycopg.Connection[Any]) -> int:
    return conn.execute(PRUNE).rowcount
