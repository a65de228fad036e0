"""Install, upgrade and uninstall the ``ttl`` schema with alembic.

Tables change through alembic revisions (``migrations/versions``); the code
layer (``sql/*.sql``: functions, triggers, views) is idempotent and applied
after every upgrade. The version table is ``ttl.alembic_version``.
"""

from __future__ import annotations

import io
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
EVENT_TRIGGERS = ("pg_ttl_sql_drop", "pg_ttl_ddl_end")


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


@dataclass
class UpgradeResult:
    before: str | None
    after: str

    @property
    def was_installed(self) -> bool:
        return self.before is not None


def upgrade(dsn: str, revision: str = "head", lock_timeout_ms: int = 30000) -> UpgradeResult:
    """Install or upgrade to ``revision``; idempotent. Gives up (changing nothing)
    when the catalog stays locked by another session for ``lock_timeout_ms``."""
    from alembic import command

    with psycopg.connect(dsn, autocommit=True) as conn:
        before = installed_revision(conn)
    with _sqlalchemy_connection(dsn) as sa_conn:
        command.upgrade(_config(sa_conn, lock_timeout_ms=lock_timeout_ms), revision)
        sa_conn.commit()  # type: ignore[attr-defined]
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = installed_revision(conn)
    assert after is not None
    return UpgradeResult(before=before, after=after)


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

