"""Shared pieces of the command line: connection options, consoles, errors."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

# psycopg and rich are imported on use: every `pg-ttl` start (--help, --version) would pay for them.
if TYPE_CHECKING:
    import psycopg
    from rich.console import Console

    console: Console
    console_err: Console


def __getattr__(name: str) -> Any:
    """``console`` and ``console_err``: rich Consoles, made on first use and kept."""
    if name not in ("console", "console_err"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from rich.console import Console

    # console_err: errors stay one line, whatever the width
    made = Console() if name == "console" else Console(stderr=True, soft_wrap=True)
    globals()[name] = made
    return made


class CliError(Exception):
    """A user-facing error: printed as one line, exit code ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_dsn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        default=None,
        help="libpq connection string or URI (default: $PGTTL_DSN, else the PG* environment variables)",
    )


def resolve_dsn(args: argparse.Namespace) -> str:
    import psycopg

    dsn = args.dsn if getattr(args, "dsn", None) is not None else os.environ.get("PGTTL_DSN", "")
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise CliError(f"invalid --dsn: {str(exc).strip().splitlines()[0]}", exit_code=2) from exc
    return str(dsn)


def connect(args: argparse.Namespace, autocommit: bool = True) -> psycopg.Connection[Any]:
    import psycopg

    return psycopg.connect(resolve_dsn(args), autocommit=autocommit, application_name="pg-ttl")


def require_installed(conn: psycopg.Connection[Any]) -> str:
    """The installed schema revision; refuses (CliError) unless pg_ttl is installed at
    exactly this package's revision: older code against a newer schema, or the reverse,
    would misread the catalog."""
    from pg_ttl.install import SchemaError, require_current_schema

    try:
        return require_current_schema(conn)
    except SchemaError as exc:
        raise CliError(str(exc)) from exc
