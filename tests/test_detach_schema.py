"""Where detached partitions go ("ttl_detach_schema"): a schema of the application's, one the
table's owner may create tables in; never one where a partition would be refused, or lost
with pg_ttl. When it stops being usable after the policy named it, partitions stay attached."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire
from tests.test_partitions_hazards import C

Conn = psycopg.Connection[Any]


def _daily(conn: Conn) -> None:
    """ev partitioned by day, 2026-03-05 .. 03-11, 10 rows a day (1-day TTL: at C, ev_05 .. ev_08
    are expired whole)."""
    conn.execute("CREATE TABLE ev (id int, ts timestamptz, PRIMARY KEY (id, ts)) PARTITION BY RANGE (ts)")
    for d in range(5, 12):
        conn.execute(f"CREATE TABLE ev_{d:02d} PARTITION OF ev FOR VALUES FROM ('2026-03-{d:02d} 00:00+00')"
                     f" TO ('2026-03-{d + 1:02d} 00:00+00')")
    conn.execute("""INSERT INTO ev SELECT d * 100 + g, timestamptz '2026-03-01 12:00+00' + d * interval '1 day'
                      FROM generate_series(4, 10) d, generate_series(1, 10) g""")


@pytest.fixture
def alice(db: Conn, dsn: str) -> Iterator[Conn]:
    """A session of alice, who owns ev; schema archive is the superuser's."""
    db.autocommit = True
    db.execute("CREATE ROLE alice LOGIN")
    db.execute("GRANT CREATE, USAGE ON SCHEMA public TO alice")
    db.execute("CREATE SCHEMA archive")
    db.execute("GRANT USAGE ON SCHEMA archive TO alice")
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="alice"), autocommit=True)
    _daily(conn)
    yield conn
    conn.close()
    db.execute("DROP SCHEMA archive CASCADE")
    db.execute("DROP OWNED BY alice CASCADE")
    db.execute("DROP ROLE alice")


@pytest.mark.parametrize("schema", ["pg_toast", "pg_catalog", "information_schema", "ttl"])
def test_a_system_schema_or_pg_ttls_own_is_refused(db: Conn, schema: str) -> None:
    db.autocommit = True
    _daily(db)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="detach_schema"):
        db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts',"
                   " partition_action => 'detach', detach_schema => %s)", (schema,))
    assert db.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def test_a_schema_the_owner_may_not_create_in_is_refused(alice: Conn) -> None:
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="GRANT CREATE ON SCHEMA archive TO alice"):
        alice.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts',"
                      " partition_action => 'detach', detach_schema => 'archive')")
    assert alice.execute("SELECT count(*) FROM ttl.policy").fetchone() == (0,)


def _attached(conn: Conn) -> set[str]:
    return {str(r[0]) for r in conn.execute("SELECT inhrelid::regclass::text FROM pg_inherits "
                                            "WHERE inhparent = 'ev'::regclass").fetchall()}


def test_partitions_stay_attached_while_the_owner_cannot_move_them(db: Conn, dsn: str, alice: Conn) -> None:
    """CREATE on detach_schema revoked after the policy named it: the run detaches nothing (a
    partition detached and not moved would be left outside the table where it was) and says
    why; granted again, the next run detaches and moves them."""
    db.execute("GRANT CREATE ON SCHEMA archive TO alice")
    alice.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts',"
                  " partition_action => 'detach', detach_schema => 'archive')")
    db.execute("REVOKE CREATE ON SCHEMA archive FROM alice")
    before = _attached(db)
    [res] = expire(psycopg.conninfo.make_conninfo(dsn, user="alice"), ["ev"], cutoff=C)
    assert _attached(db) == before
    skipped = [u for u in res.units if u.action == "detach"]
    assert len(skipped) == 4 and all(u.status == "skipped" for u in skipped)
    assert all('may not create tables in schema "archive"' in (u.error or "") for u in skipped)
    assert res.partitions_detached == 0

    db.execute("GRANT CREATE ON SCHEMA archive TO alice")
    [res] = expire(psycopg.conninfo.make_conninfo(dsn, user="alice"), ["ev"], cutoff=C)
    assert res.partitions_detached == 4
    assert _attached(db) == before - {"ev_05", "ev_06", "ev_07", "ev_08"}
    assert db.execute("SELECT count(*) FROM archive.ev_05").fetchone() == (10,)


def test_partitions_stay_attached_when_detach_schema_was_dropped(db: Conn, dsn: str) -> None:
    db.autocommit = True
    _daily(db)
    db.execute("CREATE SCHEMA gone")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts',"
               " partition_action => 'detach', detach_schema => 'gone')")
    db.execute("DROP SCHEMA gone")
    before = _attached(db)
    [res] = expire(dsn, ["ev"], cutoff=C)
    assert _attached(db) == before
    assert res.partitions_detached == 0
    assert all('schema "gone" of "ttl_detach_schema" does not exist' in (u.error or "")
               for u in res.units if u.action == "detach")


def test_a_partition_whose_name_is_taken_in_detach_schema_stays_attached(db: Conn, dsn: str) -> None:
    """archive already holds a table named ev_05 (detached a year before, say): ev_05 is not
    detached (it could not be moved), the others are."""
    db.autocommit = True
    _daily(db)
    db.execute("CREATE SCHEMA archive")
    db.execute("CREATE TABLE archive.ev_05 (id int)")
    db.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts',"
               " partition_action => 'detach', detach_schema => 'archive')")
    [res] = expire(dsn, ["ev"], cutoff=C)
    assert res.partitions_detached == 3
    assert "ev_05" in _attached(db)
    [kept] = [u for u in res.units if u.action == "detach" and u.status == "skipped"]
    assert 'already has a relation named "ev_05"' in (kept.error or "")
    db.execute("DROP SCHEMA archive CASCADE")
