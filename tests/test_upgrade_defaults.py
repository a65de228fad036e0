"""An upgrade writes again the expiry DEFAULTs an older pg_ttl stored with users' tables.

Until 2026-11-28 a per-row TTL's expiry DEFAULT (and a write-time column TTL's tracking
DEFAULT, and a CQL-style table's marker DEFAULT) added the TTL in the writer's TimeZone.
Trigger functions are replaced by every upgrade; DEFAULTs are stored with each table, so
the upgrade must find and rewrite them (sql/75_refresh_defaults.sql).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from pg_ttl import install
from tests.test_cql_hazards import _dst_starting_soon

Conn = psycopg.Connection[Any]

# The DEFAULTs as the older version wrote them (git show 309e9d0^:sql/70_row_ttl.sql,
# sql/73_value_ttls.sql): the TTL added to now() in the session's TimeZone.
OLD_EXPIRY = ("CASE WHEN NULLIF(pg_catalog.current_setting('pg_ttl.row_ttl', true), '') IS NULL "
              "THEN pg_catalog.now() + '1 day'::interval "
              "WHEN pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval = '0'::interval THEN NULL "
              "ELSE pg_catalog.now() + pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval END")
OLD_MARKER = OLD_EXPIRY
OLD_TRACKING = f"pg_catalog.tstzrange(pg_catalog.now(), {OLD_EXPIRY}, '[)')"


def _lives(conn: Conn, zone: str) -> tuple[float, float, float]:
    """Seconds a row, a tracked value and a CQL-style row written now in ``zone`` get."""
    conn.execute(sql.SQL("SET TimeZone = {}").format(sql.Literal(zone)))
    conn.execute("TRUNCATE pv, cq")
    conn.execute("INSERT INTO pv (id, v) VALUES (1, 1)")
    conn.execute("INSERT INTO cq (id, v) VALUES (1, 1)")
    conn.execute("RESET TimeZone")
    row = conn.execute("SELECT extract(epoch FROM ttl_expires_at - ttl_written_at), "
                       "extract(epoch FROM upper(ttl_cell_v) - lower(ttl_cell_v)) FROM pv").fetchone()
    marker = conn.execute("SELECT extract(epoch FROM ttl_expires_at - ttl_written_at) FROM cq").fetchone()
    assert row is not None and marker is not None
    return float(row[0]), float(row[1]), float(marker[0])


def test_upgrade_rewrites_expiry_defaults_an_older_version_stored(db: Conn, dsn: str) -> None:
    db.autocommit = True
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, v int)")
    db.execute("SELECT ttl.enable('pv', expire_after => '1 day')")
    db.execute("SELECT ttl.enable_column('pv', 'v', '1 day', 'write')")
    db.execute("CREATE TABLE cq (id int PRIMARY KEY, v int)")
    db.execute("""SELECT ttl.set_options('cq', '{"expire_after": "1 day", "value_ttls": "true"}')""")
    untouched = db.execute("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                           "WHERE adrelid = 'pv'::regclass ORDER BY adnum").fetchall()
    # what a table enabled by the older version carries
    db.execute(sql.SQL("ALTER TABLE pv ALTER COLUMN ttl_expires_at SET DEFAULT {}").format(sql.SQL(OLD_EXPIRY)))
    db.execute(sql.SQL("ALTER TABLE pv ALTER COLUMN ttl_cell_v SET DEFAULT {}").format(sql.SQL(OLD_TRACKING)))
    db.execute(sql.SQL("ALTER TABLE cq ALTER COLUMN ttl_expires_at SET DEFAULT {}").format(sql.SQL(OLD_MARKER)))
    zone = _dst_starting_soon(db)
    # the old DEFAULTs: clocks going forward within the day take an hour off each
    assert _lives(db, zone) == (82800, 82800, 82800)

    install.upgrade(dsn)

    assert _lives(db, zone) == (86400, 86400, 86400)
    assert db.execute("SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef "
                      "WHERE adrelid = 'pv'::regclass ORDER BY adnum").fetchall() == untouched
    stale = db.execute("SELECT ttl._expiry_defaults_stale('pv'::regclass), "
                       "ttl._expiry_defaults_stale('cq'::regclass)").fetchone()
    assert stale == (False, False)


def test_upgrade_leaves_current_defaults_and_their_tables_alone(db: Conn, dsn: str) -> None:
    """A table whose DEFAULTs are current is not altered by an upgrade (no lock taken on it)."""
    db.autocommit = True
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, v int)")
    db.execute("SELECT ttl.enable('pv', expire_after => '1 day')")
    before = db.execute("SELECT xmin::text FROM pg_class WHERE oid = 'pv'::regclass").fetchone()
    install.upgrade(dsn)
    after = db.execute("SELECT xmin::text FROM pg_class WHERE oid = 'pv'::regclass").fetchone()
    assert before == after


# The DEFAULT as 2026-11-28's version wrote it (UTC, but the per-write TTL added inline):
# SET pg_ttl.row_ttl = '-10 seconds' wrote rows already expired.
UTC_INLINE = ("CASE WHEN NULLIF(pg_catalog.current_setting('pg_ttl.row_ttl', true), '') IS NULL "
              "THEN pg_catalog.timezone('UTC'::text, pg_catalog.timezone('UTC'::text, pg_catalog.now()) "
              "+ '1 day'::interval) "
              "WHEN pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval = '0'::interval THEN NULL "
              "ELSE pg_catalog.timezone('UTC'::text, pg_catalog.timezone('UTC'::text, pg_catalog.now()) "
              "+ pg_catalog.current_setting('pg_ttl.row_ttl', true)::interval) END")


def test_upgrade_rewrites_defaults_that_took_a_negative_per_write_ttl(db: Conn, dsn: str) -> None:
    db.autocommit = True
    db.execute("CREATE TABLE pv (id int PRIMARY KEY, v int)")
    db.execute("SELECT ttl.enable('pv', expire_after => '1 day')")
    db.execute(sql.SQL("ALTER TABLE pv ALTER COLUMN ttl_expires_at SET DEFAULT {}").format(sql.SQL(UTC_INLINE)))
    with db.transaction():
        db.execute("SET LOCAL pg_ttl.row_ttl = '-10 seconds'")
        db.execute("INSERT INTO pv (id, v) VALUES (1, 1)")
    assert db.execute("SELECT ttl_expires_at < now() FROM pv").fetchone() == (True,)  # written expired

    install.upgrade(dsn)

    assert db.execute("SELECT ttl._expiry_defaults_stale('pv'::regclass)").fetchone() == (False,)
    try:
        with db.transaction():
            db.execute("SET LOCAL pg_ttl.row_ttl = '-10 seconds'")
            db.execute("INSERT INTO pv (id, v) VALUES (2, 2)")
    except psycopg.errors.InvalidParameterValue as exc:
        assert "must not be negative" in str(exc)
    else:
        raise AssertionError("a negative per-write TTL was taken after the upgrade")
    assert db.execute("SELECT count(*) FROM pv").fetchone() == (1,)
