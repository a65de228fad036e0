"""``pg-ttl queue``: a table's expiration queue (the ``ttl_queue_shards`` option, docs/queues.md)."""

from __future__ import annotations

import argparse

from pg_ttl.cli.common import add_dsn, connect, console, require_installed

EXAMPLES = """\
examples:
  psql -c "SELECT ttl.set_option('events', 'queue_shards', '8')"   # turn the queue on
  pg-ttl queue verify events             # compare the queue with the table (exit 1: rows would expire late)
  pg-ttl queue verify events --repair    # and make it exact, online

Every row with an expiry needs an entry at or before it; an earlier entry is
fine (an UPDATE that makes the expiry later leaves it, a pass moves it). A row
is missing when it has no entry, late when its entries are all later than its
expiry: both would expire late (exit 1). Extra entries (their row is gone, or
has an earlier one) are removed by a pass when due. Nothing is ever deleted
early: every pass re-checks each entry against its row. A queue still being
filled with existing rows reports no missing rows.
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
    v.add_argument("--repair", action="store_true",
                   help="make the queue exact: one entry per row, at its expiry")
    add_dsn(v)
    v.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
        row = conn.execute("SELECT missing, late, extra, repaired FROM ttl.queue_verify(%s, %s)",
                           (args.table, args.repair)).fetchone()
    assert row is not None
    missing, late, extra, repaired = int(row[0]), int(row[1]), int(row[2]), bool(row[3])
    if missing == 0 and late == 0 and (extra == 0 or not args.repair):
        console.print(f"queue of {args.table}: every row has its entry"
                      + (f" ({extra} extra entries: a pass removes them when due)" if extra else ""))
        return 0
    console.print(f"queue of {args.table}: {missing} rows missing, {late} late, {extra} extra entries"
                  + (" - repaired" if repaired else ""))
    return 0 if repaired or (missing == 0 and late == 0) else 1
