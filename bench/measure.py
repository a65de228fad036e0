"""What every contender is measured with: wall time, WAL bytes, longest transaction, dead tuples.

Longest transaction: a sampler thread reads ``pg_stat_activity`` every few
milliseconds on its own connection and notes, per (backend, xact_start), the
transaction id once one is assigned. Because the bench server runs with
``track_commit_timestamp = on``, the exact length of every sampled transaction
that wrote something is ``pg_xact_commit_timestamp(xid) - xact_start``; a
read-only or aborted one counts until its last sighting. A transaction the
sampler never saw lasted less than one sampling interval (plus the probe's own
run time), which the results state beside the figure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from bench.server import ADMIN_APP, LOAD_APP

SAMPLE_INTERVAL_S = 0.005

_SAMPLE = """
SELECT pid, xact_start, backend_xid::text, clock_timestamp()
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
  AND backend_type = 'client backend'
  AND coalesce(application_name, '') NOT IN (%s, %s)
"""


@dataclass
class _Seen:
    xact_start: datetime
    last_seen: datetime
    xid: str | None = None


@dataclass
class TxnSampler:
    """Samples the transactions running in one database (see module docstring)."""

    dsn: str
    interval_s: float = SAMPLE_INTERVAL_S
    seen: dict[tuple[int, datetime], _Seen] = field(default_factory=dict)
    samples: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="txn-sampler", daemon=True)
        self._conn = psycopg.connect(self.dsn, autocommit=True)
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                for pid, xact_start, xid, now in self._conn.execute(_SAMPLE, [ADMIN_APP, LOAD_APP]).fetchall():
                    key = (pid, xact_start)
                    s = self.seen.get(key)
                    if s is None:
                        s = self.seen[key] = _Seen(xact_start, now)
                    s.last_seen = now
                    if xid is not None:
                        s.xid = xid
                self.samples += 1
                self._stop.wait(self.interval_s)
        except BaseException as exc:  # surfaced in stop(): a broken sampler must not pass silently
            self._error = exc

    def stop(self) -> dict[str, Any]:
        """Stop sampling and return the longest transaction and how many were seen."""
        self._stop.set()
        self._thread.join()
        try:
            if self._error is not None:
                raise RuntimeError(f"transaction sampler failed: {self._error}") from self._error
            xids = sorted({s.xid for s in self.seen.values() if s.xid is not None})
            commits: dict[str, datetime | None] = {}
            if xids:
                rows = self._conn.execute(
                    "SELECT x, pg_xact_commit_timestamp(x::xid) FROM unnest(%s::text[]) AS x", [xids]).fetchall()
                commits = {str(x): ts for x, ts in rows}
            longest = 0.0
            exact = 0
            for s in self.seen.values():
                end = commits.get(s.xid) if s.xid is not None else None
                if end is not None:
                    exact += 1
                else:
                    end = s.last_seen
                longest = max(longest, (end - s.xact_start).total_seconds())
            return {
                "longest_txn_s": longest,
                "txns_sampled": len(self.seen),
                "txns_exact": exact,
                "samples": self.samples,
                "sample_interval_s": self.interval_s,
            }
        finally:
            self._conn.close()


def wal_lsn(conn: psycopg.Connection[Any]) -> str:
    return str(conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0])  # type: ignore[index]


def wal_bytes_between(conn: psycopg.Connection[Any], start: str, end: str) -> int:
    row = conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint", [end, start]).fetchone()
    assert row is not None
    return int(row[0])


@dataclass
class Measured:
    wall_s: float = 0.0
    wal_bytes: int = 0
    txn: dict[str, Any] = field(default_factory=dict)
    started_epoch: float = 0.0
    ended_epoch: float = 0.0


@contextmanager
def measuring(admin_dsn: str, sample_txns: bool = True) -> Iterator[Measured]:
    """Measure the block: wall time, WAL written, transactions (when sampled).

    WAL is read with ``pg_current_wal_insert_lsn`` before and after, from an
    admin connection that writes nothing itself.
    """
    m = Measured()
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        sampler = TxnSampler(admin_dsn) if sample_txns else None
        start_lsn = wal_lsn(conn)
        if sampler is not None:
            sampler.start()
        m.started_epoch = time.time()
        t0 = time.perf_counter()
        try:
            yield m
        finally:
            m.wall_s = time.perf_counter() - t0
            m.ended_epoch = time.time()
            if sampler is not None:
                m.txn = sampler.stop()
        m.wal_bytes = wal_bytes_between(conn, start_lsn, wal_lsn(conn))


def dead_tuples(conn: psycopg.Connection[Any], relations: list[str]) -> int:
    """Dead tuples (and dead line pointers) that VACUUM must still clean up: ``n_dead_tup``, as autovacuum sees it.

    Read after every contender backend has exited (exiting flushes its
    statistics). pgstattuple is no use here: its own scan prunes pages first.
    """
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_all_tables WHERE relid = ANY(%s::regclass[])",
        [relations]).fetchone()
    assert row is not None
    return int(row[0])


# The bench's own probes, left out of a contender's statement profile.
_OWN_PROBES = ("pg_stat_activity", "pg_current_wal_insert_lsn", "pg_xact_commit_timestamp", "pg_stat_clear_snapshot")


def reset_statements(admin_conn: psycopg.Connection[Any], dbname: str) -> None:
    """Forget pg_stat_statements of one database (run from the database holding the extension)."""
    admin_conn.execute("SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = %s), 0)",
                       [dbname])


def statement_profile(admin_conn: psycopg.Connection[Any], dbname: str, top: int = 6) -> dict[str, Any]:
    """Where the server time went: statement count and the top statements by total execution time."""
    rows = admin_conn.execute(
        "SELECT query, calls, total_exec_time, rows FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s ORDER BY total_exec_time DESC",
        [dbname]).fetchall()
    mine = [r for r in rows if not any(p in r[0] for p in _OWN_PROBES)]
    return {
        "statements": int(sum(r[1] for r in mine)),
        "exec_time_s": sum(r[2] for r in mine) / 1000,
        "top": [{"query": " ".join(q.split())[:300], "calls": int(c), "total_s": t / 1000, "mean_ms": t / c,
                 "rows": int(n)} for q, c, t, n in mine[:top]],
    }


def wait_for_other_backends(conn: psycopg.Connection[Any], timeout_s: float = 15.0) -> int:
    """Wait until only bench-admin sessions are connected to this database; returns how many were left."""
    deadline = time.monotonic() + timeout_s
    while True:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
            "AND coalesce(application_name, '') <> %s", [ADMIN_APP]).fetchone()
        assert row is not None
        if int(row[0]) == 0 or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.02)
