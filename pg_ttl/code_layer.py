"""Replaying the code layer (``sql/*.sql``) at head, and preparing a downgrade.

Called by ``migrations/env.py`` inside the upgrade's transaction. Objects the
package no longer defines are dropped first (``pg_ttl/schema_drops.py``); a
function or view whose shape changed (return type, parameters, view columns),
which ``CREATE OR REPLACE`` refuses, is dropped and recreated together with the
views and functions of schema ttl that depend on it. Objects outside schema ttl
that depend on it (a user's view, trigger, policy, a table default) are never
dropped: the upgrade stops with an error naming them and changes nothing.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pg_ttl.install import (
    EVENT_TRIGGERS,
    SCHEMA,
    VERSION_TABLE,
    SchemaError,
    code_layer_sql,
    execute_sql,
    package_revisions,
)
from pg_ttl.schema_drops import Removed

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


def _applicable(conn: psycopg.Connection[Any], before: str | None) -> list[tuple[Removed, _ObjectRef | None]]:
    """Drop-list entries for a database that was at revision ``before`` and still has the object,
    with the view/function to drop (None for triggers)."""
    from pg_ttl.schema_drops import REMOVED

    if before is None:
        return []
    at = _revision_index(before)
    found: list[tuple[Removed, _ObjectRef | None]] = []
    for entry in REMOVED:
        if at > _revision_index(entry.last_revision):
            continue
        if entry.kind in ("function", "procedure", "view"):
            lookup = "pg_catalog.to_regclass(%s)" if entry.kind == "view" else "pg_catalog.to_regprocedure(%s)"
            row = conn.execute(sql.SQL("SELECT {}::oid").format(sql.SQL(lookup)), (entry.name,)).fetchone()
            if row and row[0] is not None:
                found.append((entry, ("pg_class" if entry.kind == "view" else "pg_proc", int(row[0]))))
        elif entry.kind == "trigger":
            row = conn.execute("SELECT 1 FROM pg_catalog.pg_trigger WHERE tgname = %s AND tgrelid = "
                               "pg_catalog.to_regclass(%s)", (entry.name, entry.table)).fetchone()
            if row:
                found.append((entry, None))
        elif conn.execute("SELECT 1 FROM pg_catalog.pg_event_trigger WHERE evtname = %s", (entry.name,)).fetchone():
            found.append((entry, None))
    return found


def removed_objects(conn: psycopg.Connection[Any], before: str | None) -> list[str]:
    """What the drop list will remove from this database (at revision ``before``)."""
    return [f"{r.kind} {r.name}" + (f" on {r.table}" if r.table else "") for r, _ in _applicable(conn, before)]


def _drop_removed(conn: psycopg.Connection[Any], before: str | None) -> None:
    for entry, ref in _applicable(conn, before):
        if ref is not None:
            drop_code_object(conn, ref, "is no longer part of pg_ttl")
        elif entry.kind == "trigger":
            assert entry.table is not None
            schema, _, table = entry.table.rpartition(".")
            conn.execute(sql.SQL("DROP TRIGGER {} ON {}.{}").format(
                sql.Identifier(entry.name), sql.Identifier(schema or SCHEMA), sql.Identifier(table)))
        else:
            conn.execute(sql.SQL("DROP EVENT TRIGGER {}").format(sql.Identifier(entry.name)))


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
