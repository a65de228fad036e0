"""``pg-ttl ttl set / reset / describe``: a table's TTL, shaped like YDB's ``ydb table ttl``."""

from __future__ import annotations

import argparse
import json

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, require_installed

EXAMPLES = """\
examples (and what they are in YDB):
  pg-ttl ttl set --column created_at --expire-after 3600 events
      ydb table ttl set --column created_at --expire-after 3600 events
      ALTER TABLE events SET (TTL = Interval("PT1H") ON created_at)
  pg-ttl ttl set --column modified_at --expire-after '30 days' --unit seconds metrics
      ALTER TABLE metrics SET (TTL = Interval("P30D") ON modified_at AS SECONDS)
  pg-ttl ttl set --column expire_at sessions          # --expire-after 0: at expire_at itself
  pg-ttl ttl set --column created_at --expire-after 3600 --cron @daily events
      (ydb's --run-interval: pg_ttl runs each table on a cron schedule)
  pg-ttl ttl reset events
      ydb table ttl reset events / ALTER TABLE events RESET (TTL)
  pg-ttl ttl describe events                         # the same as pg-ttl describe

The values go through the SQL API (ttl.set_options): the same checks and
messages as SELECT ttl.set_options(...), TTL DDL and pg-ttl apply.
"""

# YDB's spellings of the units, as ``ydb table ttl set --unit`` takes them
UNITS = {"s": "seconds", "sec": "seconds", "seconds": "seconds",
         "ms": "milliseconds", "msec": "milliseconds", "milliseconds": "milliseconds",
         "us": "microseconds", "usec": "microseconds", "microseconds": "microseconds",
         "ns": "nanoseconds", "nsec": "nanoseconds", "nanoseconds": "nanoseconds"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ttl", help="set, reset or show a table's TTL (like ydb table ttl)",
                       description="A table's TTL by its column, as YDB's ydb table ttl set/reset do it.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cmds = p.add_subparsers(dest="ttl_command", metavar="ACTION", required=True)
    s = cmds.add_parser("set", help="set (or change) the TTL of a table",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("table", help="table name, optionally schema-qualified")
    s.add_argument("--column", required=True,
                   help="the TTL column: date, timestamp, timestamptz, or Unix time (a number) with --unit")
    s.add_argument("--expire-after", default="0",
                   help="how long after the column's time a row expires: seconds (3600) or an interval "
                        "('30 days', 'PT1H'); default 0: at the column's own time")
    s.add_argument("--unit", help="Unix time unit of a numeric column: seconds (s, sec), milliseconds (ms, msec), "
                                  "microseconds (us, usec), nanoseconds (ns, nsec)")
    s.add_argument("--cron", help="when the worker runs this table (5-field cron or @hourly, @daily, ...)")
    add_dsn(s)
    s.set_defaults(func=cmd_set)
    r = cmds.add_parser("reset", help="remove the TTL of a table (what pg_ttl added to it goes too)")
    r.add_argument("table", help="table name, optionally schema-qualified")
    add_dsn(r)
    r.set_defaults(func=cmd_reset)
    d = cmds.add_parser("describe", help="show every TTL option of a table (the same as pg-ttl describe)")
    d.add_argument("table", help="table name, optionally schema-qualified")
    add_dsn(d)
    d.set_defaults(func=cmd_describe)


def _options(args: argparse.Namespace) -> dict[str, str | None]:
    """The TTL as YDB's ttl set gives it, whole: an option not given is cleared (the unit)."""
    after = args.expire_after.strip()
    options: dict[str, str | None] = {"column": args.column,
                                      "expire_after": f"{after} seconds" if after.isdigit() else after,
                                      "unit": None}
    if args.unit:
        unit = UNITS.get(args.unit.strip().lower())
        if unit is None:
            raise CliError(f"unknown --unit {args.unit!r}: seconds (s, sec), milliseconds (ms, msec), "
                           "microseconds (us, usec) or nanoseconds (ns, nsec)")
        options["unit"] = unit
    if args.cron:
        options["job_cron"] = args.cron
    return options


def cmd_set(args: argparse.Namespace) -> int:
    options = _options(args)
    with connect(args) as conn:
        require_installed(conn)
        conn.execute("SELECT ttl.set_options(%s, %s::jsonb)", (args.table, json.dumps(options)))
    common.console.print(f"TTL of {args.table}: rows expire {options['expire_after']} after {args.column}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
        conn.execute("SELECT ttl.disable(%s)", (args.table,))
    common.console.print(f"TTL of {args.table} removed")
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from pg_ttl.cli.read import cmd_describe as describe

    return describe(args)
