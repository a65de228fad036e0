"""What ``pg-ttl status`` reports: per table the last run, the next run, the backlog and the lag.

Read-only. The backlog is the number of expired rows still present: counted when an index finds
them and there are at most EXACT_COUNT_LIMIT per unit, else the planner's estimate (EXPLAIN, no
scan); the lag the age of the oldest of them (one index probe per partition when the TTL column
is indexed). A table with tiers also has an archive backlog per storage tier: the rows that
tier would move now (ttl.tier_sql), counted when the table is at most ARCHIVE_SCAN_PAGES pages,
else estimated from a sample of about that many pages.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from pg_ttl.worker.schedule import Entry, Scheduler, cron_error

if TYPE_CHECKING:
    from pg_ttl.expire.predicate import EnginePolicy

TABLES = """
SELECT p.relid, p.table_name, p.job_cron, p.job_cron_override, p.paused, p.manual_run_at,
       CASE WHEN s.started_at >= p.created_at THEN s.due_at END AS due_at,
       -- workers that cannot act on the table (their heartbeat row says why)
       (SELECT json_agg(json_build_object('worker', w.name, 'reason', w.skipped ->> p.table_name) ORDER BY w.name)
          FROM ttl.worker w WHERE w.skipped ? p.table_name) AS skipped_by,
       ttl.worker_running(p.relid) AS running_workers,
       r.run_id, r.status, r.worker, r.started_at, r.finished_at, r.rows_selected, r.rows_deleted,
       r.partitions_dropped, r.partitions_detached, r.error,
       -- read by PostgreSQL, as the worker and ttl.enable read it; no setting: no minimum
       coalesce((SELECT extract(epoch FROM s.value::interval)::float8 FROM ttl.settings s
                  WHERE s.name = 'min_job_interval'), 0) AS min_interval_s,
       (SELECT json_agg(json_build_array(t.position, t.storage) ORDER BY t.position)
          FROM ttl.tier t WHERE t.relid = p.relid) AS tiers,
       EXISTS (SELECT 1 FROM ttl.orphan_policy o WHERE o.relid = p.relid) AS has_orphans
  FROM ttl.worker_tables p
  LEFT JOIN ttl.worker_schedule s ON s.relid = p.relid
  LEFT JOIN LATERAL (SELECT * FROM ttl.run r WHERE r.relid = p.relid AND r.status <> 'busy'
                      ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1) r ON true
 WHERE %(table)s::regclass IS NULL OR p.relid = %(table)s::regclass
 ORDER BY p.schema_name, p.relname
"""
# A worker beats between runs, not during one: a stale heartbeat while its run's session is
# still connected is a long run, not a lost worker. (backend_start is NULL in pg_stat_activity
# for other roles' sessions unless the reader may see them; the pid alone then identifies it.)
WORKERS = """
SELECT w.name, w.host, w.pid, w.version, w.state, w.tables, w.started_at, w.heartbeat_at, w.pace,
       extract(epoch FROM now() - w.heartbeat_at)::float8 AS heartbeat_age,
       w.state <> 'stopped' AND w.heartbeat_at < now() - make_interval(secs => %(lost_after)s)
       AND NOT EXISTS (SELECT 1 FROM ttl.run r JOIN pg_catalog.pg_stat_activity a ON a.pid = r.backend_pid
                        WHERE r.status = 'running' AND r.worker = w.name
                          AND (a.backend_start IS NULL OR a.backend_start = r.backend_start)) AS lost
  FROM ttl.worker w ORDER BY w.name
"""
# Default for "lost": ten heartbeats at the default heartbeat_interval (30 s).
LOST_AFTER = 300.0


@dataclass
class LastRun:
    run_id: int
    status: str
    worker: str | None
    started_at: datetime
    finished_at: datetime | None
    duration: float | None
    rows_selected: int
    rows_deleted: int
    partitions_dropped: int
    partitions_detached: int
    error: str | None


@dataclass
class TierBacklog:
    """Rows one storage tier would move now (``rows`` None: not looked at, or not allowed to)."""

    tier: int  # its position in the table's tiers
    storage: str
    rows: int | None
    exact: bool = False  # counted; False: estimated from a sample of the table's pages


@dataclass
class ShardBacklog:
    """Entries of one shard of a table's expiration queue due now: a count, up to EXACT_COUNT_LIMIT
    (then ``exact`` is False and ``rows`` says at least that many)."""

    shard: int
    rows: int
    exact: bool


@dataclass
class OrphanSweep:
    """Where a table's orphan sweep stands, over its partitions (pg-ttl orphans status has them one by one)."""

    ranges: int  # of the latest sweep of each partition
    done: int
    given_up: int  # failed RANGE_ATTEMPTS times: left for the next sweep
    failing: int
    last_deleted: int  # by the last orphan run of each partition
    waiting: str | None  # why a run now would delete nothing yet (no age column: the clock's first wait)
    errors: list[str] = field(default_factory=list)


@dataclass
class TableStatus:
    table: str
    job_cron: str
    paused: bool
    running: bool
    last_run: LastRun | None
    next_run: datetime | None
    backlog: int | None
    lag_seconds: float | None
    oldest_expired: datetime | None
    schedule_error: str | None = None
    # True when backlog is a count (0: the index probe found nothing expired), False when it is
    # the planner's estimate, which is only as fresh as the table's last ANALYZE.
    backlog_exact: bool = False
    # Workers that skip this table because their role cannot act as its owner: [{worker, reason}].
    skipped_by: list[dict[str, str]] = field(default_factory=list)
    # Per storage tier, in order (empty: no tiers): rows due to move there now.
    archive_backlog: list[TierBacklog] = field(default_factory=list)
    # Per shard of the expiration queue, in order (empty: no queue): entries due now (docs/queues.md).
    queue_backlog: list[ShardBacklog] = field(default_factory=list)
    # The orphan policy's sweep (None: the table has none; docs/orphans.md).
    orphans: OrphanSweep | None = None
    # A sweep of its rows in shared ranges not finished yet, over its partitions (None: none;
    # docs/expiring.md): {"ranges": all of them, "done": finished, "running": being worked on}.
    row_sweep: dict[str, int] | None = None


@dataclass
class Status:
    tables: list[TableStatus] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            if isinstance(v, datetime):
                return v.isoformat()
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            if isinstance(v, list):
                return [plain(x) for x in v]
            return v

        return {"tables": [plain(asdict(t)) for t in self.tables], "workers": [plain(w) for w in self.workers]}


# Up to this many expired rows per unit are counted exactly when an index finds them (the count
# then reads at most this many index entries); beyond it, or without such an index, the planner's
# estimate is shown.
EXACT_COUNT_LIMIT = 10_000
_INDEX_SCANS = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}


def _uses_index(plan: dict[str, Any]) -> bool:
    return plan.get("Node Type") in _INDEX_SCANS or any(_uses_index(p) for p in plan.get("Plans", []))


@contextmanager
def _policy_now(conn: psycopg.Connection[Any], relid: int) -> Iterator[tuple[EnginePolicy | None, datetime]]:
    """A transaction in UTC: the table's policy (None: it has none) and its now()."""
    from pg_ttl.expire.predicate import load_policies

    with conn.transaction():
        row = conn.execute("SELECT now(), pg_catalog.set_config('TimeZone', 'UTC', true)").fetchone()
        assert row is not None
        policies = load_policies(conn, [relid])
        yield (policies[0] if policies else None), row[0]


def backlog(conn: psycopg.Connection[Any], relid: int) -> tuple[int, bool] | None:
    """Expired rows still present, and whether that is a count (True) or the planner's estimate
    (False); None when it cannot say. A unit is counted when an index finds its expired rows and
    the planner expects at most EXACT_COUNT_LIMIT of them; the count stops there, so a stale
    estimate never turns it into a long scan."""
    from pg_ttl.expire import owner
    from pg_ttl.expire.predicate import build_predicate
    from pg_ttl.expire.units import list_units

    try:
        with _policy_now(conn, relid) as (policy, now):
            if policy is None:
                return None
            pred = build_predicate(conn, policy, now)
            # Planning folds immutable functions of constants: the owner's expression is planned as the owner.
            owner.become(conn, policy.owner, policy.name, local=True)
            conn.execute("SELECT pg_catalog.set_config('search_path', %s, true)", (pred.search_path,))
            total, exact = 0, True
            for unit in list_units(conn, policy, pred):
                if unit.action != "delete":  # a whole partition: its row count, as the statistics say
                    found = conn.execute("SELECT greatest(reltuples, 0)::int8 FROM pg_catalog.pg_class WHERE oid = %s",
                                         (unit.relid,)).fetchone()
                    total += int(found[0]) if found else 0
                    exact = False
                    continue
                select = sql.SQL("SELECT 1 FROM ONLY {} WHERE {}").format(unit.ident, pred.expired)
                found = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) {}").format(select)).fetchone()
                if not found:
                    exact = False
                    continue
                plan = found[0][0]["Plan"]
                estimate = int(plan["Plan Rows"])
                if estimate <= EXACT_COUNT_LIMIT and _uses_index(plan):
                    counted = conn.execute(sql.SQL("SELECT count(*) FROM ({} LIMIT %s) s").format(select),
                                           (EXACT_COUNT_LIMIT + 1,)).fetchone()
                    assert counted is not None
                    if int(counted[0]) <= EXACT_COUNT_LIMIT:
                        total += int(counted[0])
                        continue
                    estimate = max(estimate, int(counted[0]))
                total += estimate
                exact = False
            return total, exact
    except (psycopg.Error, owner.NotOwner):
        return None


def queue_backlog(conn: psycopg.Connection[Any], relid: int) -> list[ShardBacklog] | None:
    """Per shard of the table's expiration queue, its entries due now, counted on the shard's
    primary key (expires_at, key) up to EXACT_COUNT_LIMIT; None without a filled queue, or when
    the caller may not act as the table's owner."""
    from pg_ttl.expire import owner, queues
    from pg_ttl.expire.predicate import load_policies

    try:
        with conn.transaction():
            policies = load_policies(conn, [relid])
            if not policies or not queues.filled(conn, policies[0]):
                return None
            owner.become(conn, policies[0].owner, policies[0].name, local=True)
            out = []
            for unit in queues.shard_units(conn, policies[0]):
                shard = queues.shard_number(unit)
                found = conn.execute(sql.SQL(
                    "SELECT count(*) FROM (SELECT 1 FROM ONLY {} WHERE shard = {} AND expires_at <= now() "
                    "LIMIT {}) s").format(unit.ident, sql.Literal(shard), sql.Literal(EXACT_COUNT_LIMIT + 1)))\
                    .fetchone()
                n = int(found[0]) if found else 0
                out.append(ShardBacklog(shard, min(n, EXACT_COUNT_LIMIT), n <= EXACT_COUNT_LIMIT))
            return out
    except (psycopg.Error, owner.NotOwner):
        return None


# The archive backlog is counted (a scan of the table, ~20 MB at most) when the table's leaves hold
# at most this many pages; beyond it, estimated from a sample of about this many pages
# (TABLESAMPLE SYSTEM: whole pages, chosen at random).
ARCHIVE_SCAN_PAGES = 2_560
LEAF_PAGES = """
SELECT pg_catalog.pg_relation_size(%s::oid::regclass) / pg_catalog.current_setting('block_size')::int8
"""


def archive_backlog(conn: psycopg.Connection[Any], relid: int, tiers: list[tuple[int, str]]) -> list[TierBacklog]:
    """Per storage tier ``(position, storage)``: the rows it would move now, read as the table's
    owner (its row security applies as it does to the engine); rows None when the caller may not
    act as the owner or the table changed meanwhile."""
    from pg_ttl.expire import owner
    from pg_ttl.expire.tiers import archive_units

    out = [TierBacklog(position, storage, None) for position, storage in tiers]
    if not out:
        return out
    try:
        with _policy_now(conn, relid) as (policy, now):
            if policy is None:
                return out
            preds = []
            for t in out:  # the one definition of what a tier moves (sql/82_tiers.sql)
                found = conn.execute("SELECT ttl.tier_sql(%s, %s, %s)", (relid, t.tier, now)).fetchone()
                assert found is not None
                preds.append(sql.SQL(found[0]))
            owner.become(conn, policy.owner, policy.name, local=True)
            leaves = archive_units(conn, policy)
            pages = {u.relid: int((conn.execute(LEAF_PAGES, (u.relid,)).fetchone() or (0,))[0]) for u in leaves}
            total = sum(pages.values())
            exact = total <= ARCHIVE_SCAN_PAGES
            percent = 100.0 if exact else 100.0 * ARCHIVE_SCAN_PAGES / total
            sample = sql.SQL("") if exact else sql.SQL(" TABLESAMPLE SYSTEM ({}) REPEATABLE (0)").format(
                sql.Literal(percent))
            counts = [0] * len(out)
            for unit in leaves:
                if not pages[unit.relid]:
                    continue
                found = conn.execute(sql.SQL("SELECT {} FROM ONLY {}{}").format(
                    sql.SQL(", ").join(sql.SQL("count(*) FILTER (WHERE {})").format(p) for p in preds),
                    unit.ident, sample)).fetchone()
                assert found is not None
                counts = [c + int(n) for c, n in zip(counts, found, strict=True)]
            for t, n in zip(out, counts, strict=True):
                t.rows, t.exact = (n, True) if exact else (round(n * 100.0 / percent), False)
            return out
    except (psycopg.Error, owner.NotOwner):
        return [TierBacklog(t.tier, t.storage, None) for t in out]


def collect(conn: psycopg.Connection[Any], table: str | None = None, *, now: datetime | None = None,
            estimates: bool = True, lost_after: float = LOST_AFTER) -> Status:
    """The status of every TTL table (or one); ``conn`` is autocommit.

    A worker is ``lost`` when it has not stopped cleanly, its heartbeat is older than
    ``lost_after`` seconds and no run of it is in progress.
    """
    from pg_ttl.expire import oldest_expired, owner

    now = now or datetime.now(UTC)
    status = Status()
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(TABLES, {"table": table}).fetchall()
        status.workers = cur.execute(WORKERS, {"lost_after": lost_after}).fetchall()
    for r in rows:
        sched = Scheduler(min_interval=timedelta(seconds=float(r["min_interval_s"])))
        entry = Entry(relid=int(r["relid"]), table=r["table_name"], cron=r["job_cron"],
                      override=bool(r["job_cron_override"]), paused=bool(r["paused"]), last_due=r["due_at"],
                      manual_run_at=r["manual_run_at"], error=cron_error(r["job_cron"]))
        last = None
        if r["run_id"] is not None:
            finished = r["finished_at"]
            last = LastRun(
                run_id=int(r["run_id"]), status=r["status"], worker=r["worker"], started_at=r["started_at"],
                finished_at=finished,
                duration=(finished - r["started_at"]).total_seconds() if finished else None,
                rows_selected=int(r["rows_selected"]), rows_deleted=int(r["rows_deleted"]),
                partitions_dropped=int(r["partitions_dropped"]), partitions_detached=int(r["partitions_detached"]),
                error=r["error"])
        oldest: datetime | None = None
        lag: float | None = None
        backlog_rows: int | None = None
        exact = False
        tiers = [(int(position), str(storage)) for position, storage in r["tiers"] or []]
        to_archive = [TierBacklog(position, storage, None) for position, storage in tiers]
        shards: list[ShardBacklog] = []
        if estimates:
            to_archive = archive_backlog(conn, entry.relid, tiers)
            shards = queue_backlog(conn, entry.relid) or []
            try:
                oldest = oldest_expired(conn, entry.relid)
                if oldest is not None and oldest.tzinfo is None:
                    oldest = oldest.replace(tzinfo=UTC)
                lag = max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
            except (psycopg.Error, owner.NotOwner):
                pass  # the caller may not act as the table's owner: no estimate, none of its code
            # Nothing expired means no backlog, whatever stale planner statistics would say.
            exact = oldest is None and lag is not None
            if shards:  # the queue knows: its shards' counts
                backlog_rows, exact = sum(b.rows for b in shards), all(b.exact for b in shards)
            elif not exact and (found := backlog(conn, entry.relid)) is not None:
                count, exact = found
                # oldest_expired found one: an estimate of 0 is wrong, a count of 0 a race
                backlog_rows = max(count, 1) if oldest is not None else count
            else:
                backlog_rows = 0 if exact else None
        sweep = orphan_sweep(conn, entry.relid) if r["has_orphans"] else None
        rows_swept = row_sweep(conn, entry.relid)
        status.tables.append(TableStatus(
            table=entry.table, job_cron=entry.cron, paused=entry.paused, running=int(r["running_workers"]) > 0,
            last_run=last, next_run=sched.next_run(entry, now), backlog=backlog_rows, lag_seconds=lag,
            oldest_expired=oldest, schedule_error=entry.error, backlog_exact=exact, skipped_by=r["skipped_by"] or [],
            archive_backlog=to_archive, queue_backlog=shards, orphans=sweep, row_sweep=rows_swept))
    return status


# The units of a table whose row expiry was swept in shared ranges (ttl.block_range, work 'delete').
SWEPT_UNITS = """
SELECT DISTINCT b.unit_relid FROM ttl.block_range b JOIN ttl.run r ON r.run_id = b.run_id
 WHERE r.relid = %s AND b.work = 'delete'
"""


def row_sweep(conn: psycopg.Connection[Any], relid: int) -> dict[str, int] | None:
    """Where the table's sweep in shared ranges stands, summed over its units' latest sweeps
    (ranges done counting those given up), while one of them is not finished (else None)."""
    from pg_ttl.expire.sweeps import sweep_state

    states = [sweep_state(conn, int(unit), str(unit), "delete")
              for (unit,) in conn.execute(SWEPT_UNITS, (relid,)).fetchall()]
    if all(s.finished for s in states):
        return None
    return {"ranges": sum(s.ranges for s in states), "done": sum(s.done + len(s.given_up) for s in states),
            "running": sum(s.running for s in states)}


def orphan_sweep(conn: psycopg.Connection[Any], relid: int) -> OrphanSweep | None:
    """The table's orphan sweep summed over its partitions (None: the caller may not act for its owner)."""
    from pg_ttl.expire import orphans, owner

    try:
        reports = orphans.report(conn, [relid], estimate=False)
    except (psycopg.Error, owner.NotOwner):
        return None
    if not reports:
        return None
    units = reports[0].units
    errors = [e for u in units for _, e in u.given_up if e] + [e for u in units for *_, e in u.failing if e]
    return OrphanSweep(ranges=sum(u.ranges for u in units), done=sum(u.done for u in units),
                       given_up=sum(len(u.given_up) for u in units), failing=sum(len(u.failing) for u in units),
                       last_deleted=sum(u.last_deleted for u in units), waiting=reports[0].waiting,
                       errors=list(dict.fromkeys(errors)))
