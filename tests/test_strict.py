"""Strict visibility: expired rows and values are invisible to reading roles before the worker runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Iterator[Conn]:
    db.autocommit = True
    db.execute("CREATE ROLE ttl_app LOGIN")
    db.execute("CREATE TABLE pageviews (path text PRIMARY KEY, views int, note text, "
               "created_at timestamptz NOT NULL DEFAULT now())")
    db.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON pageviews TO ttl_app")
    yield db
    db.execute("DROP OWNED BY ttl_app CASCADE")
    db.execute("DROP ROLE ttl_app")


@pytest.fixture
def app(conn: Conn, connect: Any) -> Conn:
    """The application: an ordinary role, worker not running."""
    app_conn: Conn = connect(user="ttl_app")
    return app_conn


def paths(c: Conn, source: str = "pageviews") -> list[str]:
    return [r[0] for r in c.execute(f"SELECT path FROM {source} ORDER BY path").fetchall()]


def test_expired_rows_invisible_to_app_owner_sees_all(conn: Conn, app: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    conn.execute("INSERT INTO pageviews (path, views) VALUES ('/live', 1), ('/dead', 2), ('/never', 3)")
    conn.execute("UPDATE pageviews SET ttl_expires_at = now() - interval '1 second' WHERE path = '/dead'")
    conn.execute("UPDATE pageviews SET ttl_expires_at = NULL WHERE path = '/never'")
    assert paths(app) == ["/dead", "/live", "/never"]  # not strict: everything until the worker runs
    conn.execute("SELECT ttl.set_option('pageviews', 'strict', 'true')")
    assert paths(app) == ["/live", "/never"]
    assert paths(conn) == ["/dead", "/live", "/never"]  # the owner (and the worker) see everything
    conn.execute("SET ROLE ttl_app")  # the same from a session that switched to the application role
    try:
        assert paths(conn) == ["/live", "/never"]
    finally:
        conn.execute("RESET ROLE")
    # point lookups, counts, UPDATE/DELETE ... WHERE all go through the same filter
    assert app.execute("SELECT count(*) FROM pageviews WHERE path = '/dead'").fetchone() == (0,)
    assert app.execute("UPDATE pageviews SET views = 9 WHERE path = '/dead'").rowcount == 0
    # writes are unaffected
    app.execute("INSERT INTO pageviews (path, views) VALUES ('/new', 4)")
    assert app.execute("UPDATE pageviews SET views = 5 WHERE path = '/new'").rowcount == 1
    desc = dict(conn.execute("SELECT * FROM ttl.describe('pageviews')").fetchall())
    assert desc["ttl_strict"] == "true"


def test_strict_with_ttl_column(conn: Conn, app: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day', column_name => 'created_at')")
    conn.execute("SELECT ttl.set_option('pageviews', 'ttl_strict', 'true')")
    conn.execute("INSERT INTO pageviews (path, created_at) VALUES ('/old', now() - interval '25 hours'), "
                 "('/new', now() - interval '23 hours')")
    assert paths(app) == ["/new"]
    # changing expire_after changes what is visible at once
    conn.execute("SELECT ttl.set_option('pageviews', 'expire_after', '2 days')")
    assert paths(app) == ["/new", "/old"]


def test_expired_values_read_null_through_ttl_live(conn: Conn, app: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 day', column_name => 'created_at')")
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("SELECT ttl.enable_column('pageviews', 'note', '2 hours')")  # from created_at
    conn.execute("SELECT ttl.set_option('pageviews', 'strict', 'true')")
    conn.execute("INSERT INTO pageviews (path, views, note, created_at) VALUES "
                 "('/a', 1, 'a', now() - interval '3 hours'), ('/b', 2, 'b', now()), "
                 "('/gone', 3, 'c', now() - interval '2 days')")
    conn.execute("UPDATE pageviews SET ttl_cell_views = tstzrange(now() - interval '2 hours', now() - interval "
                 "'1 hour') WHERE path = '/a'")
    # an application role that reads through ttl_live (first in its search_path)
    app.execute("SET search_path = ttl_live, public")
    got = app.execute("SELECT path, views, note FROM pageviews ORDER BY path").fetchall()
    assert got == [("/a", None, None), ("/b", 2, "b")]
    # the table itself still has the values (for the owner, and schema-qualified reads)
    assert conn.execute("SELECT views, note FROM public.pageviews WHERE path = '/a'").fetchone() == (1, "a")
    # the view is security_invoker: a role without SELECT on the table reads nothing through it
    conn.execute("CREATE ROLE ttl_nobody LOGIN")
    try:
        with psycopg.connect(conn.info.dsn, user="ttl_nobody", autocommit=True) as nobody, \
                pytest.raises(psycopg.errors.InsufficientPrivilege):
            nobody.execute("SELECT * FROM ttl_live.pageviews")
    finally:
        conn.execute("DROP ROLE ttl_nobody")


def test_strict_off_and_disable_remove_everything(conn: Conn, app: Conn) -> None:
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    conn.execute("SELECT ttl.enable_column('pageviews', 'views', '1 hour', 'write')")
    conn.execute("SELECT ttl.set_option('pageviews', 'strict', 'true')")
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'pageviews'::regclass").fetchone() == (True,)
    assert conn.execute("SELECT to_regclass('ttl_live.pageviews') IS NOT NULL").fetchone() == (True,)
    conn.execute("SELECT ttl.reset_option('pageviews', 'strict')")
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'pageviews'::regclass").fetchone() == (False,)
    assert conn.execute("SELECT count(*) FROM pg_policy WHERE polrelid = 'pageviews'::regclass").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'ttl_live'").fetchone() == (0,)
    conn.execute("SELECT ttl.set_option('pageviews', 'strict', 'true')")
    conn.execute("SELECT ttl.disable('pageviews')")
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'pageviews'::regclass").fetchone() == (False,)
    assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'ttl_live'").fetchone() == (0,)
    cols = [r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'pageviews'::regclass "
                                       "AND attnum > 0 AND NOT attisdropped ORDER BY attnum").fetchall()]
    assert cols == ["path", "views", "note", "created_at"]


def test_existing_row_security_is_kept(conn: Conn, app: Conn) -> None:
    conn.execute("ALTER TABLE pageviews ENABLE ROW LEVEL SECURITY")
    conn.execute("CREATE POLICY app_sees_public ON pageviews USING (path LIKE '/pub%') WITH CHECK (true)")
    conn.execute("SELECT ttl.enable('pageviews', expire_after => '1 hour')")
    conn.execute("INSERT INTO pageviews (path) VALUES ('/pub1'), ('/pub2'), ('/private')")
    conn.execute("UPDATE pageviews SET ttl_expires_at = now() - interval '1 second' WHERE path = '/pub2'")
    conn.execute("SELECT ttl.set_option('pageviews', 'strict', 'true')")
    assert paths(app) == ["/pub1"]  # the application's own policy and the TTL filter both apply
    conn.execute("SELECT ttl.disable('pageviews')")
    assert paths(app) == ["/pub1", "/pub2"]
    assert conn.execute("SELECT relrowsecurity FROM pg_class WHERE oid = 'pageviews'::regclass").fetchone() == (True,)
    assert conn.execute("SELECT polname FROM pg_policy WHERE polrelid = 'pageviews'::regclass").fetchall() == [
        ("app_sees_public",)]


def test_engine_as_table_owner_still_expires_strict_table(conn: Conn, connect: Any, dsn: str) -> None:
    """The worker connects as the table's owner (not a superuser): row security does not hide rows from it."""
    from pg_ttl.expire import expire

    conn.execute("CREATE ROLE ttl_owner LOGIN")
    try:
        conn.execute("GRANT CREATE, USAGE ON SCHEMA public TO ttl_owner")
        owner = connect(user="ttl_owner")
        owner.execute("CREATE TABLE owned (id int PRIMARY KEY, v int)")
        owner.execute("SELECT ttl.enable('owned', expire_after => '1 hour')")
        owner.execute("SELECT ttl.set_option('owned', 'strict', 'true')")
        owner.execute("INSERT INTO owned SELECT g, g FROM generate_series(1, 10) g")
        owner.execute("UPDATE owned SET ttl_expires_at = now() - interval '1 second' WHERE id <= 4")
        owner_dsn = psycopg.conninfo.make_conninfo(dsn, user="ttl_owner")
        (result,) = expire(owner_dsn, ["owned"])
        assert result.status == "ok" and result.rows_deleted == 4
        assert owner.execute("SELECT count(*) FROM owned").fetchone() == (6,)
        owner.close()
    finally:
        conn.execute("DROP OWNED BY ttl_owner CASCADE")
        conn.execute("DROP ROLE ttl_owner")
