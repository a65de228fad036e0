"""Test data, built once per workload as template databases that every contender clones.

Rows look like an event log: ``id`` from an identity column, ``created_at`` in
insertion order (as real event tables are), ~100 bytes of payload. Half the
rows of the plain table are expired. No row lies within a day of the cutoff,
so a few minutes between two contenders never change which rows are expired.
Everything is frozen and analyzed in the template, so no contender pays for
hint bits or statistics the others do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

import psycopg
from psycopg import sql

from bench.server import BenchServer

BENCH_EXTENSIONS = ("pg_prewarm", "pgstattuple")

# The plain table: expire_after 30 days; old half spans [now-61d, now-32d], new half [now-28d, now].
PLAIN_TABLE = "events"
PLAIN_EXPIRE_AFTER = "30 days"

_PLAIN_DDL = """
CREATE TABLE events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL,
    payload text NOT NULL
)
"""
# Rows 1..n/2 are old (expired), n/2+1..n are recent; payload is 100 bytes.
_PLAIN_LOAD = """
INSERT INTO events (created_at, payload)
SELECT CASE WHEN i <= %(half)s
            THEN now() - interval '61 days' + (i::float8 / %(half)s) * interval '29 days'
            ELSE now() - interval '28 days' + ((i - %(half)s)::float8 / %(half)s) * interval '28 days' END,
       rpad(md5(i::text), 100, md5((i + 1)::text))
FROM generate_series(1, %(n)s) AS i
"""
PLAIN_INDEX = "events_created_at_idx"

# The partitioned table: daily range partitions on created_at, expire_after 10 days.
PART_TABLE = "events_p"
PART_EXPIRE_AFTER = "10 days"
PART_RETENTION_DAYS = 10
PART_EXPIRED_DAYS = 10  # days D0-20 .. D0-11 hold expired rows
PART_LIVE_DAYS = 9      # days D0-9 .. D0-1 hold live rows (D0-10, which holds the cutoff, stays empty)
PART_FIRST_DAY_OFFSET = 20
PART_PREMAKE_DAYS = 5   # empty future partitions D0 .. D0+4, as pg_partman would premake them


@dataclass(frozen=True)
class PlainData:
    rows: int
    expired: int
    template: str


@dataclass(frozen=True)
class PartData:
    rows_per_partition: int
    rows: int
    expired: int
    expired_partitions: int
    partitions: int
    template: str
    first_day: date


def _finish_template(server: BenchServer, dbname: str) -> None:
    with server.admin(dbname) as conn:
        conn.execute("VACUUM (FREEZE, ANALYZE)")


def _create_extensions(conn: psycopg.Connection[object]) -> None:
    for ext in BENCH_EXTENSIONS:
        conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(ext)))


def build_plain(server: BenchServer, rows: int, template: str = "tpl_plain") -> PlainData:
    """Template with ``events``: ``rows`` rows, half expired, btree on created_at."""
    half = rows // 2
    server.create_database(template)
    with server.admin(template) as conn:
        _create_extensions(conn)
        conn.execute(_PLAIN_DDL)
        conn.execute("ALTER TABLE events SET (autovacuum_enabled = false)")
        conn.execute(_PLAIN_LOAD, {"n": rows, "half": half})
        conn.execute(sql.SQL("CREATE INDEX {} ON events (created_at)").format(sql.Identifier(PLAIN_INDEX)))
    _finish_template(server, template)
    return PlainData(rows=rows, expired=half, template=template)


def partition_name(day: date) -> str:
    """pg_partman 4.x's name for a daily child, so that partman adopts the same tables."""
    return f"{PART_TABLE}_p{day:%Y_%m_%d}"


def build_partitioned(server: BenchServer, rows_per_partition: int, template: str) -> PartData:
    """Template with ``events_p``: daily partitions, 10 expired and 9 live days of data, 5 empty future days."""
    with server.admin() as conn:
        row = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()
        assert row is not None
        today: date = row[0]
    first = today - timedelta(days=PART_FIRST_DAY_OFFSET)
    days = [first + timedelta(days=i) for i in range(PART_FIRST_DAY_OFFSET + PART_PREMAKE_DAYS)]
    expired_days = days[:PART_EXPIRED_DAYS]
    live_days = days[PART_EXPIRED_DAYS + 1: PART_EXPIRED_DAYS + 1 + PART_LIVE_DAYS]
    server.create_database(template)
    with server.admin(template) as conn:
        _create_extensions(conn)
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute(
            "CREATE TABLE events_p (id bigint GENERATED ALWAYS AS IDENTITY, created_at timestamptz NOT NULL, "
            "payload text NOT NULL, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)")
        for day in days:
            conn.execute(sql.SQL("CREATE TABLE {} PARTITION OF events_p FOR VALUES FROM ({}) TO ({}) "
                                 "WITH (autovacuum_enabled = false)").format(
                sql.Identifier(partition_name(day)), sql.Literal(day.isoformat()),
                sql.Literal((day + timedelta(days=1)).isoformat())))
        conn.execute("CREATE INDEX events_p_created_at_idx ON events_p (created_at)")
        # Rows spread evenly over each data day, in time order.
        for day in expired_days + live_days:
            conn.execute(
                "INSERT INTO events_p (created_at, payload) "
                "SELECT %(day)s::timestamptz + (i::float8 / %(n)s) * interval '1 day' - interval '1 microsecond', "
                "       rpad(md5(i::text), 100, md5((i + 1)::text)) "
                "FROM generate_series(1, %(n)s) AS i",
                {"day": day.isoformat(), "n": rows_per_partition})
    _finish_template(server, template)
    n = rows_per_partition
    return PartData(rows_per_partition=n, rows=n * (len(expired_days) + len(live_days)),
                    expired=n * len(expired_days), expired_partitions=len(expired_days), partitions=len(days),
                    template=template, first_day=first)


def describe_policy(server: BenchServer, template: str, table: str) -> dict[str, str | None]:
    """The policy pg_ttl runs with (ttl.describe), recorded in the results."""
    return {str(k): v for k, v in server.execute(template, "SELECT * FROM ttl.describe(%s::regclass)", [table])}


def add_pg_ttl(server: BenchServer, source: str, template: str, policies: list[tuple[str, str, str]]) -> str:
    """A template like ``source`` with pg_ttl installed and (table, expire_after, column) policies enabled."""
    server.clone(source, template)
    server.install_pg_ttl(template)
    with server.admin(template) as conn:
        for table, expire_after, column in policies:
            conn.execute("SELECT ttl.enable(%s::regclass, expire_after => %s::interval, column_name => %s)",
                         [table, expire_after, column])
    return template
