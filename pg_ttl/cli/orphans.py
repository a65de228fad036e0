"""``pg-ttl orphans``: delete child rows whose parent row is gone (docs/orphans.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, require_installed

EXAMPLES = """\
examples:
  pg-ttl orphans set data --key hash --parent metadata --age-column created_at --min-age '1 hour'
  pg-ttl orphans set items --key owner_id,region --parent owners --parent-key id,region --age-column created_at
  pg-ttl orphans set blobs --key hash --parent metadata --parent archive --age-column created_at
  pg-ttl orphans set logs --key request_id --parent requests    # no age column: by transaction ids
  pg-ttl orphans status                   # each policy's sweep: ranges done, given up; last run
  pg-ttl orphans plan data                # orphans per range, estimated from a few blocks of each
  pg-ttl orphans reset data
  pg-ttl describe data                    # the ttl_orphan_* rows
  pg-ttl plan data                        # how many orphans a run would delete, per partition

A child row goes when no parent row has its key at the moment of the DELETE and
it is older than --min-age by --age-column (a child written just before its
parent stays); without --age-column, when the transaction that wrote it had ended
--min-age before the run, as pg-ttl's passes timed it. The parent needs a unique
index on its key columns.
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
    s.add_argument("--age-column",
                   help="when the child row was written (date, timestamp, timestamptz or Unix time); without one, "
                        "a row's age is told by the transaction that wrote it")
    s.add_argument("--age-unit", help="seconds, milliseconds, microseconds or nanoseconds, for a numeric age column")
    s.add_argument("--min-age", default="1 hour", help="never delete a child younger than this (default: 1 hour)")
    s.add_argument("--cron", help="schedule of a table with only an orphan policy (default: default_job_cron)")
    s.add_argument("--range-bytes", type=int, help="bytes of the child one select step covers (default 64 MB)")
    s.add_argument("--delete-batch-size", type=int, help="at most this many orphans per DELETE "
                   "(default 10000; each DELETE also stops at ~50 ms)")
    add_dsn(s)
    s.set_defaults(func=cmd_set)

    r = cmds.add_parser("reset", help="remove a table's orphan policy")
    r.add_argument("table", help="the child table")
    add_dsn(r)
    r.set_defaults(func=cmd_reset)

    st = cmds.add_parser("status", help="each orphan policy's sweep (ranges done, given up) and last run")
    st.add_argument("table", nargs="?", help="one child table (default: every orphan policy)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    add_dsn(st)
    st.set_defaults(func=cmd_status)

    pl = cmds.add_parser("plan", help="orphans per range a run now would delete (estimated); changes nothing")
    pl.add_argument("table", nargs="?", help="one child table (default: every orphan policy)")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    add_dsn(pl)
    pl.set_defaults(func=cmd_plan)


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
    common.console.print(f"orphan policy of {args.table} set: children of {', '.join(args.parent)} "
                         f"older than {args.min_age}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
        conn.execute("SELECT ttl.disable_orphans(%s)", (args.table,))
    common.console.print(f"orphan policy of {args.table} removed")
    return 0


def _reports(args: argparse.Namespace, estimate: bool) -> list[Any]:
    from pg_ttl.expire import EngineError
    from pg_ttl.expire.engine import resolve_tables
    from pg_ttl.expire.orphans import report

    with connect(args) as conn:
        require_installed(conn)
        try:
            tables = resolve_tables(conn, [args.table]) if args.table else None
        except EngineError as exc:
            raise CliError(str(exc)) from exc
        found = report(conn, tables, estimate)
    if args.table and not found:
        raise CliError(f"table {args.table} has no orphan policy")
    return found


def _age_rule(rep: Any) -> str:
    if rep.age_column is not None:
        return f"older than {rep.min_age} by {rep.age_column}"
    return f"written by a transaction that had ended {rep.min_age} before the run (no age column)"


def cmd_status(args: argparse.Namespace) -> int:
    from rich.table import Table

    reports = _reports(args, estimate=False)
    if args.json:
        print(json.dumps([{
            "table": r.table, "parents": r.parents, "min_age": r.min_age, "age_column": r.age_column,
            "waiting": r.waiting,
            "units": [{"unit": u.unit, "sweep": u.sweep, "sweep_started_at": _iso(u.started_at),
                       "ranges": u.ranges, "ranges_done": u.done,
                       "ranges_given_up": [{"range": n, "error": e} for n, e in u.given_up],
                       "ranges_failing": [{"range": n, "failures": f, "error": e} for n, f, e in u.failing],
                       "ranges_running": u.running, "last_run": u.last_run, "last_status": u.last_status,
                       "last_finished_at": _iso(u.last_finished_at), "last_orphans_deleted": u.last_deleted,
                       "last_error": u.last_error} for u in r.units]} for r in reports], indent=2))
        return 0
    if not reports:
        common.console.print("No orphan policies.")
        return 0
    for r in reports:
        common.console.print(f"[bold]{r.table}[/]: children of {r.parents}, deleted once {_age_rule(r)}")
        if r.waiting:
            common.console.print(f"  [yellow]{r.waiting}[/]")
        table = Table(show_header=True)
        for col in ("partition", "sweep", "ranges done", "given up", "failing", "last run", "orphans deleted",
                    "note"):
            table.add_column(col, justify="right" if col in ("ranges done", "orphans deleted") else "left")
        for u in r.units:
            notes = [f"range {n}: {e}" for n, e in u.given_up] + \
                    [f"range {n} failed {f}x: {e}" for n, f, e in u.failing]
            if u.last_error:
                notes.append(u.last_error)
            table.add_row(u.unit if u.unit != r.table else "—",
                          f"{u.sweep} ({'finished' if u.finished else 'in progress'})" if u.sweep else "none yet",
                          f"{u.done}/{u.ranges}", str(len(u.given_up)), str(len(u.failing)),
                          f"{u.last_run} {u.last_status}" if u.last_run else "never", f"{u.last_deleted:,}",
                          "; ".join(dict.fromkeys(notes)))
        common.console.print(table)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from rich.table import Table

    reports = _reports(args, estimate=True)
    if args.json:
        print(json.dumps([{
            "table": r.table, "waiting": r.waiting,
            "ranges": [{"unit": unit, "range": e.range_no, "first_block": e.first_block, "end_block": e.end_block,
                        "rows": e.rows, "orphans": e.orphans, "exact": e.exact}
                       for unit, estimates in r.ranges.items() for e in estimates]} for r in reports], indent=2))
        return 0
    if not reports:
        common.console.print("No orphan policies.")
        return 0
    for r in reports:
        table = Table(title=f"orphans of {r.table} a run now would delete (estimated: nothing was changed)")
        for col in ("partition", "range", "blocks", "rows ~", "orphans ~"):
            table.add_column(col, justify="left" if col == "partition" else "right")
        for unit, estimates in r.ranges.items():
            for e in estimates:
                mark = "" if e.exact else " ~"
                table.add_row(unit if unit != r.table else "—", str(e.range_no), f"{e.first_block}-{e.end_block}",
                              f"{e.rows:,}{mark}", f"{e.orphans:,}{mark}")
        common.console.print(table)
        if r.waiting:
            common.console.print(f"[yellow]{r.waiting}[/]")
    common.console.print("Ranges marked ~ are estimated from a few of their blocks; the others were counted whole.")
    return 0


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None
