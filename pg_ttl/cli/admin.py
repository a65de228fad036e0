"""install / upgrade / downgrade / uninstall / version."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, resolve_dsn

# pg_ttl.install (psycopg) and __version__ (importlib.metadata) are imported by the commands that
# use them: every `pg-ttl` start, --help included, imports this module.
if TYPE_CHECKING:
    from pg_ttl.install import SchemaError


def register(sub: Any) -> None:
    p = sub.add_parser("install", help="create schema ttl (catalog, functions, event triggers)",
                       description="Create schema ttl in the database by running pg_ttl's migrations. "
                       "Needs a superuser (event triggers). On an installed database it upgrades and says so.")
    add_dsn(p)
    p.add_argument("--print-sql", action="store_true",
                   help="print the SQL that install runs instead of running it (no connection needed)")
    p.set_defaults(func=cmd_install)

    p = sub.add_parser("upgrade", help="upgrade schema ttl to this package's version (idempotent)",
                       description="Show what changes (revisions, migrations, objects removed), then upgrade schema "
                       "ttl to this package's revision and replace its functions and views, in one transaction.")
    add_dsn(p)
    p.add_argument("--dry-run", action="store_true",
                   help="show what would change and check that it applies (run in a transaction that is rolled "
                   "back; takes the same locks, briefly); change nothing")
    p.set_defaults(func=cmd_upgrade)

    p = sub.add_parser("downgrade", help="take schema ttl back to an older revision (for an older pg-ttl)",
                       description="Bring pg_ttl's tables back to an older revision; columns added since are dropped "
                       "with their data. Views and event triggers are removed until the next upgrade: install the "
                       "older pg-ttl and run its `pg-ttl upgrade`. This pg-ttl refuses to run on an older revision.")
    add_dsn(p)
    p.add_argument("--to", required=True, metavar="REVISION", help="target revision (see pg-ttl version)")
    p.set_defaults(func=cmd_downgrade)

    p = sub.add_parser("uninstall", help="remove everything pg_ttl created; user tables and data stay",
                       description="Disable every TTL policy, drop pg_ttl's event triggers and schema ttl. "
                       "User tables and their data are left intact.")
    add_dsn(p)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_uninstall)

    p = sub.add_parser("version", help="show the package and the installed schema versions")
    add_dsn(p)
    p.set_defaults(func=cmd_version)


def _exit_code(exc: SchemaError) -> int:
    from pg_ttl import install

    return 3 if isinstance(exc, install.NeedsSuperuser) else 1  # 3: permission denied, as for the server's


def cmd_install(args: argparse.Namespace) -> int:
    from pg_ttl import __version__, install

    if args.print_sql:
        sys.stdout.write(install.install_sql())
        return 0
    try:
        result = install.upgrade(resolve_dsn(args))
    except install.SchemaError as exc:
        raise CliError(f"{exc} (nothing was changed)", exit_code=_exit_code(exc)) from exc
    if result.was_installed:
        common.console.print(f"pg_ttl is already installed (schema revision {result.before}); "
                             f"now at revision {result.after}, functions refreshed.")
    else:
        common.console.print(f"pg_ttl {__version__} installed: schema ttl at revision {result.after}.")
    return 0


def cmd_upgrade(args: argparse.Namespace) -> int:
    from pg_ttl import __version__, install

    dsn = resolve_dsn(args)
    with connect(args) as conn:
        if install.installed_revision(conn) is None:
            raise CliError("pg_ttl is not installed in this database (run: pg-ttl install)")
        if not args.dry_run:
            try:
                install.require_superuser(conn, "upgrade")
            except install.SchemaError as exc:
                raise CliError(f"{exc} (nothing was changed)", exit_code=_exit_code(exc)) from exc
    try:
        plan = install.upgrade_plan(dsn)
    except install.SchemaError as exc:
        raise CliError(str(exc)) from exc
    if plan.steps:
        common.console.print(f"Upgrading schema ttl from revision {plan.before} to {plan.after}:", highlight=False)
        for step in plan.steps:
            common.console.print(f"  {step.revision}  {step.description}", markup=False, highlight=False)
    else:
        common.console.print(f"Schema ttl is at revision {plan.after}: no migration to run.", highlight=False)
    for name in plan.removed:
        common.console.print(f"  drop {name} (no longer part of pg_ttl)", markup=False, highlight=False)
    common.console.print("  replace pg_ttl's functions, views and triggers with this package's "
                         f"(pg-ttl {__version__}); tables and their data are kept", highlight=False)
    try:
        result = install.upgrade(dsn, dry_run=args.dry_run)
    except install.SchemaError as exc:
        raise CliError(f"{exc} (nothing was changed)", exit_code=_exit_code(exc)) from exc
    if args.dry_run:
        common.console.print("Dry run: the upgrade applies cleanly; it was rolled back, nothing changed.")
    elif result.before == result.after:
        common.console.print(f"pg_ttl schema already at revision {result.after}; functions refreshed.")
    else:
        common.console.print(f"pg_ttl schema upgraded from revision {result.before} to {result.after}.")
    return 0


def cmd_downgrade(args: argparse.Namespace) -> int:
    from pg_ttl import install

    dsn = resolve_dsn(args)
    with connect(args) as conn:
        before = install.installed_revision(conn)
    if before is None:
        raise CliError("pg_ttl is not installed in this database; nothing to downgrade")
    try:
        after = install.downgrade(dsn, args.to)
    except install.SchemaError as exc:
        raise CliError(f"{exc} (nothing was changed)", exit_code=_exit_code(exc)) from exc
    common.console.print(f"pg_ttl schema downgraded from revision {before} to {after}. Install the pg-ttl version that "
                         "matches it and run its pg-ttl upgrade to restore its functions and views.", highlight=False)
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    from pg_ttl import install

    dsn = resolve_dsn(args)
    with connect(args) as conn:
        installed = install.installed_revision(conn)
        db = conn.info.dbname
    if installed is None:
        common.console.print("pg_ttl is not installed in this database; nothing to do.")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError("refusing to uninstall without confirmation: pass --yes")
        answer = input(f"Remove pg_ttl (schema ttl, all TTL policies and run history) from database {db!r}? "
                       "User tables stay. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            common.console.print("Aborted; nothing changed.")
            return 1
    try:
        removed = install.uninstall(dsn)
    except install.SchemaError as exc:
        raise CliError(f"{exc} (nothing was changed)", exit_code=_exit_code(exc)) from exc
    common.console.print(f"pg_ttl uninstalled from {db!r}: {removed} TTL polic{'y' if removed == 1 else 'ies'} "
                         "removed, user tables untouched.")
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    from pg_ttl import __version__, install

    common.console.print(f"package   pg-ttl {__version__} (schema revision {install.head_revision()})")
    with connect(args) as conn:
        rev = install.installed_revision(conn)
    common.console.print(f"database  {'not installed' if rev is None else 'schema revision ' + rev}")
    return 0
