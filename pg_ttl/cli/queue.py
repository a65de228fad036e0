"""``pg-ttl queue``: a table's expiration queue (the ``ttl_queue_shards`` option, docs/queues.md)."""

from __future__ import annotations

import argparse

from pg_ttl.cli.common import add_dsn, connect, console, require_installed

EXAMPLES = """\
examples:
  psql -c "SELECT ttl.set_option('events', 'queue_shards', '8')"   # turn the queue on
  pg-ttl queue verify events             # compare the queue with the table (exit 1: differences)
  pg-ttl queue verify events --repair    # and fix them, online

An entry is missing when a row with an expiry has none, stale when no row has
that key at that expiry. Neither deletes anything early: every pass re-checks
each entry against its row. A queue still being filled with existing rows
reports stale entries only.
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("queue", help="check or repair a table's expiration queue",
                       description="Expiration queues keep each row's expiry beside the table "
                                   "(\"ttl_queue_shards\"), so a pass reads only what expired.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = p.add_subparsers(dest="queue_command", metavar="ACTION", required=True)
    v = cmds.add_parser("verify", help="compare the queue with the table; --repair fixes the differences",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("table", help="the table (with a queue)")
    v.add_argument("--repair", action="store_true", help="remove stale entries and add missing ones")
    add_dsn(v)
    v.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
        row = conn.execute("SELECT missing, stale, repaired FROM ttl.queue_verify(%s, %s)",
                           (args.table, args.repair)).fetchone()
    assert row is not None
    missing, stale, repaired = int(row[0]), int(row[1]), bool(row[2])
    if missing == 0 and stale == 0:
        console.print(f"queue of {args.table}: exact")
        return 0
    console.print(f"queue of {args.table}: {missing} missing, {stale} stale" + (" - repaired" if repaired else ""))
    return 0 if repaired else 1
