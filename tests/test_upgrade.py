"""Upgrades from the previous release, the schema-revision check, downgrades.

The previous release's schema is a recorded fixture (tests/upgrade/release_0004.sql,
see its header and tests/upgrade/make_release_fixture.py): the test needs no git
history. It is loaded into a database, filled with policies and run history through
that release's own SQL API, upgraded with this package, and compared with a fresh
install object by object; the data must survive and the engine must work on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.script import ScriptDirectory
from psycopg import sql

from pg_ttl import install
from pg_ttl.localserver import LocalServer

RELEASE = Path(__file__).parent / "upgrade" / "release_0004.sql"
RELEASE_REVISION = "0004"

# Every object of schema ttl, in a form that does not depend on oids or creation order.
CATALOG_QUERIES = {
    # No ACL and the owner's default ACL spelt out grant the same: compare what they grant.
    "tables": """SELECT c.relname, c.relkind, c.relrowsecurity,
                        coalesce(c.relacl,
                                 acldefault(CASE WHEN c.relkind = 'S' THEN 's' ELSE 'r' END::"char", c.relowner))::text
                   FROM pg_class c
                  WHERE c.relnamespace = 'ttl'::regnamespace AND c.relkind IN ('r', 'p', 'S') ORDER BY 1""",
    "columns": """SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                         pg_get_expr(d.adbin, d.adrelid), a.attidentity
                    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                   WHERE c.relnamespace = 'ttl'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0
                     AND NOT a.attisdropped ORDER BY 1, 3""",
    "constraints": """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
                       WHERE connamespace = 'ttl'::regnamespace ORDER BY 1, 2""",
    "indexes": """SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'ttl' ORDER BY 1""",
    "functions": """SELECT p.oid::regprocedure::text, p.prokind, pg_get_function_arguments(p.oid),
                           pg_get_function_result(p.oid), pg_get_functiondef(p.oid), p.proacl::text
                      FROM pg_proc p WHERE p.pronamespace = 'ttl'::regnamespace ORDER BY 1""",
    "views": """SELECT c.relname, pg_get_viewdef(c.oid), c.relacl::text FROM pg_class c
                 WHERE c.relnamespace = 'ttl'::regnamespace AND c.relkind = 'v' ORDER BY 1""",
    "view_columns": """SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod)
                         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
                        WHERE c.relnamespace = 'ttl'::regnamespace AND c.relkind = 'v' AND a.attnum > 0
                        ORDER BY 1, 2""",
    "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(t.oid), tgenabled FROM pg_trigger t
                    JOIN pg_class c ON c.oid = t.tgrelid
                   WHERE c.relnamespace = 'ttl'::regnamespace AND NOT tgisinternal ORDER BY 1, 2""",
    "event_triggers": """SELECT evtname, evtevent, evtfoid::regprocedure::text, evttags::text, evtenabled
                          FROM pg_event_trigger ORDER BY 1""",
    "row_security": """SELECT tablename, policyname, permissive, cmd, roles::text, qual, with_check FROM pg_policies
                        WHERE schemaname = 'ttl' ORDER BY 1, 2""",
    "schema_acl": """SELECT nspacl::text FROM pg_namespace WHERE nspname = 'ttl'""",
    "settings": """SELECT name, value, description FROM ttl.settings ORDER BY 1""",
    "version": """SELECT version_num FROM ttl.alembic_version""",
}
TABLE_LAYER = ("tables", "columns", "constraints", "indexes", "row_security")
# Catalog columns migrations after the release drop, with their data:
# 0006 drops ttl.policy.partition_ignore_value_ttl (an option that had no effect).
DROPPED_COLUMNS = {"policy": ("partition_ignore_value_ttl",)}
# Settings a migration adds after the release (with their defaults); every other row must survive as it was.
ADDED_SETTINGS = {"partition_expiry_step", "throttle", "throttle_target", "throttle_replica_lag", "row_range_bytes"}


def by_name(shape: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """The catalog without column positions (relname, attname, type, ...)."""
    return {**shape, "columns": sorted((r[0], *r[2:]) for r in shape["columns"])}


def catalog(dsn: str, keys: tuple[str, ...] = tuple(CATALOG_QUERIES)) -> dict[str, list[Any]]:
    with psycopg.connect(dsn) as conn:
        return {k: conn.execute(CATALOG_QUERIES[k]).fetchall() for k in keys}


def assert_same_catalog(got: dict[str, list[Any]], want: dict[str, list[Any]]) -> None:
    for key in want:
        extra = [r for r in got[key] if r not in want[key]]
        missing = [r for r in want[key] if r not in got[key]]
        assert got[key] == want[key], f"{key}: only after upgrade {extra}; only in a fresh install {missing}"


def ttl_data(dsn: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table of schema ttl, as JSON objects, in a stable order."""
    with psycopg.connect(dsn) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'ttl'::regnamespace AND relkind = 'r' "
            "AND relname <> 'alembic_version' ORDER BY 1").fetchall()]
        return {t: [r[0] for r in conn.execute(psycopg.sql.SQL(
            "SELECT to_jsonb(x) FROM {} x ORDER BY to_jsonb(x)::text").format(
                psycopg.sql.Identifier("ttl", t))).fetchall()] for t in tables}


def new_db(pg_local: LocalServer, prefix: str) -> str:
    return pg_local.create_database(f"{prefix}_{uuid.uuid4().hex[:8]}")


def load_release(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(RELEASE.read_text())  # a fixture file, no parameters
        assert install.installed_revision(conn) == RELEASE_REVISION


# Policies of every kind, through the SQL API that both the release and head have.
FILL = """
CREATE SCHEMA archive;
CREATE TABLE public.events (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, payload text);
INSERT INTO public.events (created_at, payload)
     SELECT now() - g * interval '1 day', 'e' || g FROM generate_series(0, 59) g;
SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at', job_cron => '@daily',
                  delete_batch_size => 7, select_batch_size => 20, delete_rate_limit => 1000);

CREATE TABLE public.sessions (id int PRIMARY KEY, expires bigint);
INSERT INTO public.sessions SELECT g, extract(epoch FROM now())::bigint + (g - 5) * 3600 FROM generate_series(1, 10) g;
SELECT ttl.enable('sessions', expire_after => '1 hour', column_name => 'expires', unit => 'seconds');
SELECT ttl.pause('sessions');

CREATE TABLE public.jobs (id int PRIMARY KEY, finished_at timestamptz);
SELECT ttl.enable('jobs', expiration_expression => $$finished_at + interval '1 hour'$$);

CREATE TABLE public.pageviews (path text PRIMARY KEY, views int);
SELECT ttl.enable('pageviews', expire_after => '1 hour');
INSERT INTO public.pageviews VALUES ('/index', 1), ('/about', 2);
SELECT ttl.set_option('pageviews', 'strict', 'true');

CREATE TABLE public.users (id int PRIMARY KEY, email text, token text, created_at timestamptz NOT NULL DEFAULT now());
SELECT ttl.enable('users', expire_after => '365 days', column_name => 'created_at');
SELECT ttl.enable_column('users', 'token', '1 day');
SELECT ttl.enable_column('users', 'email', '7 days', 'write');
INSERT INTO public.users (id, email, token, created_at) VALUES (1, 'a@example.com', 't1', now() - interval '2 days');

CREATE TABLE public.metrics (at timestamptz NOT NULL, v int) PARTITION BY RANGE (at);
CREATE TABLE public.metrics_old PARTITION OF public.metrics
    FOR VALUES FROM ('2000-01-01') TO ('2000-01-02');
CREATE TABLE public.metrics_now PARTITION OF public.metrics
    FOR VALUES FROM (now() - interval '1 day') TO (now() + interval '1 day');
INSERT INTO public.metrics VALUES ('2000-01-01 12:00', 1), (now(), 2);
SELECT ttl.enable('metrics', expire_after => '1 day', column_name => 'at',
                  partition_action => 'detach', detach_schema => 'archive');
"""


def fill(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(FILL)
        # Run history, written by the release's own engine procedure.
        conn.execute("CALL ttl.run()")
        runs = conn.execute("SELECT count(*), count(*) FILTER (WHERE rows_deleted > 0) FROM ttl.run").fetchone()
        assert runs is not None and runs[0] >= 5 and runs[1] >= 1, runs


def user_objects(dsn: str) -> dict[str, list[Any]]:
    """What enable() added to the users' tables: triggers, row security, strict views, columns."""
    queries = {
        "triggers": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t
                        JOIN pg_class c ON c.oid = t.tgrelid
                       WHERE c.relnamespace = 'public'::regnamespace AND NOT tgisinternal ORDER BY 1, 2""",
        "policies": """SELECT tablename, policyname, qual FROM pg_policies WHERE schemaname = 'public' ORDER BY 1, 2""",
        "columns": """SELECT table_schema, table_name, column_name, data_type, column_default
                        FROM information_schema.columns WHERE table_schema IN ('public', 'ttl_live', 'archive')
                       ORDER BY 1, 2, column_name""",
        "rows": """SELECT (SELECT count(*) FROM public.events), (SELECT count(*) FROM public.sessions),
                          (SELECT count(*) FROM public.pageviews), (SELECT count(*) FROM public.users)""",
    }
    with psycopg.connect(dsn) as conn:
        return {k: conn.execute(q).fetchall() for k, q in queries.items()}


def test_package_revisions_read_without_alembic_match_alembic() -> None:
    script = ScriptDirectory(str(install.migrations_dir()))
    assert install.package_revisions() == [r.revision for r in reversed(list(script.walk_revisions()))]
    assert install.package_revisions()[-1] == install.head_revision()
    assert RELEASE_REVISION in install.package_revisions()[:-1]


@pytest.mark.slow
def test_upgrade_from_previous_release_equals_fresh_install(pg_local: LocalServer, cli: Callable[..., Any]) -> None:
    fresh = new_db(pg_local, "fresh")
    install.upgrade(fresh)
    want = catalog(fresh)

    old = new_db(pg_local, "release")
    load_release(old)
    fill(old)
    data_before = ttl_data(old)
    users_before = user_objects(old)
    assert catalog(old)["functions"] != want["functions"]  # the release really is different

    result = cli("upgrade", "--dsn", old)
    assert result.returncode == 0, result.stderr
    assert f"from revision {RELEASE_REVISION} to {install.head_revision()}" in result.stdout
    assert "0005  trust: history written only by a table's owners" in result.stdout

    assert_same_catalog(catalog(old), want)
    assert "drop function ttl._expired_sql" in result.stdout  # the drop list, announced
    again = cli("upgrade", "--dsn", old)  # idempotent, and it announces only what it will do
    assert again.returncode == 0 and "no migration to run" in again.stdout and "drop " not in again.stdout
    assert_same_catalog(catalog(old), want)
    # Every row of every catalog table survives, column by column (new columns, and
    # those a migration drops on purpose, aside).
    data_after = ttl_data(old)
    assert {r["name"] for r in data_after["settings"]} - {r["name"] for r in data_before["settings"]} == ADDED_SETTINGS
    data_after["settings"] = [r for r in data_after["settings"] if r["name"] not in ADDED_SETTINGS]
    assert set(data_after) >= set(data_before)
    for table, rows in data_before.items():
        assert len(rows) == len(data_after[table]), table
        kept = [k for k in rows[0] if k not in DROPPED_COLUMNS.get(table, ())] if rows else []
        projected = sorted(({k: r[k] for k in kept} for r in data_after[table]), key=str)
        assert projected == sorted(({k: r[k] for k in kept} for r in rows), key=str), table
    assert data_before["policy"] and data_before["column_policy"] and data_before["run"] and data_before["run_unit"]
    users_after = user_objects(old)
    # The expiry DEFAULTs the release stored with its tables added the TTL in the writer's
    # TimeZone: the upgrade writes them again in UTC (sql/75_refresh_defaults.sql).
    changed = [(b, a) for b, a in zip(users_before["columns"], users_after["columns"], strict=True) if b != a]
    assert changed and all(b[:4] == a[:4] and "now() +" in b[4] and "timezone('UTC'::text, now())" in a[4]
                           for b, a in changed), changed
    users_after["columns"] = users_before["columns"]
    assert users_after == users_before

    # The upgraded database is usable: commands accept it and the engine expires rows.
    for args in (("list",), ("plan",), ("status", "--no-estimates"), ("describe", "events")):
        result = cli(*args, "--dsn", old)
        assert result.returncode == 0, (args, result.stderr)
    with psycopg.connect(old, autocommit=True) as conn:
        conn.execute("INSERT INTO public.events (created_at, payload) VALUES (now() - interval '90 days', 'late')")
        result = cli("run", "events", "--once", "--quiet", "--dsn", old)
        assert result.returncode == 0, result.stderr
        row = conn.execute("SELECT count(*) FROM public.events WHERE created_at < now() - interval '30 days'")
        assert row.fetchone() == (0,)


@pytest.mark.parametrize("command", [("plan",), ("run", "--once", "--quiet"), ("list",), ("status",),
                                     ("describe", "events"), ("dump", "events"),
                                     ("worker", "--once", "--allow-superuser")])
def test_commands_refuse_an_older_schema(pg_local: LocalServer, cli: Callable[..., Any],
                                         command: tuple[str, ...]) -> None:
    old = new_db(pg_local, "old")
    load_release(old)
    with psycopg.connect(old, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.events (id int PRIMARY KEY, created_at timestamptz NOT NULL)")
        conn.execute("SELECT ttl.enable('events', expire_after => '1 day', column_name => 'created_at')")
    result = cli(*command, "--dsn", old, timeout=60)
    assert result.returncode != 0
    assert "run pg-ttl upgrade" in result.stderr
    assert f"revision {RELEASE_REVISION}" in result.stderr and "older" in result.stderr


def test_commands_refuse_a_newer_schema(dsn: str, cli: Callable[..., Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE ttl.alembic_version SET version_num = '9999'")
    for command in (("plan",), ("list",)):
        result = cli(*command, "--dsn", dsn)
        assert result.returncode != 0
        assert "revision 9999" in result.stderr and "newer pg-ttl" in result.stderr
    result = cli("upgrade", "--dsn", dsn)
    assert result.returncode != 0 and "newer pg-ttl" in result.stderr


def test_current_schema_is_accepted(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        assert install.require_current_schema(conn) == install.head_revision()
        conn.execute("UPDATE ttl.alembic_version SET version_num = %s", (install.package_revisions()[-2],))
        with pytest.raises(install.SchemaError, match="run pg-ttl upgrade"):
            install.require_current_schema(conn)


def test_upgrade_dry_run_changes_nothing(pg_local: LocalServer, cli: Callable[..., Any]) -> None:
    old = new_db(pg_local, "dry")
    load_release(old)
    before = catalog(old)
    result = cli("upgrade", "--dry-run", "--dsn", old)
    assert result.returncode == 0, result.stderr
    assert f"from revision {RELEASE_REVISION} to {install.head_revision()}" in result.stdout
    assert "rolled back, nothing changed" in result.stdout
    assert catalog(old) == before


def _view_with_extra_column(conn: psycopg.Connection[Any]) -> None:
    """Make ttl.policies look like an older version's: one more column (CREATE OR REPLACE cannot drop it),
    with ttl.worker_tables, which reads it, on top."""
    defs = dict(conn.execute("SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c WHERE c.relkind = 'v' "
                             "AND c.relnamespace = 'ttl'::regnamespace AND c.relname IN ('policies', 'worker_tables')"
                             ).fetchall())
    conn.execute("DROP VIEW ttl.worker_tables, ttl.policies")
    conn.execute(psycopg.sql.SQL("CREATE VIEW ttl.policies AS SELECT v.*, 1 AS legacy FROM ({}) v").format(
        psycopg.sql.SQL(defs["policies"].rstrip().rstrip(";"))))
    conn.execute(psycopg.sql.SQL("CREATE VIEW ttl.worker_tables AS {}").format(psycopg.sql.SQL(defs["worker_tables"])))


def test_replay_recreates_functions_and_views_that_changed_shape(pg_local: LocalServer) -> None:
    fresh = new_db(pg_local, "fresh")
    install.upgrade(fresh)
    want = catalog(fresh)

    db = new_db(pg_local, "shape")
    install.upgrade(db)
    with psycopg.connect(db, autocommit=True) as conn:
        # An older version's function: same arguments, another return type and parameter name.
        conn.execute("DROP FUNCTION ttl._has_months(interval)")
        conn.execute("CREATE FUNCTION ttl._has_months(old_name interval) RETURNS integer LANGUAGE sql AS 'SELECT 1'")
        # A function a newer version no longer has is not touched by the replay (only by the drop list).
        _view_with_extra_column(conn)
    assert catalog(db)["functions"] != want["functions"] and catalog(db)["view_columns"] != want["view_columns"]
    install.upgrade(db)
    assert_same_catalog(catalog(db), want)


def test_replay_refuses_to_drop_what_users_built_on_a_view(pg_local: LocalServer, cli: Callable[..., Any]) -> None:
    db = new_db(pg_local, "userview")
    install.upgrade(db)
    with psycopg.connect(db, autocommit=True) as conn:
        _view_with_extra_column(conn)
        conn.execute("CREATE VIEW public.my_policies AS SELECT table_name FROM ttl.policies")
        before = catalog(db)
    result = cli("upgrade", "--dsn", db)
    assert result.returncode != 0
    assert "public.my_policies" in result.stderr and "nothing was changed" in result.stderr
    assert catalog(db) == before
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT to_regclass('public.my_policies') IS NOT NULL").fetchone() == (True,)


@pytest.mark.slow
def test_downgrade_to_the_release_and_back(pg_local: LocalServer, cli: Callable[..., Any]) -> None:
    release = new_db(pg_local, "release")
    load_release(release)
    release_tables = catalog(release, TABLE_LAYER)

    fresh = new_db(pg_local, "fresh")
    install.upgrade(fresh)
    want = catalog(fresh)

    db = new_db(pg_local, "down")
    install.upgrade(db)
    fill(db)
    data_before = ttl_data(db)

    result = cli("downgrade", "--to", RELEASE_REVISION, "--dsn", db)
    assert result.returncode == 0, result.stderr
    assert f"to {RELEASE_REVISION}" in result.stdout
    # Tables are the release's again (the columns added since are gone with their data), the rows stay.
    # A column dropped since comes back at the end of its table: compared by name, not position.
    assert by_name(catalog(db, TABLE_LAYER)) == by_name(release_tables)
    data_down = ttl_data(db)
    # the settings added since go with the revisions that added them
    assert {r["name"] for r in data_before["settings"]} - {r["name"] for r in data_down["settings"]} == ADDED_SETTINGS
    data_before["settings"] = [r for r in data_before["settings"] if r["name"] not in ADDED_SETTINGS]
    for table, rows in data_down.items():
        assert len(rows) == len(data_before[table]), table
    refused = cli("plan", "--dsn", db)
    assert refused.returncode != 0 and "run pg-ttl upgrade" in refused.stderr

    # Down to the first revision works too; below it is uninstall's job.
    assert install.downgrade(db, install.package_revisions()[0]) == install.package_revisions()[0]
    with pytest.raises(install.SchemaError, match="pg-ttl uninstall"):
        install.downgrade(db, "base")

    result = cli("upgrade", "--dsn", db)
    assert result.returncode == 0, result.stderr
    # Columns dropped and added again come last: compare them by name, not position.
    got = catalog(db)
    for snap in (got, want):
        snap["columns"] = sorted((r[0], *r[2:]) for r in snap["columns"])
    assert_same_catalog(got, want)
    assert len(ttl_data(db)["policy"]) == len(data_before["policy"])


def test_downgrade_refuses_to_drop_a_users_view(pg_local: LocalServer, cli: Callable[..., Any]) -> None:
    db = new_db(pg_local, "downuser")
    install.upgrade(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE VIEW public.my_runs AS SELECT * FROM ttl.last_run")
    result = cli("downgrade", "--to", RELEASE_REVISION, "--dsn", db)
    assert result.returncode != 0 and "public.my_runs" in result.stderr
    with psycopg.connect(db) as conn:
        assert install.installed_revision(conn) == install.head_revision()


def test_unprivileged_roles_check_the_revision_too(pg_local: LocalServer, cli: Callable[..., Any]) -> None:
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_local.dsn(), autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(psycopg.sql.Identifier(role)))
    current = new_db(pg_local, "cur")
    install.upgrade(current)
    result = cli("list", "--dsn", pg_local.dsn(current.rsplit("=", 1)[1], user=role))
    assert result.returncode == 0, result.stderr
    # The release did not let every role read its revision: that alone says it is older.
    old = new_db(pg_local, "old")
    load_release(old)
    result = cli("list", "--dsn", pg_local.dsn(old.rsplit("=", 1)[1], user=role))
    assert result.returncode != 0 and "run pg-ttl upgrade" in result.stderr, result.stderr


def test_every_removed_function_is_named_as_drop_would_find_it(dsn: str) -> None:
    """Each function of the drop list, created as its old package defined it (its signature), is found
    by an upgrade from the revision it last existed at, and not by one from later revisions."""
    from pg_ttl.code_layer import removed_objects
    from pg_ttl.schema_drops import REMOVED

    functions = [r for r in REMOVED if r.kind == "function"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for entry in functions:
            if conn.execute("SELECT pg_catalog.to_regprocedure(%s)", (entry.name,)).fetchone() == (None,):
                # the signature is the drop list's own text (a constant of the package)
                conn.execute(sql.SQL("CREATE FUNCTION {} RETURNS void LANGUAGE sql AS ''").format(sql.SQL(entry.name)))
        for entry in functions:
            found = removed_objects(conn, entry.last_revision)
            assert f"function {entry.name}" in found, (entry.name, found)
        head = install.head_revision()
        assert [r for r in removed_objects(conn, head) if r.startswith("function")] == []
