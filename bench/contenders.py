"""The contenders: what users would do instead of pg_ttl, and pg_ttl itself.

Each one is a function taking the DSN of a freshly cloned database and
returning what it did (rows deleted, partitions dropped). They run inside
``measure.measuring`` and are bounded by a deadline: a contender that runs past
it is stopped and reported as timed out, never as a result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
BATCH_LOOP_SIZE = 10000


class ContenderTimeout(RuntimeError):
    """The contender did not finish within the bench's time limit."""


class Unavailable(RuntimeError):
    """The contender cannot run on this machine (reason in the message)."""


@dataclass
class Outcome:
    rows_deleted: int = 0
    partitions_dropped: int = 0
    transactions: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _connect(dsn: str, limit_s: float) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(f"{int(limit_s * 1000)}ms")))
    return conn


def _run_bounded(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except psycopg.errors.QueryCanceled as exc:
        raise ContenderTimeout(str(exc).strip()) from exc


# -- row-level ---------------------------------------------------------------

def raw_delete(dsn: str, table: str, column: str, expire_after: str, limit_s: float) -> Outcome:
    """One ``DELETE … WHERE col < now() - expire_after``: the fastest way, in one long transaction."""
    def go() -> Outcome:
        with _connect(dsn, limit_s) as conn:
            cur = conn.execute(sql.SQL("DELETE FROM {} WHERE {} < now() - {}::interval").format(
                sql.Identifier(table), sql.Identifier(column), sql.Literal(expire_after)))
            return Outcome(rows_deleted=cur.rowcount, transactions=1)
    result: Outcome = _run_bounded(go)
    return result


def batched_loop(dsn: str, table: str, column: str, expire_after: str, limit_s: float,
                 batch: int = BATCH_LOOP_SIZE) -> Outcome:
    """The loop people schedule with pg_cron: delete 10,000 ids at a time, commit, repeat until none are left."""
    deadline = time.monotonic() + limit_s
    stmt = sql.SQL("DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE {c} < %(cutoff)s LIMIT {n})").format(
        t=sql.Identifier(table), c=sql.Identifier(column), n=sql.Literal(batch))

    def go() -> Outcome:
        out = Outcome()
        with _connect(dsn, limit_s) as conn:
            row = conn.execute(sql.SQL("SELECT now() - {}::interval").format(sql.Literal(expire_after))).fetchone()
            assert row is not None
            cutoff = row[0]
            while True:
                if time.monotonic() > deadline:
                    raise ContenderTimeout(f"batched loop still running after {limit_s:.0f} s")
                n = conn.execute(stmt, {"cutoff": cutoff}).rowcount
                out.transactions += 1
                out.rows_deleted += n
                if n == 0:
                    return out
    result: Outcome = _run_bounded(go)
    return result


# -- partitions ---------------------------------------------------------------

def partman_available(dsn: str) -> str | None:
    """None when pg_partman can be created here, else why not."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'pg_partman'").fetchone()
    if row is None:
        return ("pg_partman is not installed on this server (Debian: apt-get install postgresql-15-partman); "
                "contender not run")
    return None


def partman_setup(dsn: str, parent: str, first_day: date, retention_days: int) -> str:
    """Adopt the existing daily partitions with pg_partman and configure retention (not measured)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA partman")
        conn.execute("CREATE EXTENSION pg_partman SCHEMA partman")
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pg_partman'").fetchone()
        assert version is not None
        conn.execute("SELECT partman.create_parent(%s, 'created_at', 'native', 'daily', p_premake => 4, "
                     "p_start_partition => %s)", [f"public.{parent}", first_day.isoformat()])
        conn.execute("UPDATE partman.part_config SET retention = %s, retention_keep_table = false, "
                     "retention_keep_index = false WHERE parent_table = %s",
                     [f"{retention_days} days", f"public.{parent}"])
        return str(version[0])


def partman_retention(dsn: str, parent: str, limit_s: float) -> Outcome:
    """What pg_partman users schedule: ``run_maintenance`` drops children past retention (one transaction)."""
    def go() -> Outcome:
        with _connect(dsn, limit_s) as conn:
            before = _count_partitions(conn, parent)
            conn.execute("SELECT partman.run_maintenance(%s, p_analyze => false)", [f"public.{parent}"])
            after = _count_partitions(conn, parent)
            # run_maintenance may also premake new children; count the old ones that are gone.
            return Outcome(partitions_dropped=max(0, before - after), transactions=1)
    result: Outcome = _run_bounded(go)
    return result


def hand_drop(dsn: str, partition_names: list[str], limit_s: float) -> Outcome:
    """The hand-written cron script: ``DROP TABLE IF EXISTS`` each day's partition past retention."""
    def go() -> Outcome:
        out = Outcome()
        with _connect(dsn, limit_s) as conn:
            for name in partition_names:
                exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [name]).fetchone()
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
                out.transactions += 1
                if exists and exists[0]:
                    out.partitions_dropped += 1
        return out
    result: Outcome = _run_bounded(go)
    return result


def expired_partition_names(first_day: date, today: date, retention_days: int, name_of: Any) -> list[str]:
    """Names the hand-written script drops: every day whose end is older than the retention."""
    names = []
    day = first_day - timedelta(days=10)  # scripts look a little further back than needed
    while day + timedelta(days=1) <= today - timedelta(days=retention_days):
        names.append(name_of(day))
        day += timedelta(days=1)
    return names


def _count_partitions(conn: psycopg.Connection[Any], parent: str) -> int:
    row = conn.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass", [parent]).fetchone()
    assert row is not None
    return int(row[0])


# -- pg_ttl -------------------------------------------------------------------

def pgttl_entry_point() -> tuple[str | None, str]:
    """How to run one pg_ttl pass here: ("cli", …) for ``pg-ttl run --once``, ("api", …) for the Python API
    in a subprocess (bench.pgttl_api) while the command does not exist yet, or (None, why not)."""
    try:
        from pg_ttl.expire import expire  # noqa: F401
    except ImportError:
        return None, "pg_ttl's expiration engine (pg_ttl.expire) is not in this checkout yet"
    proc = subprocess.run([sys.executable, "-m", "pg_ttl", "run", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=_cli_env())
    if proc.returncode == 0 and "--once" in proc.stdout:
        return "cli", "pg-ttl run --once TABLE --dsn DSN (subprocess)"
    return "api", "pg_ttl.expire.expire(dsn, [TABLE]) in a subprocess (python -m bench.pgttl_api)"


def pgttl_startup_s(entry: str, reps: int = 3) -> float:
    """Median wall time of starting the pg_ttl process and importing the engine, doing nothing else."""
    if entry == "cli":
        cmd = [sys.executable, "-m", "pg_ttl", "run", "--help"]
    else:
        cmd = [sys.executable, "-c", "import bench.pgttl_api, pg_ttl.expire"]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, cwd=ROOT, env=_cli_env(), check=True)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def pgttl_history(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """pg_ttl's own record of the runs in this database (a cross-check of what the bench measured)."""
    if conn.execute("SELECT to_regclass('ttl.run') IS NULL").fetchone() == (True,):
        return []
    rows = conn.execute(
        "SELECT r.table_name, r.status, r.rows_deleted, r.partitions_dropped, "
        "       extract(epoch FROM r.finished_at - r.started_at)::float8, "
        "       (SELECT jsonb_object_agg(coalesce(s.action || '/' || s.strategy, s.action), s.n) FROM "
        "          (SELECT action, strategy, count(*) AS n FROM ttl.run_unit u WHERE u.run_id = r.run_id "
        "           GROUP BY 1, 2) s), "
        "       (SELECT max(extract(epoch FROM u.finished_at - u.started_at))::float8 FROM ttl.run_unit u "
        "         WHERE u.run_id = r.run_id) "
        "FROM ttl.run r ORDER BY r.run_id").fetchall()
    return [{"table": t, "status": s, "rows_deleted": d, "partitions_dropped": p, "duration_s": dur,
             "units": units, "longest_unit_s": lu} for t, s, d, p, dur, units, lu in rows]


def _cli_env() -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "160", "TERM": "dumb"}
    # Run the checkout being benchmarked, even when another pg_ttl is installed.
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def pgttl_run(dsn: str, tables: list[str], limit_s: float, entry: str = "cli") -> Outcome:
    """One pg_ttl pass as a subprocess, exactly what a user or cron would run."""
    if entry == "cli":
        cmd = [sys.executable, "-m", "pg_ttl", "run", "--once", *tables, "--dsn", dsn]
    else:
        cmd = [sys.executable, "-m", "bench.pgttl_api", dsn, *tables]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit_s, cwd=ROOT, env=_cli_env())
    except subprocess.TimeoutExpired as exc:
        raise ContenderTimeout(f"pg_ttl still running after {limit_s:.0f} s") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"pg_ttl run failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return Outcome(extra={"process_wall_s": time.perf_counter() - t0, "entry_point": entry,
                          "output_tail": proc.stdout.strip()[-800:]})
