"""A database built by running every migration equals one built by the install path.

Three ways to build the schema must agree object by object:
- `pg-ttl install` (alembic upgrade to head, online),
- the SQL that `pg-ttl install --print-sql` emits (alembic offline mode), run with psql,
- every revision applied one at a time, as a database upgraded release by release would be.
"""

from __future__ import annotations

import subprocess
from typing import Any

import psycopg
from alembic.script import ScriptDirectory

from pg_ttl import install
from pg_ttl.localserver import LocalServer

SNAPSHOT_QUERIES = {
    "columns": """SELECT table_name, column_name, ordinal_position, data_type, is_nullable, column_default
                    FROM information_schema.columns WHERE table_schema = 'ttl' ORDER BY 1, 3""",
    "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
                       WHERE connamespace = 'ttl'::regnamespace ORDER BY 1, 2""",
    "indexes": """SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'ttl' ORDER BY 1""",
    "functions": """SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), p.proacl::text FROM pg_proc p
                     WHERE p.pronamespace = 'ttl'::regnamespace ORDER BY 1""",
    "views": """SELECT viewname, definition FROM pg_views WHERE schemaname = 'ttl' ORDER BY 1""",
    "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t
                    JOIN pg_class c ON c.oid = t.tgrelid
                   WHERE c.relnamespace = 'ttl'::regnamespace AND NOT tgisinternal ORDER BY 1, 2""",
    "event_triggers": """SELECT evtname, evtevent, evtfoid::regproc::text, evttags::text, evtenabled
                          FROM pg_event_trigger ORDER BY 1""",
    "row_security": """SELECT tablename, policyname, cmd, roles::text, qual, with_check FROM pg_policies
                        WHERE schemaname = 'ttl' ORDER BY 1, 2""",
    "table_acl": """SELECT relname, relacl::text, relrowsecurity FROM pg_class
                     WHERE relnamespace = 'ttl'::regnamespace ORDER BY 1""",
    "schema_acl": """SELECT nspacl::text FROM pg_namespace WHERE nspname = 'ttl'""",
    "settings": """SELECT name, value FROM ttl.settings ORDER BY 1""",
    "version": """SELECT version_num FROM ttl.alembic_version""",
}


def snapshot(dsn: str) -> dict[str, list[Any]]:
    with psycopg.connect(dsn) as conn:
        return {name: conn.execute(query).fetchall() for name, query in SNAPSHOT_QUERIES.items()}  # type: ignore[arg-type]


def revisions_in_order() -> list[str]:
    script = ScriptDirectory(str(install.migrations_dir()))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def test_online_offline_and_stepwise_agree(pg_local: LocalServer) -> None:
    online = pg_local.create_database("mig_online")
    offline = pg_local.create_database("mig_offline")
    stepwise = pg_local.create_database("mig_stepwise")

    install.upgrade(online)

    psql = pg_local.bindir / "psql"
    proc = subprocess.run([str(psql) if psql.exists() else "psql", "-v", "ON_ERROR_STOP=1", "-q", "-d", offline],
                          input=install.install_sql(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr

    revisions = revisions_in_order()
    assert revisions[0] == "0001" and revisions[-1] == install.head_revision()
    for rev in revisions:
        result = install.upgrade(stepwise, revision=rev)
        assert result.after == rev

    reference = snapshot(online)
    assert reference["functions"] and reference["event_triggers"] and reference["row_security"]
    for name, other in (("offline", snapshot(offline)), ("stepwise", snapshot(stepwise))):
        for key in SNAPSHOT_QUERIES:
            assert other[key] == reference[key], f"{name} differs from online install in {key}"
