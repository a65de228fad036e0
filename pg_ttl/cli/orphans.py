"""``pg-ttl orphans``: delete child rows whose parent row is gone (docs/orphans.md)."""

from __future__ import annotations

import argparse

from pg_ttl.cli.common import CliError, add_dsn, connect, console, require_installed

EXAMPLES = """\
examples:
  pg-ttl orphans set data --key hash --parent metadata --age-column created_at --min-age '1 hour'
  pg-ttl orphans set items --key owner_id,region --parent owners --parent-key id,region --age-column created_at
  pg-ttl orphans set blobs --key hash --parent metadata --parent archive --age-column created_at
  pg-ttl orphans reset data
  pg-ttl describe data                    # the ttl_orphan_* rows
  pg-ttl plan data                        # how many orphans a run would delete, per partition

A child row goes when no parent row has its key at the moment of the DELETE and
it is older than --min-age by --age-column (a child written just before its
parent stays). The parent needs a unique index on its key columns.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("orphans", help="delete child rows whose parent row is gone",
                       description="Orphan policies: a child table's rows whose key has no row in a parent "
                                   "table are deleted by the worker and pg-ttl run.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = p.add_subparsers(dest="orphans_command", metavar="ACTION", required=True)

    s = cmds.add_parser("set", help="create or change a table's orphan policy",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("table", help="the child table")
    s.add_argument("--key", required=True, help="the child's key columns, comma-separated")
    s.add_argument("--parent", required=True, action="append",
                   help="the parent table; given several times, a child is an orphan when none of them has its key")
    s.add_argument("--parent-key", action="append",
                   help="the parent's key columns (default: the same names as --key); once for every parent, "
                        "or once per --parent, in the same order")
    s.add_argument("--age-column", required=True,
                   help="when the child row was written (date, timestamp, timestamptz or Unix time)")
    s.add_argument("--age-unit", help="seconds, milliseconds, microseconds or nanoseconds, for a numeric age column")
    s.add_argument("--min-age", default="1 hour", help="never delete a child younger than this (default: 1 hour)")
    s.add_argument("--cron", help="schedule of a table with only an orphan policy (default: default_job_cron)")
    s.add_argument("--range-bytes", type=int, help="bytes of the child one select step covers (default 64 MB)")
    s.add_argument("--delete-batch-size", type=int, help="orphans per DELETE (default 1000)")
    add_dsn(s)
    s.set_defaults(func=cmd_set)

    r = cmds.add_parser("reset", help="remove a table's orphan policy")
    r.add_argument("table", help="the child table")
    add_dsn(r)
    r.set_defaults(func=cmd_reset)


def _columns(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def cmd_set(args: argparse.Namespace) -> int:
    keys = [_columns(k) for k in args.parent_key or []]
    if len(keys) > 1 and len(keys) != len(args.parent):
        raise CliError(f"{len(args.parent)} --parent but {len(keys)} --parent-key: give --parent-key once "
                       "(every parent) or once per --parent", exit_code=2)
    with connect(args) as conn:
        require_installed(conn)
        conn.execute(
            "SELECT ttl.enable_orphans(%(t)s, %(key)s, NULL, %(pkey)s, %(min_age)s::interval, %(age)s,"
            " %(unit)s, %(cron)s, %(rb)s, %(dbs)s, %(parents)s::text[]::regclass[])",
            {"t": args.table, "key": _columns(args.key), "parents": args.parent,
             "pkey": (keys if len(keys) > 1 else keys[0]) if keys else None, "min_age": args.min_age,
             "age": args.age_column, "unit": args.age_unit, "cron": args.cron, "rb": args.range_bytes,
             "dbs": args.delete_batch_size})
    console.print(f"orphan policy of {args.table} set: children of {', '.join(args.parent)} older than {args.min_age}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
        conn.execute("SELECT ttl.disable_orphans(%s)", (args.table,))
    console.print(f"orphan policy of {args.table} removed")
    return 0
