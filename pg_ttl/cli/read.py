"""list / describe: the read side of the catalog."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pg_ttl.cli import common
from pg_ttl.cli.common import add_dsn, connect, require_installed


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="list TTL policies")
    add_dsn(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("describe", help="show every TTL option of one table")
    add_dsn(p)
    p.add_argument("table", help="table name, optionally schema-qualified")
    p.set_defaults(func=cmd_describe)


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from pg_ttl import catalog

    with connect(args) as conn:
        require_installed(conn)
        policies = catalog.list_policies(conn)
    if args.json:
        print(json.dumps([
            {"table": p.table_name, "expiry": p.expiry_description, "job_cron": p.job_cron,
             "paused": p.paused, "column_policies": p.column_policies} for p in policies
        ], indent=2))
        return 0
    if not policies:
        common.console.print("No TTL policies. Enable one with: SELECT ttl.enable('table', expire_after => '30 days', "
                             "column_name => 'created_at');")
        return 0
    table = Table(title="TTL policies")
    for col in ("table", "expires at", "schedule", "batch (select/delete)", "rate limit (select/delete)",
                "partitions", "state"):
        table.add_column(col)
    for p in policies:
        table.add_row(
            p.table_name,
            p.expiry_description,
            p.job_cron,
            f"{p.select_batch_size}/{p.delete_batch_size}",
            f"{p.select_rate_limit or '∞'}/{p.delete_rate_limit or '∞'}",
            p.partition_action,
            "[yellow]paused[/]" if p.paused else "[green]active[/]",
        )
    common.console.print(table)
    return 0


# ttl.describe()'s rows about the policy record rather than the TTL, and how describe labels them.
POLICY_METADATA = {"table": "table", "created_at": "policy created at", "updated_at": "policy updated at"}


def cmd_describe(args: argparse.Namespace) -> int:
    from rich.table import Table

    from pg_ttl import catalog

    with connect(args) as conn:
        require_installed(conn)
        rows = catalog.describe(conn, args.table)
    # The policy's own timestamps are not TTL options, and a table often has a column of the same
    # name (created_at): they get a table of their own, under names that cannot be read as columns.
    table = Table(title=f"TTL of {args.table}", show_header=True)
    table.add_column("option")
    table.add_column("value")
    meta = Table(title="Policy record", show_header=True)
    meta.add_column("field")
    meta.add_column("value")
    for option, value in rows:
        shown = "" if value is None else value
        if option in POLICY_METADATA:
            meta.add_row(POLICY_METADATA[option], shown)
        else:
            table.add_row(option, shown)
    common.console.print(table)
    if meta.row_count:
        common.console.print(meta)
    return 0
