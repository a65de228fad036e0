"""Only a table's owner (or a member of its owning role) may change its TTL."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.helpers import catalog_state

ROLES = ("alice", "bob", "carol", "team")


@pytest.fixture
def roles(db: psycopg.Connection[Any], connect: Any) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    db.autocommit = True
    for stmt in (
        "CREATE ROLE alice LOGIN", "CREATE ROLE bob LOGIN", "CREATE ROLE team NOLOGIN",
        "CREATE ROLE carol LOGIN IN ROLE team",
        "GRANT CREATE, USAGE ON SCHEMA public TO alice, bob, team",
        "SET ROLE alice",
        "CREATE TABLE alice_events (id int PRIMARY KEY, created_at timestamptz)",
        "RESET ROLE",
        "SET ROLE team",
        "CREATE TABLE team_events (id int PRIMARY KEY, created_at timestamptz)",
        "RESET ROLE",
        "GRANT SELECT, UPDATE, INSERT, DELETE ON alice_events, team_events TO bob",
    ):
        db.execute(stmt)
    conns = {name: connect(user=name) for name in ("alice", "bob", "carol")}
    yield conns
    # Roles are cluster-wide: remove them with what they own.
    for conn in conns.values():
        conn.close()
    db.rollback()
    db.execute("DROP OWNED BY alice, bob, carol, team CASCADE")
    db.execute("DROP ROLE alice, bob, carol, team")


def test_owner_may_manage(roles: dict[str, psycopg.Connection[Any]]) -> None:
    alice = roles["alice"]
    alice.execute("SELECT ttl.enable('alice_events', '1 day', 'created_at')")
    alice.execute("SELECT ttl.set_option('alice_events', 'job_cron', '@daily')")
    alice.execute("SELECT ttl.disable('alice_events')")


def test_member_of_owning_role_may_manage(roles: dict[str, psycopg.Connection[Any]]) -> None:
    roles["carol"].execute("SELECT ttl.enable('team_events', '1 day', 'created_at')")
    assert roles["carol"].execute("SELECT table_name FROM ttl.policies").fetchall() == [("team_events",)]


@pytest.mark.parametrize("call", [
    "SELECT ttl.enable('alice_events', '1 day', 'created_at')",
    "SELECT ttl.set_option('alice_events', 'job_cron', '@daily')",
    "SELECT ttl.pause('alice_events')",
    "SELECT ttl.disable('alice_events')",
    "SELECT ttl.enable_column('alice_events', 'created_at', '1 day')",
])
def test_non_owner_refused(db: psycopg.Connection[Any], roles: dict[str, psycopg.Connection[Any]], call: str) -> None:
    if "enable(" not in call:
        roles["alice"].execute("SELECT ttl.enable('alice_events', '1 day', 'created_at')")
    before = catalog_state(db)
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
        roles["bob"].execute(call)
    assert "must be owner of table public.alice_events" in str(info.value)
    assert catalog_state(db) == before


def test_row_security_blocks_direct_catalog_writes(db: psycopg.Connection[Any],
                                                   roles: dict[str, psycopg.Connection[Any]]) -> None:
    roles["alice"].execute("SELECT ttl.enable('alice_events', '1 day', 'created_at')")
    before = catalog_state(db)
    # bob cannot see a way around the functions: direct writes are filtered by row security
    cur = roles["bob"].execute("UPDATE ttl.policy SET paused = true")
    assert cur.rowcount == 0
    cur = roles["bob"].execute("DELETE FROM ttl.policy")
    assert cur.rowcount == 0
    with pytest.raises(psycopg.Error):
        roles["bob"].execute("INSERT INTO ttl.policy (relid, ttl_attnum, expire_after) "
                             "VALUES ('alice_events'::regclass, 2, '1 day')")
    assert catalog_state(db) == before
    # everyone may read the policies
    assert roles["bob"].execute("SELECT count(*) FROM ttl.policies").fetchone() == (1,)
