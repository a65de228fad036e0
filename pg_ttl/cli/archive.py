"""``pg-ttl storage``, ``pg-ttl archive`` and ``pg-ttl restore``: where tiers move
expiring rows, what they moved, and bringing rows back (docs/tiers.md)."""

from __future__ import annotations

import argparse
from datetime import datetime

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, require_installed

EXAMPLES = """\
examples:
  pg-ttl storage create local file:///var/lib/pg-ttl/archive
  pg-ttl storage create cold 's3://archive-bucket/pg?region=eu-west-1&credentials_file=/etc/pg-ttl/cold.ini'
  pg-ttl storage create history 'postgresql://archiver@history-db/app?schema=archive'
  pg-ttl storage check cold              # writable, readable, credentials work, from this machine
  psql -c "SELECT ttl.set_tiers('events', '[{\\"after\\": \\"30 days\\", \\"to\\": \\"local\\"}]')"
  pg-ttl archive list events             # the objects tiers wrote: rows, time range, checksum
  pg-ttl restore events --from 2026-01-01 --to 2026-02-01

Rows reach a tier at their TTL column + the tier's "after"; the worker and
pg-ttl run write them to the storage as Parquet, verify each object, record it,
then delete the rows. A restored row is expired again: pause the table's TTL
(SELECT ttl.pause('events')) while you need it, or copy it elsewhere.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = sub.add_parser("storage", help="where tiers move expiring rows (a directory, S3, another PostgreSQL)",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = st.add_subparsers(dest="storage_command", metavar="ACTION", required=True)
    c = cmds.add_parser("create", help="name a storage (a directory, S3, another PostgreSQL)")
    c.add_argument("name")
    c.add_argument("url", help="file:///absolute/directory (on the machine the worker runs on), "
                               "s3://bucket/prefix?endpoint=...&region=...&credentials_file=...&profile=..., or "
                               "postgresql://user@host/db?schema=archive (no password: PGPASSWORD or ~/.pgpass)")
    add_dsn(c)
    c.set_defaults(func=cmd_storage_create)
    k = cmds.add_parser("check", help="write, read back and delete a probe object (PostgreSQL: connect, "
                                      "create its schema)")
    k.add_argument("name")
    add_dsn(k)
    k.set_defaults(func=cmd_storage_check)
    d = cmds.add_parser("drop", help="remove a storage no tier uses and no archive lives in")
    d.add_argument("name")
    add_dsn(d)
    d.set_defaults(func=cmd_storage_drop)

    ar = sub.add_parser("archive", help="what tiers moved to storage",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    acmds = ar.add_subparsers(dest="archive_command", metavar="ACTION", required=True)
    ls = acmds.add_parser("list", help="the archived objects of a table")
    ls.add_argument("table")
    add_dsn(ls)
    ls.set_defaults(func=cmd_archive_list)

    r = sub.add_parser("restore", help="bring archived rows back into their table (idempotent)",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("table")
    r.add_argument("--from", dest="since", type=datetime.fromisoformat,
                   help="objects whose rows' TTL column reaches this instant or later (ISO 8601)")
    r.add_argument("--to", dest="until", type=datetime.fromisoformat,
                   help="objects whose rows' TTL column starts before this instant (ISO 8601)")
    r.add_argument("--tier", help="only objects in this storage")
    add_dsn(r)
    r.set_defaults(func=cmd_restore)


def cmd_storage_create(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
        conn.execute("SELECT ttl.create_storage(%s, %s)", (args.name, args.url))
    common.console.print(f"storage {args.name}: {args.url}")
    return 0


def cmd_storage_check(args: argparse.Namespace) -> int:
    from pg_ttl.archive.storage import StorageError, open_storage

    with connect(args) as conn:
        require_installed(conn)
        row = conn.execute("SELECT url FROM ttl.storage WHERE name = %s", (args.name,)).fetchone()
    if row is None:
        raise CliError(f'storage "{args.name}" does not exist')
    try:
        open_storage(args.name, str(row[0])).check()
    except StorageError as exc:
        raise CliError(str(exc)) from exc
    common.console.print(f"storage {args.name}: writable and readable ({row[0]})")
    return 0


def cmd_storage_drop(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
        conn.execute("SELECT ttl.drop_storage(%s)", (args.name,))
    common.console.print(f"storage {args.name} removed")
    return 0


def cmd_archive_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    with connect(args) as conn:
        require_installed(conn)
        rows = conn.execute(
            "SELECT a.storage, a.object_key, a.rows, a.bytes, a.min_time, a.max_time, a.created_at"
            "  FROM ttl.archive a WHERE a.relid = pg_catalog.to_regclass(%s)::oid ORDER BY a.object_id",
            (args.table,)).fetchall()
    table = Table(title=f"archived objects of {args.table}")
    for col in ("storage", "object", "rows", "bytes", "rows from", "rows to", "archived at"):
        table.add_column(col, justify="right" if col in ("rows", "bytes") else "left")
    for storage, key, n, size, lo, hi, at in rows:
        table.add_row(storage, key, f"{n:,}", f"{size:,}", str(lo), str(hi), str(at))
    common.console.print(table)
    common.console.print(f"{len(rows)} objects, {sum(r[2] for r in rows):,} rows")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from pg_ttl.archive.restore import restore
    from pg_ttl.archive.storage import StorageError

    with connect(args) as conn:
        require_installed(conn)
        try:
            done = restore(conn, args.table, args.since, args.until, args.tier)
        except StorageError as exc:
            raise CliError(str(exc)) from exc
    common.console.print(f"restored {done.rows_inserted:,} rows into {args.table} "
                         f"({done.rows_read:,} read from {done.objects} objects; rows already there were kept)")
    return 0
