"""The ``pg-ttl`` command line. Each module here registers its own subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any, NoReturn

# Start-up time: `pg-ttl --help` imports this package and every module of COMMAND_MODULES, so
# none of them imports psycopg, rich, importlib.metadata or the engine at top level; the
# commands import what they need when they run (tests/test_cli_startup.py).
from pg_ttl.cli import common
from pg_ttl.cli.common import CliError

# Modules that add subcommands; each defines register(subparsers).
COMMAND_MODULES = [
    "pg_ttl.cli.admin",
    "pg_ttl.cli.read",
    "pg_ttl.cli.demo",
    "pg_ttl.cli.run",
    "pg_ttl.cli.worker",
    "pg_ttl.cli.ddl",
    "pg_ttl.cli.orphans",
    "pg_ttl.cli.queue",
    "pg_ttl.cli.archive",
    "pg_ttl.cli.ttl",
]

EPILOG = """\
Connection: --dsn, else $PGTTL_DSN, else libpq's PG* variables (PGHOST, PGPORT,
PGUSER, PGDATABASE, PGPASSWORD ...) and ~/.pgpass, as psql would.

Quick start:
  pg-ttl demo                                   # throwaway local server, no setup
  pg-ttl install --dsn postgresql://app@db/prod
  psql -c "SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at')"
  pg-ttl list
"""


class _VersionAction(argparse._VersionAction):
    """--version: the package version is read only when asked for (importlib.metadata is slow to import)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> NoReturn:
        from pg_ttl import __version__

        self.version = f"pg-ttl {__version__}"
        super().__call__(parser, namespace, values, option_string)
        raise AssertionError("unreachable: argparse exits after --version")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pg-ttl",
        description="Time-to-live for PostgreSQL: rows, column values and partitions expire on their own.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="on an error, also print PostgreSQL's CONTEXT (which of pg_ttl's functions raised it; "
                        "sets pg_ttl.verbose_errors for the session) and, for an unexpected error, the traceback")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        import_module(name).register(sub)
    return parser


def _one_line(exc: BaseException) -> str:
    import psycopg

    if isinstance(exc, psycopg.Error):
        diag = exc.diag
        msg = diag.message_primary or str(exc).strip().splitlines()[0]
        if diag.message_detail:
            msg += f" ({diag.message_detail.strip()})"
        if diag.message_hint:
            msg += f" (hint: {diag.message_hint})"
        return msg
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _context(exc: BaseException) -> None:
    """With --verbose: where in pg_ttl's functions the server raised the error."""
    import psycopg

    if isinstance(exc, psycopg.Error) and exc.diag.context:
        common.console_err.print("CONTEXT: " + exc.diag.context.strip(), markup=False, highlight=False)


def _unwrap(exc: BaseException) -> BaseException:
    # SQLAlchemy (under alembic) wraps driver errors; report the driver's.
    orig = getattr(exc, "orig", None)
    return orig if isinstance(orig, BaseException) else exc


def _user_errors() -> tuple[type[Exception], ...]:
    """CliError, and LocalServerError once pg_ttl.localserver is loaded (before, nothing can have raised it)."""
    module = sys.modules.get("pg_ttl.localserver")
    return (CliError,) if module is None else (CliError, module.LocalServerError)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int | None] = args.func
    if args.verbose:  # every connection of this process; libpq reads PGOPTIONS
        os.environ["PGOPTIONS"] = (os.environ.get("PGOPTIONS", "") + " -c pg_ttl.verbose_errors=on").strip()
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        common.console_err.print("pg-ttl: interrupted")
        return 130
    except _user_errors() as exc:
        common.console_err.print(f"pg-ttl: {exc}", markup=False, highlight=False)
        return exc.exit_code if isinstance(exc, CliError) else 1
    except Exception as exc:
        if "psycopg" not in sys.modules:
            raise  # a bug (no driver error without the driver loaded): the traceback says where
        import psycopg

        err = _unwrap(exc)
        if args.verbose:
            _context(err)
        if isinstance(err, psycopg.OperationalError) and not isinstance(err, psycopg.errors.QueryCanceled):
            common.console_err.print(f"pg-ttl: cannot connect to PostgreSQL: {_one_line(err)}", markup=False,
                                     highlight=False)
            return 2
        if isinstance(err, psycopg.errors.LockNotAvailable):
            common.console_err.print(f"pg-ttl: {_one_line(err)}: another session holds a lock this needs "
                                     "(a long transaction, or a worker mid-run); nothing was changed, retry later",
                                     markup=False, highlight=False)
            return 1
        if isinstance(err, psycopg.errors.QueryCanceled) and "statement timeout" in (err.diag.message_primary or ""):
            # (pg-ttl run sets the session's from ttl.settings: its own bookkeeping runs under it too)
            common.console_err.print(f"pg-ttl: {_one_line(err)}: a statement ran past statement_timeout; pg-ttl run"
                                     " and the worker take it from ttl.settings (raise it there: UPDATE ttl.settings"
                                     " SET value = ... WHERE name = 'statement_timeout'), other commands from"
                                     " the server's settings or PGOPTIONS", markup=False, highlight=False)
            return 1
        if isinstance(err, psycopg.errors.InsufficientPrivilege):
            common.console_err.print(f"pg-ttl: permission denied: {_one_line(err)}", markup=False, highlight=False)
            return 3
        if isinstance(err, psycopg.Error):
            common.console_err.print(f"pg-ttl: {_one_line(err)}", markup=False, highlight=False)
            return 1
        raise  # a bug: the traceback says where


if __name__ == "__main__":
    sys.exit(main())
