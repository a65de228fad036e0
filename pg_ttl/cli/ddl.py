"""rewrite / apply / dump: TTL DDL on the command line."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, require_installed

REWRITE_EPILOG = """\
TTL DDL, e.g.:
  CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)
    WITH (ttl_expire_after = '30 days', ttl_column = 'created_at');
  ALTER TABLE events SET (ttl_delete_batch_size = 1000);
  ALTER TABLE users ALTER COLUMN email SET (ttl_expire_after = '90 days');
  ALTER TABLE events RESET (ttl);
  INSERT INTO sessions VALUES (...) USING TTL 3600;
becomes plain PostgreSQL calling the ttl.* SQL API; other SQL is copied unchanged.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("rewrite", help="print TTL DDL as plain PostgreSQL (no database needed)",
                       epilog=REWRITE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE", help="SQL file with TTL DDL, or - for standard input")
    p.set_defaults(func=cmd_rewrite)

    p = sub.add_parser("apply", help="rewrite TTL DDL and run it (one transaction)",
                       epilog=REWRITE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dsn(p)
    p.add_argument("file", metavar="FILE", help="SQL file with TTL DDL, or - for standard input")
    p.add_argument("--statement-by-statement", action="store_true",
                   help="commit each statement on its own (statements before an error stay applied); "
                        "default: the whole file in one transaction, nothing applied on error")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("dump", help="print the TTL DDL that recreates the current TTL policies")
    add_dsn(p)
    p.add_argument("table", metavar="TABLE", nargs="?", help="only this table (default: every table with TTL)")
    p.set_defaults(func=cmd_dump)


def _read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise CliError(f"cannot read {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def cmd_rewrite(args: argparse.Namespace) -> int:
    from pg_ttl.ddl import TtlDdlError, rewrite

    text, name = _read(args.file)
    try:
        sys.stdout.write(rewrite(text, name))
    except TtlDdlError as exc:
        raise CliError(str(exc)) from exc
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    from pg_ttl.ddl import TtlDdlError, rewrite_statements
    from pg_ttl.ddl.apply import ApplyError, apply

    text, name = _read(args.file)
    try:
        statements = rewrite_statements(text, name)  # refuse bad TTL DDL before connecting
    except TtlDdlError as exc:
        raise CliError(str(exc)) from exc
    with connect(args) as conn:
        if any(st.changed for st in statements):
            require_installed(conn)
        try:
            result = apply(conn, text, name, statement_by_statement=args.statement_by_statement)
        except ApplyError as exc:
            if args.statement_by_statement:
                raise CliError(f"{exc} ({exc.applied} statement(s) before it stay applied)") from exc
            raise CliError(f"{exc} (nothing applied)") from exc
        except TtlDdlError as exc:
            raise CliError(str(exc)) from exc
    common.console_err.print(f"{name}: applied {result.statements} statement(s), {result.changed} with TTL DDL",
                             markup=False, highlight=False)
    return 0


def cmd_dump(args: argparse.Namespace) -> int:
    from pg_ttl.ddl.dump import NoTtlError, dump

    with connect(args) as conn:
        require_installed(conn)
        try:
            text = dump(conn, args.table)
        except NoTtlError as exc:
            raise CliError(str(exc)) from exc
    if not text:
        common.console_err.print("-- no TTL policies", markup=False, highlight=False)
    sys.stdout.write(text)
    return 0
