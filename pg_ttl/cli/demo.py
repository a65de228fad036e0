"""demo: the embedded default. A throwaway local PostgreSQL, no setup."""

from __future__ import annotations

import argparse
import signal
from typing import TYPE_CHECKING, Any

from pg_ttl.cli import common

# Heavy modules (psycopg, rich, the engine) are imported by the commands that use them:
# every `pg-ttl` start, --help included, imports this module.
if TYPE_CHECKING:
    import psycopg
    from rich.table import Table

DEMO_SQL = """
CREATE TABLE events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL,
    body       text
);
CREATE INDEX ON events (created_at);
"""
DEMO_ROWS = """
INSERT INTO events (created_at, body)
SELECT now() - mod(g, 60) * interval '1 day' - interval '1 hour', 'event ' || g
  FROM generate_series(1, %(rows)s) AS g
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="try pg_ttl on a throwaway local PostgreSQL (no setup)",
        description="Start a throwaway PostgreSQL (system binaries, or the pgserver wheel), install pg_ttl, "
        "create a sample table with a 30-day TTL, a 14-day tier to a temporary directory and rows of mixed ages, "
        "show what is expired, run one expiration pass and show what it moved and deleted. The server, the "
        "archive and their files are removed on exit, also on Ctrl-C.",
    )
    p.add_argument("--rows", type=int, default=6000, help="sample rows to insert (default 6000)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    import psycopg

    from pg_ttl import install
    from pg_ttl.localserver import LocalServer

    # SIGTERM should clean up like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    with common.console.status("starting a throwaway PostgreSQL…"):
        server = LocalServer()
    try:
        with common.console.status(f"starting a throwaway PostgreSQL ({server.bindir})…"):
            server.start()
        common.console.print(f"[bold]1.[/] Started {server.version} on port {server.port} (data in {server.base_dir}).")
        dsn = server.create_database("demo")
        result = install.upgrade(dsn)
        common.console.print(f"[bold]2.[/] pg-ttl install → schema ttl at revision {result.after}.")
        with psycopg.connect(dsn, autocommit=True) as conn:
            run_demo(conn, dsn, args.rows)
    finally:
        with common.console.status("removing the throwaway server…"):
            server.cleanup()
        common.console.print("Throwaway server stopped and removed.")
    return 0


def run_demo(conn: psycopg.Connection[Any], dsn: str, rows: int) -> None:
    import tempfile

    from pg_ttl import catalog
    from pg_ttl.expire import expire

    conn.execute(DEMO_SQL)
    conn.execute(DEMO_ROWS, {"rows": rows})
    conn.execute("ANALYZE events")
    common.console.print(f"[bold]3.[/] Created table events with {rows} rows, created_at spread over the last 60 days.")
    sql = "SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at', job_cron => '@hourly')"
    conn.execute(sql)
    common.console.print(f"[bold]4.[/] {sql}")
    policy = catalog.list_policies(conn)[0]
    common.console.print(f"    policy: {policy.table_name} expires at {policy.expiry_description}, "
                         f"runs {policy.job_cron}")
    with tempfile.TemporaryDirectory(prefix="pg-ttl-demo-archive-") as archive:
        tiered = _add_tier(conn, archive)
        common.console.print(_by_state(conn, "events by expiry state, before", tiered))
        common.console.print("[bold]5.[/] pg-ttl run events  "
                             "(one expiration pass; `pg-ttl worker` runs them on schedule)")
        for result in expire(dsn, ["events"]):
            for unit in result.units:
                done = "moved to storage local" if unit.action == "archive" else "expired rows deleted"
                common.console.print(f"    {unit.unit}: {unit.action} ({unit.strategy or '-'}), "
                                     f"{unit.rows_deleted} {done} in {unit.duration:.3f} s, status {unit.status}")
        common.console.print(_by_state(conn, "events by expiry state, after", tiered))
        if tiered:
            objects, moved = conn.execute("SELECT count(*), coalesce(sum(rows), 0) FROM ttl.archive").fetchone() \
                or (0, 0)
            common.console.print(f"    archive (pg-ttl archive list events): {moved} rows in {objects} Parquet "
                                 f"objects under {archive}, each read back and verified; pg-ttl restore events "
                                 "brings them back")
    row = conn.execute("SELECT status, rows_deleted, duration FROM ttl.last_run WHERE table_name = 'events'").fetchone()
    if row is not None:
        common.console.print(f"    run history (SELECT * FROM ttl.last_run): status {row[0]}, {row[1]} rows deleted, "
                             f"took {row[2]}")


def _add_tier(conn: psycopg.Connection[Any], directory: str) -> bool:
    """A storage tier to a temporary directory: rows 14 days old move there as Parquet before
    the 30-day TTL deletes them (needs pyarrow, the archive extra)."""
    from pg_ttl.archive.storage import StorageError

    try:
        from pg_ttl.archive import parquet

        parquet.load()
    except StorageError:
        common.console.print("    (tiers: pip install 'pg-ttl[archive]' to see rows moved to storage first)")
        return False
    conn.execute("SELECT ttl.create_storage('local', %s)", (f"file://{directory}",))
    sql = """SELECT ttl.set_tiers('events', '[{"after": "14 days", "to": "local"}]')"""
    conn.execute(sql)
    common.console.print(f"    {sql}  (storage local: {directory})")
    return True


def _by_state(conn: psycopg.Connection[Any], title: str, tiered: bool) -> Table:
    from rich.table import Table

    counts = Table(title=title)
    counts.add_column("state")
    counts.add_column("rows", justify="right")
    counts.add_column("oldest created_at")
    for state, n, oldest in conn.execute(
        """SELECT CASE WHEN created_at + interval '30 days' <= now() THEN 'expired'
                       WHEN %s AND created_at + interval '14 days' <= now() THEN 'past the tier'
                       ELSE 'live' END AS state,
                  count(*), min(created_at)::date
             FROM events GROUP BY 1 ORDER BY 3""", (tiered,)
    ):
        counts.add_row(str(state), str(n), str(oldest))
    return counts
