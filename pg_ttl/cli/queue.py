"""``pg-ttl queue``: a table's expiration queue (the ``ttl_queue_shards`` option, docs/queues.md)."""

from __future__ import annotations

import argparse

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, require_installed

EXAMPLES = """\
examples:
  pg-ttl queue set events 8              # turn the queue on (8 shards): the next pass fills it
  pg-ttl queue set events 8 --fill       # and add the existing rows now (online, resumable)
  pg-ttl queue set events 0              # turn it off (its tables and triggers are dropped)
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
    s = cmds.add_parser("set", help="turn a table's queue on (SHARDS side tables), change SHARDS, or off (0)",
                        description="Set the table's ttl_queue_shards option (ttl.set_option): SHARDS side tables "
                                    "from 1 to 1024, 0 for none. The table's existing rows are added to a new queue "
                                    "by the next pass, or now with --fill.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("table", help="the table (with a row TTL)")
    s.add_argument("shards", type=int, help="side tables (1-1024); 0: no queue")
    s.add_argument("--fill", action="store_true",
                   help="add the table's existing rows now, --batch rows a transaction (the table stays "
                        "writable; stopped, the next --fill or pass goes on from there)")
    s.add_argument("--batch", type=int, default=10_000, help="rows a transaction with --fill (default 10000)")
    s.add_argument("--lock-timeout", default="5s", metavar="DURATION",
                   help="how long to wait for the table's lock (its triggers are created or dropped: writes "
                        "that come meanwhile wait behind this command); default 5s, 0: wait as long as it takes")
    add_dsn(s)
    s.set_defaults(func=cmd_set)
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
        common.console.print(f"queue of {args.table}: every row has its entry"
                             + (f" ({extra} extra entries: a pass removes them when due)" if extra else ""))
        return 0
    common.console.print(f"queue of {args.table}: {missing} rows missing, {late} late, {extra} extra entries"
                         + (" - repaired" if repaired else ""))
    return 0 if repaired or (missing == 0 and late == 0) else 1


def cmd_set(args: argparse.Namespace) -> int:
    import psycopg

    if args.batch < 1:
        raise CliError("--batch must be at least 1", exit_code=2)
    with connect(args) as conn:
        require_installed(conn)
        conn.execute("SELECT pg_catalog.set_config('lock_timeout', %s, false)", (args.lock_timeout,))
        try:
            conn.execute("SELECT ttl.set_option(%s, 'queue_shards', %s)", (args.table, str(args.shards)))
        except psycopg.errors.LockNotAvailable as exc:
            raise CliError(f"{args.table} is locked by another session (waited --lock-timeout {args.lock_timeout}):"
                           " nothing changed; try again, or with a longer --lock-timeout") from exc
        if args.shards == 0:
            common.console.print(f"queue of {args.table}: off")
            return 0
        if not args.fill:
            common.console.print(f"queue of {args.table}: {args.shards} shards; the next pass adds the existing rows "
                                 "(or: --fill)")
            return 0
        added, reported = 0, 0
        while True:
            # each batch commits on its own (autocommit): stopped here, nothing added is lost
            row = conn.execute("SELECT ttl.queue_backfill(%s, %s), (SELECT backfilled FROM ttl.queue"
                               " WHERE relid = %s::regclass)", (args.table, args.batch, args.table)).fetchone()
            assert row is not None
            added += int(row[0])
            if row[1]:
                break
            if int(row[0]) == 0:
                raise CliError(f"queue of {args.table}: the fill made no progress; run it again")
            if added - reported >= 100_000:
                common.console_err.print(f"queue of {args.table}: {added:,} rows added so far")
                reported = added
    common.console.print(f"queue of {args.table}: {args.shards} shards, filled ({added:,} rows added)")
    return 0
