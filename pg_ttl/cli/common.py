"""Shared pieces of the command line: connection options, consoles, errors."""

from __future__ import annotations

import argparse
import os
from typing import Any

import psycopg
from rich.console import Console

console = Console()
console_err = Console(stderr=True, soft_wrap=True)  # errors stay one line, whatever the width


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
    dsn = args.dsn if getattr(args, "dsn", None) is not None else os.environ.get("PGTTL_DSN", "")
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise CliError(f"invalid --dsn: {str(exc).strip().splitlines()[0]}", exit_code=2) from exc
    return str(dsn)


def connect(args: argparse.Namespace, autocommit: bool = True) -> psycopg.Connection[Any]:
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
