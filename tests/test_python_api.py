"""The Python API (pg_ttl.TtlSettings, alter_table, describe_table), used by a table's
owner who is not a superuser: the same checks as the SQL API."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pg_ttl


@pytest.fixture
def owner(db: psycopg.Connection[Any], dsn: str) -> Iterator[psycopg.Connection[Any]]:
    db.autocommit = True
    db.execute("CREATE ROLE apiowner LOGIN")
    db.execute("GRANT CREATE, USAGE ON SCHEMA public TO apiowner")
    conn = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user="apiowner"), autocommit=True)
    assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
    try:
        yield conn
    finally:
        conn.close()
        db.execute("DROP OWNED BY apiowner CASCADE")
        db.execute("DROP ROLE apiowner")


def test_set_describe_and_drop_as_the_owner(owner: psycopg.Connection[Any], tmp_path: Path) -> None:
    owner.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz, ts bigint)")
    pg_ttl.alter_table(owner, "events", set_ttl_settings=pg_ttl.TtlSettings().with_date_type_column("created_at", 3600))
    settings = pg_ttl.describe_table(owner, "events").ttl_settings
    assert settings == pg_ttl.TtlSettings(column="created_at", expire_after="01:00:00", unit=None)
    pg_ttl.alter_table(owner, "events", set_ttl_settings=pg_ttl.TtlSettings().with_value_since_unix_epoch(
        "ts", "SECONDS", timedelta(days=30)))
    described = pg_ttl.describe_table(owner, "events")
    assert described.ttl_settings is not None
    assert (described.ttl_settings.column, described.ttl_settings.unit) == ("ts", "seconds")
    assert described.ttl_settings.expire_after == "30 days"
    assert described.options["ttl_job_cron"] == "@hourly"
    pg_ttl.alter_table(owner, "events", drop_ttl_settings=True)
    assert pg_ttl.describe_table(owner, "events").ttl_settings is None


def test_tiers_through_the_builder(owner: psycopg.Connection[Any], tmp_path: Path) -> None:
    owner.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz)")
    owner.execute("SELECT ttl.create_storage('cold', %s)", (f"file://{tmp_path}",))
    settings = pg_ttl.TtlSettings().with_date_type_column("created_at", "400 days").with_tier("30 days", "cold")
    pg_ttl.alter_table(owner, "events", set_ttl_settings=settings)
    described = pg_ttl.describe_table(owner, "events").ttl_settings
    assert described is not None and described.tiers == (pg_ttl.Tier("30 days", "cold"),)
    assert not described.archive_before_delete
    # rows already past the DELETE archived first: kept, described, and refused without a tier
    pg_ttl.alter_table(owner, "events", set_ttl_settings=settings.with_archive_before_delete())
    described = pg_ttl.describe_table(owner, "events").ttl_settings
    assert described is not None and described.archive_before_delete
    assert described.tiers == (pg_ttl.Tier("30 days", "cold"),)
    assert owner.execute("SELECT archive_before_delete FROM ttl.tier WHERE relid = 'events'::regclass").fetchall() \
        == [(True,)]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="needs a storage tier"):
        pg_ttl.alter_table(owner, "events", set_ttl_settings=pg_ttl.TtlSettings().with_date_type_column(
            "created_at", "400 days").with_archive_before_delete())
    assert pg_ttl.describe_table(owner, "events").ttl_settings == described  # refused: nothing changed
    # the same settings without tiers remove them
    pg_ttl.alter_table(owner, "events", set_ttl_settings=pg_ttl.TtlSettings().with_date_type_column("created_at", 60))
    described = pg_ttl.describe_table(owner, "events").ttl_settings
    assert described is not None and described.tiers == ()


def test_the_sql_apis_checks_and_rights(owner: psycopg.Connection[Any], db: psycopg.Connection[Any]) -> None:
    owner.execute("CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz)")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="must not be negative"):
        pg_ttl.alter_table(owner, "events", set_ttl_settings=pg_ttl.TtlSettings().with_date_type_column(
            "created_at", -5))
    with pytest.raises(psycopg.errors.UndefinedColumn):
        pg_ttl.alter_table(owner, "events", set_ttl_settings=pg_ttl.TtlSettings().with_date_type_column("nope"))
    with pytest.raises(ValueError, match="one of them"):
        pg_ttl.alter_table(owner, "events")
    db.execute("CREATE TABLE theirs (id int PRIMARY KEY, at timestamptz)")  # owned by someone else
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        pg_ttl.alter_table(owner, "theirs", set_ttl_settings=pg_ttl.TtlSettings().with_date_type_column("at"))
    assert pg_ttl.describe_table(owner, "events").ttl_settings is None
