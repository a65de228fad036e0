"""Install, upgrade and uninstall the ``ttl`` schema with alembic.

Tables change through alembic revisions (``migrations/versions``); the code
layer (``sql/*.sql``: functions, triggers, views) is idempotent and applied
after every upgrade to head. The version table is ``ttl.alembic_version``.

How the code layer is replayed (removed objects, changed shapes, users'
objects): ``pg_ttl/code_layer.py``.

Every command except install/upgrade/uninstall runs only against a schema at
this package's head revision (``require_current_schema``).
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from alembic.config import Config

# alembic (with SQLAlchemy) and pglast are imported where they are used: every
# command that only checks installed_revision() (pg-ttl run, status, ...) would
# otherwise pay ~0.15 s of start-up for them.

SCHEMA = "ttl"
VERSION_TABLE = "alembic_version"
EVENT_TRIGGERS = ("pg_ttl_sql_drop", "pg_ttl_ddl_end", "pg_ttl_create_table")


class SchemaError(RuntimeError):
    """The installed schema cannot be used or changed as asked; the message says what to do."""


class NeedsSuperuser(SchemaError):
    """The command creates or drops event triggers: only a superuser may."""


def migrations_dir() -> Path:
    return Path(str(resources.files("pg_ttl.migrations")))


def sql_dir() -> Path:
    return Path(str(resources.files("pg_ttl.sql")))


def code_layer_files() -> list[Path]:
    return sorted(sql_dir().glob("*.sql"))


def code_layer_sql() -> list[str]:
    """Every statement of the code layer, in file order.

    Split with PostgreSQL's own parser (pglast) so that dollar-quoted bodies
    stay whole and each statement can be executed on its own.
    """
    import pglast

    statements: list[str] = []
    for path in code_layer_files():
        statements.extend(str(s) for s in pglast.split(path.read_text(), with_parser=False))
    return statements


def execute_sql(statement: str) -> None:
    """Run one SQL statement inside a migration (online) or print it verbatim (offline).

    Offline, alembic would compile the text through SQLAlchemy, which doubles
    every ``%`` (pyformat escaping) and reads ``:name`` as a bind parameter;
    PL/pgSQL is full of both, so the text is written out untouched instead.
    """
    from alembic import context

    if context.is_offline_mode():
        context.get_context().impl.static_output(statement.rstrip().rstrip(";") + ";")
    else:
        # The raw psycopg connection, same transaction: with no parameters psycopg
        # sends the text as it is (no % or :name processing).
        driver = context.get_bind().connection.driver_connection
        assert driver is not None
        driver.execute(statement)


def _config(connection: object | None = None, output: io.StringIO | None = None,
            lock_timeout_ms: int = 30000) -> Config:
    from alembic.config import Config

    cfg = Config(output_buffer=output) if output is not None else Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["lock_timeout_ms"] = lock_timeout_ms
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


@contextmanager
def _sqlalchemy_connection(dsn: str) -> Iterator[object]:
    """An SQLAlchemy connection over psycopg, from any libpq DSN (or PG* variables)."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def installed_revision(conn: psycopg.Connection[Any]) -> str | None:
    """The revision of the installed schema, or None when pg_ttl is not installed."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.{VERSION_TABLE}",)
    ).fetchone()
    if not row or not row[0]:
        return None
    rev = conn.execute(
        sql.SQL("SELECT version_num FROM {}.{}").format(sql.Identifier(SCHEMA), sql.Identifier(VERSION_TABLE))
    ).fetchone()
    return str(rev[0]) if rev else None


# -- the package's revisions, without alembic -------------------------------------

_REVISION = re.compile(r"^revision\s*=\s*[\"']([^\"']+)[\"']", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\s*=\s*(?:[\"']([^\"']+)[\"']|None)", re.MULTILINE)


@functools.cache
def _revision_chain() -> tuple[str, ...]:
    """This package's schema revisions, oldest first; cached: the worker checks often.

    Read from the migration files with a regular expression rather than through
    alembic, which would add its start-up time to every command (a test checks
    the result against alembic's own view).
    """
    parent: dict[str, str | None] = {}
    for path in (migrations_dir() / "versions").glob("*.py"):
        text = path.read_text()
        found, down = _REVISION.search(text), _DOWN_REVISION.search(text)
        if found and down:
            parent[found.group(1)] = down.group(1)
    heads = set(parent) - {d for d in parent.values() if d}
    if len(heads) != 1:
        raise SchemaError(f"the package's migrations have {len(heads)} heads, expected one")
    chain: list[str] = []
    rev: str | None = heads.pop()
    while rev is not None:
        chain.append(rev)
        rev = parent.get(rev)
    return tuple(chain[::-1])


def package_revisions() -> list[str]:
    """This package's schema revisions, oldest first (see _revision_chain)."""
    return list(_revision_chain())


def schema_problem(conn: psycopg.Connection[Any]) -> str | None:
    """Why this package cannot work with the database's schema, or None when it can."""
    from pg_ttl import __version__

    known = package_revisions()
    head = known[-1]
    # Every role that runs pg-ttl reads the revision; schemas before this package
    # did not grant that, so a role that cannot read it faces an older schema.
    row = conn.execute(
        "SELECT pg_catalog.to_regclass(%s) IS NOT NULL AND NOT pg_catalog.has_table_privilege(%s, 'SELECT')",
        (f"{SCHEMA}.{VERSION_TABLE}", f"{SCHEMA}.{VERSION_TABLE}")).fetchone()
    if row and row[0]:
        return (f"this role cannot read the pg_ttl schema revision (no SELECT on {SCHEMA}.{VERSION_TABLE}): the "
                f"schema predates this pg-ttl {__version__} (revision {head}): run pg-ttl upgrade")
    installed = installed_revision(conn)
    if installed is None:
        return "pg_ttl is not installed in this database (run: pg-ttl install)"
    if installed == head:
        return None
    if installed in known:
        return (f"the pg_ttl schema in this database is at revision {installed}, older than this "
                f"pg-ttl {__version__} (revision {head}): run pg-ttl upgrade")
    return (f"the pg_ttl schema in this database is at revision {installed}, which this pg-ttl "
            f"{__version__} (revision {head}) does not know: a newer pg-ttl installed it; install that "
            "version (or newer) and run pg-ttl upgrade")


def require_current_schema(conn: psycopg.Connection[Any]) -> str:
    """The installed revision; raises SchemaError unless it is this package's head."""
    problem = schema_problem(conn)
    if problem is not None:
        raise SchemaError(problem)
    rev = installed_revision(conn)
    assert rev is not None
    return rev


# -- upgrade, downgrade --------------------------------------------------------------

@dataclass
class Step:
    revision: str
    description: str  # the migration's one-line summary


@dataclass
class UpgradePlan:
    before: str | None
    after: str
    steps: list[Step]  # migrations to run, in order
    removed: list[str]  # objects of older versions to drop


def require_superuser(conn: psycopg.Connection[Any], command: str) -> None:
    """Installing, upgrading and removing the schema create or drop event triggers, which only a
    superuser may do; every other command works for a table's owner (docs/security.md)."""
    row = conn.execute("SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").fetchone()
    if not (row and row[0]):
        raise NeedsSuperuser(f"permission denied: pg-ttl {command} needs a superuser: it creates or drops "
                             "pg_ttl's event triggers, which only a superuser may do; connect as one "
                             "(for example --dsn 'user=postgres ...'). "
                             "Table owners use every other command with their own role")


def upgrade_plan(dsn: str) -> UpgradePlan:
    """What ``upgrade(dsn)`` would do, without changing anything."""
    from alembic.script import ScriptDirectory

    from pg_ttl.code_layer import removed_objects

    with psycopg.connect(dsn, autocommit=True) as conn:
        before = installed_revision(conn)
        removed = removed_objects(conn, before)
    script = ScriptDirectory.from_config(_config())
    head = head_revision()
    if before is not None and before not in package_revisions():
        raise SchemaError(f"the pg_ttl schema in this database is at revision {before}, which this package does "
                          "not know: a newer pg-ttl installed it")
    revs = list(script.iterate_revisions(head, before if before is not None else "base"))
    steps = [Step(r.revision, (r.doc or "").strip().splitlines()[0] if r.doc else "") for r in reversed(revs)]
    return UpgradePlan(before=before, after=head, steps=steps, removed=removed)


@dataclass
class UpgradeResult:
    before: str | None
    after: str

    @property
    def was_installed(self) -> bool:
        return self.before is not None


def upgrade(dsn: str, revision: str = "head", lock_timeout_ms: int = 30000, dry_run: bool = False) -> UpgradeResult:
    """Install or upgrade to ``revision``; idempotent. Gives up (changing nothing)
    when the catalog stays locked by another session for ``lock_timeout_ms``.
    ``dry_run``: do all of it in one transaction and roll it back (a full check
    that the upgrade applies; it takes the same locks, briefly)."""
    from alembic import command

    with psycopg.connect(dsn, autocommit=True) as conn:
        require_superuser(conn, "install" if revision == "head" and installed_revision(conn) is None else "upgrade")
        before = installed_revision(conn)
        if before is not None and before not in package_revisions():
            raise SchemaError(f"the pg_ttl schema in this database is at revision {before}, which this pg-ttl "
                              "does not know: a newer pg-ttl installed it; it cannot be changed with this one")
    with _sqlalchemy_connection(dsn) as sa_conn:
        if dry_run:
            # Alembic commits a transaction it began itself, not one already open.
            sa_conn.begin()  # type: ignore[attr-defined]
        command.upgrade(_config(sa_conn, lock_timeout_ms=lock_timeout_ms), revision)
        if dry_run:
            sa_conn.rollback()  # type: ignore[attr-defined]
            return UpgradeResult(before=before, after=head_revision() if revision == "head" else revision)
        sa_conn.commit()  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = installed_revision(conn)
    assert after is not None
    return UpgradeResult(before=before, after=after)


def downgrade(dsn: str, revision: str, lock_timeout_ms: int = 30000) -> str | None:
    """Take the schema back to ``revision`` ("base": remove the tables too). Tables go back to that
    revision's shape, dropping the columns added since (their data is lost); the views go (they
    come back with the next upgrade to head). Functions stay as they are: this package refuses to
    run against an older revision, and an older package's ``pg-ttl upgrade`` replaces them.
    Returns the revision reached (None at base)."""
    from alembic import command

    if revision not in package_revisions():
        # Below the first revision nothing of pg_ttl would be left, but its functions
        # still use its tables' row types: that is what uninstall does, properly.
        raise SchemaError(f"cannot downgrade to {revision!r}: the revisions are {', '.join(package_revisions())} "
                          "(to remove pg_ttl entirely, use pg-ttl uninstall)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        require_superuser(conn, "downgrade")
    with _sqlalchemy_connection(dsn) as sa_conn:
        command.downgrade(_config(sa_conn, lock_timeout_ms=lock_timeout_ms), revision)
        sa_conn.commit()  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as conn:
        return installed_revision(conn)


def install_sql() -> str:
    """The SQL that ``install`` runs, for DBAs who deploy through their own tooling."""
    from alembic import command

    out = io.StringIO()
    command.upgrade(_config(output=out), "head", sql=True)
    return out.getvalue()


def uninstall(dsn: str) -> int:
    """Remove everything pg_ttl created; user tables and data stay. Returns policies removed."""
    with psycopg.connect(dsn) as conn:
        if installed_revision(conn) is None and not _schema_exists(conn):
            return 0
        require_superuser(conn, "uninstall")
        conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(7438119)")
        relids = [r[0] for r in conn.execute(  # tables with a table TTL and/or column TTLs
            "SELECT relid FROM ttl.policy UNION SELECT relid FROM ttl.column_policy").fetchall()] if _has_policy_table(
            conn
        ) else []
        # disable() undoes whatever enable() added to a user table.
        for relid in relids:
            conn.execute("SELECT ttl.disable(%s::oid::regclass)", (relid,))
        for name in EVENT_TRIGGERS:
            conn.execute(sql.SQL("DROP EVENT TRIGGER IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))
    return len(relids)


def _schema_exists(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,)).fetchone()
    return row is not None


def _has_policy_table(conn: psycopg.Connection[Any]) -> bool:
    row = conn.execute("SELECT to_regclass('ttl.policy') IS NOT NULL").fetchone()
    return bool(row and row[0])

