"""Install, upgrade and uninstall the ``ttl`` schema with alembic.

Tables change through alembic revisions (``migrations/versions``); the code
layer (``sql/*.sql``: functions, triggers, views) is idempotent and applied
after every upgrade to head. The version table is ``ttl.alembic_version``.

Replaying the code layer: objects the package no longer defines are dropped
first (``pg_ttl/schema_drops.py``); a function or view whose shape changed
(return type, parameters, view columns), which ``CREATE OR REPLACE`` refuses,
is dropped and recreated together with the views and functions of schema ttl
that depend on it. Objects outside schema ttl that depend on it (a user's
view, trigger, policy, default) are never dropped: the upgrade stops with an
error naming them and changes nothing.

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
EVENT_TRIGGERS = ("pg_ttl_sql_drop", "pg_ttl_ddl_end")


class SchemaError(RuntimeError):
    """The installed schema cannot be used or changed as asked; the message says what to do."""


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


# -- replaying the code layer (called by migrations/env.py) --------------------------

# (class, oid) of a catalog object; class is pg_class for views, pg_proc for functions.
_ObjectRef = tuple[str, int]

# Every object that depends on (class, oid), directly or through other objects,
# deepest first. A view depends on what its rewrite rule uses: rules are mapped
# to their view so that the chain continues through views of views.
_DEPENDENTS = """
WITH RECURSIVE dep(classid, objid, depth) AS (
    SELECT %(cls)s::regclass::oid, %(oid)s::oid, 0
  UNION ALL
    SELECT n.classid, n.objid, dep.depth + 1
      FROM dep
      JOIN pg_catalog.pg_depend d
        ON d.refclassid = dep.classid AND d.refobjid = dep.objid AND d.deptype IN ('n', 'a')
     CROSS JOIN LATERAL (
        SELECT CASE WHEN d.classid = 'pg_catalog.pg_rewrite'::regclass
                    THEN 'pg_catalog.pg_class'::regclass::oid ELSE d.classid END AS classid,
               CASE WHEN d.classid = 'pg_catalog.pg_rewrite'::regclass
                    THEN (SELECT r.ev_class FROM pg_catalog.pg_rewrite r WHERE r.oid = d.objid)
                    ELSE d.objid END AS objid) n
     WHERE NOT (n.classid = dep.classid AND n.objid = dep.objid) AND dep.depth < 32
)
SELECT dep.classid::regclass::text, dep.objid::bigint, max(dep.depth),
       (SELECT i.type || ' ' || i.identity FROM pg_catalog.pg_identify_object(dep.classid, dep.objid, 0) i),
       coalesce((dep.classid = 'pg_catalog.pg_class'::regclass AND c.relkind = 'v'
                 AND c.relnamespace = %(schema)s::regnamespace)
                OR (dep.classid = 'pg_catalog.pg_proc'::regclass AND p.pronamespace = %(schema)s::regnamespace),
                false)
  FROM dep
  LEFT JOIN pg_catalog.pg_class c ON dep.classid = 'pg_catalog.pg_class'::regclass AND c.oid = dep.objid
  LEFT JOIN pg_catalog.pg_proc p ON dep.classid = 'pg_catalog.pg_proc'::regclass AND p.oid = dep.objid
 WHERE dep.depth > 0
 GROUP BY 1, 2, 4, 5
 ORDER BY 3 DESC, 4
"""


def _describe(conn: psycopg.Connection[Any], ref: _ObjectRef) -> str:
    row = conn.execute("SELECT i.type || ' ' || i.identity FROM pg_catalog.pg_identify_object(%s::regclass, %s, 0) i",
                       ref).fetchone()
    return str(row[0]) if row else f"{ref[0]} {ref[1]}"


def _drop_statement(conn: psycopg.Connection[Any], ref: _ObjectRef) -> sql.Composed:
    cls, oid = ref
    if cls == "pg_class":
        row = conn.execute("SELECT n.nspname, c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                           "ON n.oid = c.relnamespace WHERE c.oid = %s", (oid,)).fetchone()
        assert row is not None
        return sql.SQL("DROP VIEW {}.{}").format(sql.Identifier(row[0]), sql.Identifier(row[1]))
    row = conn.execute("SELECT n.nspname, p.proname, p.prokind = 'p', pg_catalog.pg_get_function_identity_arguments("
                       "p.oid) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
                       "WHERE p.oid = %s", (oid,)).fetchone()
    assert row is not None
    # The argument list is PostgreSQL's own rendering of the signature (types quoted as needed).
    return sql.SQL("DROP {} {}.{}({})").format(sql.SQL("PROCEDURE" if row[2] else "FUNCTION"),
                                               sql.Identifier(row[0]), sql.Identifier(row[1]), sql.SQL(row[3]))


def drop_code_object(conn: psycopg.Connection[Any], ref: _ObjectRef, why: str) -> list[str]:
    """Drop a view or function of schema ttl and the views/functions of schema ttl that
    depend on it (the replay recreates them). Never CASCADE: when anything else depends
    on it (a user's view, trigger or policy, a table default), raise SchemaError naming
    it. Returns what was dropped."""
    deps = conn.execute(_DEPENDENTS, {"cls": ref[0], "oid": ref[1], "schema": SCHEMA}).fetchall()
    # Views and functions of schema ttl are the code layer (recreated); anything else is not.
    foreign = [str(d[3]) for d in deps if not d[4]]
    name = _describe(conn, ref)
    if foreign:
        raise SchemaError(f"{name} {why} and must be dropped, but objects that pg_ttl does not recreate depend "
                          f"on it: {'; '.join(foreign)}. Drop them, retry, then recreate them")
    dropped = []
    for cls, oid, _depth, desc, _ours in deps:  # deepest first
        conn.execute(_drop_statement(conn, (str(cls), int(oid))))
        dropped.append(str(desc))
    conn.execute(_drop_statement(conn, ref))
    return [*dropped, name]


def _defined_object(conn: psycopg.Connection[Any], statement: str) -> _ObjectRef | None:
    """The existing view or function that a CREATE OR REPLACE statement of the code layer replaces."""
    import pglast
    from pglast.enums.parsenodes import FunctionParameterMode as Mode
    from pglast.stream import RawStream

    stmt = pglast.parse_sql(statement)[0].stmt
    if isinstance(stmt, pglast.ast.ViewStmt) and stmt.view is not None:
        row = conn.execute("SELECT pg_catalog.to_regclass(pg_catalog.format('%%I.%%I', %s::text, %s::text))::oid",
                           (stmt.view.schemaname or SCHEMA, stmt.view.relname)).fetchone()
        return ("pg_class", int(row[0])) if row and row[0] is not None else None
    if isinstance(stmt, pglast.ast.CreateFunctionStmt):
        names = [n.sval for n in stmt.funcname or ()]
        schema, name = (names[0], names[1]) if len(names) == 2 else (SCHEMA, names[-1])
        # The identity of a function: the types of its input arguments, resolved by the server.
        args = [RawStream()(p.argType) for p in (stmt.parameters or ())
                if p.mode not in (Mode.FUNC_PARAM_OUT, Mode.FUNC_PARAM_TABLE)]
        row = conn.execute(
            "SELECT p.oid FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
            # oidvector arrays start at 0: compare the lists, not the arrays (which compare bounds too).
            "WHERE n.nspname = %s AND p.proname = %s AND pg_catalog.array_to_string(p.proargtypes::oid[], ',') = "
            "pg_catalog.array_to_string(ARRAY(SELECT t::regtype::oid FROM unnest(%s::text[]) "
            "WITH ORDINALITY AS a(t, i) ORDER BY i), ',')",
            (schema, name, args)).fetchone()
        return ("pg_proc", int(row[0])) if row else None
    return None


# CREATE OR REPLACE refuses these changes; the object has to be dropped and created.
_SHAPE_CHANGED = (psycopg.errors.InvalidFunctionDefinition,  # return type, parameter names/defaults/OUT
                  psycopg.errors.InvalidTableDefinition,  # view columns dropped, renamed or retyped
                  psycopg.errors.WrongObjectType)  # function <-> procedure


def _replay_statement(conn: psycopg.Connection[Any], statement: str) -> bool:
    """Run one statement of the code layer; True when an object had to be dropped first."""
    try:
        with conn.transaction():  # a savepoint: the upgrade's transaction survives a refusal
            conn.execute(statement)
        return False
    except _SHAPE_CHANGED as exc:
        ref = _defined_object(conn, statement)
        if ref is None:
            raise
        drop_code_object(conn, ref, f"changed shape ({exc.diag.message_primary})")
        conn.execute(statement)
        return True


def _revision_index(revision: str | None) -> int:
    known = package_revisions()
    return known.index(revision) if revision in known else -1


def removed_objects(before: str | None) -> list[str]:
    """Descriptions of the drop-list entries that apply to a database at revision ``before``."""
    from pg_ttl.schema_drops import REMOVED

    if before is None:
        return []
    at = _revision_index(before)
    return [f"{r.kind} {r.name}" + (f" on {r.table}" if r.table else "") for r in REMOVED
            if at <= _revision_index(r.last_revision)]


def _drop_removed(conn: psycopg.Connection[Any], before: str | None) -> None:
    from pg_ttl.schema_drops import REMOVED

    if before is None:
        return
    at = _revision_index(before)
    for entry in REMOVED:
        if at > _revision_index(entry.last_revision):
            continue
        if entry.kind in ("function", "procedure", "view"):
            lookup = "pg_catalog.to_regclass(%s)" if entry.kind == "view" else "pg_catalog.to_regprocedure(%s)"
            row = conn.execute(sql.SQL("SELECT {}::oid").format(sql.SQL(lookup)), (entry.name,)).fetchone()
            if row and row[0] is not None:
                drop_code_object(conn, ("pg_class" if entry.kind == "view" else "pg_proc", int(row[0])),
                                 "is no longer part of pg_ttl")
        elif entry.kind == "trigger":
            assert entry.table is not None
            schema, _, table = entry.table.rpartition(".")
            conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}.{}").format(
                sql.Identifier(entry.name), sql.Identifier(schema or SCHEMA), sql.Identifier(table)))
        else:
            conn.execute(sql.SQL("DROP EVENT TRIGGER IF EXISTS {}").format(sql.Identifier(entry.name)))


def replay_code_layer(before: str | None) -> None:
    """Bring the code layer to this package's: drop what it removed, then (re)create the rest.

    ``before`` is the revision the database was at when the upgrade started (None: a
    fresh install, where nothing can be in the way).
    """
    from alembic import context

    # Every role that runs pg-ttl checks the schema revision (require_current_schema).
    grant = sql.SQL("GRANT SELECT ON {}.{} TO PUBLIC").format(sql.Identifier(SCHEMA), sql.Identifier(VERSION_TABLE))
    statements = [*code_layer_sql(), grant.as_string(None)]
    if context.is_offline_mode():  # install --print-sql: a fresh install
        for statement in statements:
            execute_sql(statement)
        return
    conn = context.get_bind().connection.driver_connection
    assert conn is not None
    _drop_removed(conn, before)
    if any([_replay_statement(conn, statement) for statement in statements]):
        # A view or function dropped along with a changed one may come earlier in
        # file order: one more pass (all CREATE OR REPLACE) recreates it.
        for statement in statements:
            conn.execute(statement)


def prepare_downgrade() -> None:
    """Before a downgrade: drop the views of schema ttl, which read columns a downgrade
    removes, and pg_ttl's event triggers, which would otherwise fire on the downgrade's
    own DROP TABLEs and read tables it removes. The next upgrade to head (with this
    package or an older one) recreates both."""
    # Also runs at each step of a stepwise install (below head): then there is nothing to drop.
    from alembic import context

    if context.is_offline_mode():
        return
    conn = context.get_bind().connection.driver_connection
    assert conn is not None
    for name in EVENT_TRIGGERS:
        conn.execute(sql.SQL("DROP EVENT TRIGGER IF EXISTS {}").format(sql.Identifier(name)))
    # Granted by the replay, not a migration: the older revision's tables did not have it.
    row = conn.execute("SELECT pg_catalog.to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.{VERSION_TABLE}",)).fetchone()
    if row and row[0]:
        conn.execute(sql.SQL("REVOKE SELECT ON {}.{} FROM PUBLIC").format(sql.Identifier(SCHEMA),
                                                                        sql.Identifier(VERSION_TABLE)))
    while True:  # dropping one view may drop others that depend on it
        row = conn.execute("SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                           "ON n.oid = c.relnamespace WHERE c.relkind = 'v' AND n.nspname = %s "
                           "ORDER BY c.relname LIMIT 1",
                           (SCHEMA,)).fetchone()
        if row is None:
            return
        drop_code_object(conn, ("pg_class", int(row[0])), "reads columns the downgrade removes")


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


def upgrade_plan(dsn: str) -> UpgradePlan:
    """What ``upgrade(dsn)`` would do, without changing anything."""
    from alembic.script import ScriptDirectory

    with psycopg.connect(dsn, autocommit=True) as conn:
        before = installed_revision(conn)
    script = ScriptDirectory.from_config(_config())
    head = head_revision()
    if before is not None and before not in package_revisions():
        raise SchemaError(f"the pg_ttl schema in this database is at revision {before}, which this package does "
                          "not know: a newer pg-ttl installed it")
    revs = list(script.iterate_revisions(head, before if before is not None else "base"))
    steps = [Step(r.revision, (r.doc or "").strip().splitlines()[0] if r.doc else "") for r in reversed(revs)]
    return UpgradePlan(before=before, after=head, steps=steps, removed=removed_objects(before))


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

