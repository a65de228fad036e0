"""install / upgrade / uninstall / version."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pg_ttl import __version__, install
from pg_ttl.cli.common import CliError, add_dsn, connect, console, resolve_dsn


def register(sub: Any) -> None:
    p = sub.add_parser("install", help="create schema ttl (catalog, functions, event triggers)",
                       description="Create schema ttl in the database by running pg_ttl's migrations. "
                       "Needs a superuser (event triggers). On an installed database it upgrades and says so.")
    add_dsn(p)
    p.add_argument("--print-sql", action="store_true",
                   help="print the SQL that install runs instead of running it (no connection needed)")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser("upgrade", help="upgrade schema ttl to this package's version (idempotent)")
    add_dsn(p)
    p.set_defaults(func=cmd_upgrade)

    p = sub.add_parser("uninstall", help="remove everything pg_ttl created; user tables and data stay",
                       description="Disable every TTL policy, drop pg_ttl's event triggers and schema ttl. "
                       "User tables and their data are left intact.")
    add_dsn(p)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_uninstall)

    p = sub.add_parser("version", help="show the package and the installed schema versions")
    add_dsn(p)
    p.set_defaults(func=cmd_version)


def cmd_install(args: argparse.Namespace) -> int:
    if args.print_sql:
        sys.stdout.write(install.install_sql())
        return 0
    result = install.upgrade(resolve_dsn(args))
    if result.was_installed:
        console.print(f"pg_ttl is already installed (schema revision {result.before}); "
                      f"now at revision {result.after}, functions refreshed.")
    else:
        console.print(f"pg_ttl {__version__} installed: schema ttl at revision {result.after}.")
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        from pg_ttl.cli.common import require_installed

        require_installed(conn)
    result = install.upgrade(resolve_dsn(args))
    if result.before == result.after:
        console.print(f"pg_ttl schema already at revision {result.after}; functions refreshed.")
    else:
        console.print(f"pg_ttl schema upgraded from revision {result.before} to {result.after}.")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    dsn = resolve_dsn(args)
    with connect(args) as conn:
        installed = install.installed_revision(conn)
        db = conn.info.dbname
    if installed is None:
        console.print("pg_ttl is not installed in this database; nothing to do.")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError("refusing to uninstall without confirmation: pass --yes")
        answer = input(f"Remove pg_ttl (schema ttl, all TTL policies and run history) from database {db!r}? "
                       "User tables stay. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            console.print("Aborted; nothing changed.")
            return 1
    removed = install.uninstall(dsn)
    console.print(f"pg_ttl uninstalled from {db!r}: {removed} TTL polic{'y' if removed == 1 else 'ies'} removed, "
                  "user tables untouched.")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    console.print(f"package   pg-ttl {__version__} (schema revision {install.head_revision()})")
    with connect(args) as conn:
        rev = install.installed_revision(conn)
    console.print(f"database  {'not installed' if rev is None else 'schema revision ' + rev}")
    return 0
