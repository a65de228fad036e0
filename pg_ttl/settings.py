"""A typed Python API for a table's TTL, shaped like YDB's SDK:

    import pg_ttl
    pg_ttl.alter_table(conn, "events",
                       set_ttl_settings=pg_ttl.TtlSettings().with_date_type_column("created_at", 3600))
    pg_ttl.alter_table(conn, "metrics",
                       set_ttl_settings=pg_ttl.TtlSettings().with_value_since_unix_epoch("ts", "seconds", 86400))
    pg_ttl.describe_table(conn, "events").ttl_settings   # TtlSettings(column='created_at', ...)
    pg_ttl.alter_table(conn, "events", drop_ttl_settings=True)

Every call goes through the SQL API (ttl.set_options, ttl.set_tiers,
ttl.disable, ttl.describe): the same checks, messages and rights (a table's
owner, not a superuser) as SQL, TTL DDL and the CLI. ``conn`` is a psycopg 3
connection; the caller commits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import psycopg

Duration = int | float | timedelta | str  # seconds, a timedelta, or interval text ('30 days', 'PT1H')


@dataclass(frozen=True)
class Tier:
    """Rows move to ``storage`` (ttl.create_storage) ``after`` this long past the column."""

    after: Duration
    storage: str


@dataclass(frozen=True)
class TtlSettings:
    """A table's TTL: its column, how long after it a row expires, the column's Unix time
    unit (numeric columns), the storage tiers before the DELETE, and whether rows already
    past the DELETE are archived to the last tier first."""

    column: str | None = None
    expire_after: Duration = 0
    unit: str | None = None  # 'seconds' | 'milliseconds' | 'microseconds' | 'nanoseconds'
    tiers: tuple[Tier, ...] = field(default=())
    archive_before_delete: bool = False

    def with_date_type_column(self, column: str, expire_after: Duration = 0) -> TtlSettings:
        """A date, timestamp or timestamptz column: rows expire ``expire_after`` after it."""
        return replace(self, column=column, expire_after=expire_after, unit=None)

    def with_value_since_unix_epoch(self, column: str, unit: str, expire_after: Duration = 0) -> TtlSettings:
        """A numeric column of Unix time in ``unit``: rows expire ``expire_after`` after it."""
        return replace(self, column=column, expire_after=expire_after, unit=unit.lower())

    def with_tier(self, after: Duration, storage: str) -> TtlSettings:
        """Rows move to ``storage`` this long after the column, before the DELETE."""
        return replace(self, tiers=(*self.tiers, Tier(after, storage)))

    def with_archive_before_delete(self, archive: bool = True) -> TtlSettings:
        """Rows already past the DELETE are archived to the last tier first (by default they
        are deleted without being archived); the DELETE waits for an archive run that left
        none of them behind."""
        return replace(self, archive_before_delete=archive)


@dataclass(frozen=True)
class TableDescription:
    name: str
    ttl_settings: TtlSettings | None  # None: no TTL, or one without a column (an expression)
    options: dict[str, str | None]  # every TTL option, as ttl.describe shows it


def _interval(value: Duration) -> str:
    if isinstance(value, timedelta):
        return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
    if isinstance(value, int | float):
        return f"{value} seconds"
    return value


def alter_table(conn: psycopg.Connection[Any], table: str, *, set_ttl_settings: TtlSettings | None = None,
                drop_ttl_settings: bool = False) -> None:
    """Set a table's TTL (replacing its column, interval, unit and tiers) or remove it."""
    if (set_ttl_settings is None) == (not drop_ttl_settings):
        raise ValueError("give set_ttl_settings or drop_ttl_settings=True, one of them")
    if drop_ttl_settings:
        conn.execute("SELECT ttl.disable(%s)", (table,))
        return
    assert set_ttl_settings is not None
    s = set_ttl_settings
    if s.column is None:
        raise ValueError("TtlSettings without a column: use with_date_type_column or with_value_since_unix_epoch")
    options = {"column": s.column, "expire_after": _interval(s.expire_after), "unit": s.unit}
    with conn.transaction():  # all or nothing, on an autocommit connection too
        # the old tiers go first: they may not fit the new interval
        if conn.execute("SELECT 1 FROM ttl.tier WHERE relid = %s::regclass", (table,)).fetchone():
            conn.execute("SELECT ttl.set_tiers(%s, '[]')", (table,))
        conn.execute("SELECT ttl.set_options(%s, %s::jsonb)", (table, json.dumps(options)))
        if s.tiers or s.archive_before_delete:
            tiers: list[dict[str, Any]] = [{"after": _interval(t.after), "to": t.storage} for t in s.tiers]
            if s.archive_before_delete:  # ttl.set_tiers refuses it without a storage tier
                tiers.append({"after": _interval(s.expire_after), "action": "delete", "archive_before_delete": True})
            conn.execute("SELECT ttl.set_tiers(%s, %s::jsonb)", (table, json.dumps(tiers)))


def describe_table(conn: psycopg.Connection[Any], table: str) -> TableDescription:
    """The table's TTL as ttl.describe shows it, typed."""
    row = conn.execute("SELECT p.expire_after::text FROM ttl.policy p WHERE p.relid = %s::regclass",
                       (table,)).fetchone()
    if row is None:
        return TableDescription(table, None, {})
    options: dict[str, str | None] = {str(o): v for o, v in conn.execute(
        "SELECT option, value FROM ttl.describe(%s)", (table,)).fetchall()}
    if options.get("ttl_column") is None:  # an expression or per-row policy: no column settings
        return TableDescription(table, None, options)
    found = conn.execute("SELECT after::text, storage, archive_before_delete FROM ttl.tier"
                         " WHERE relid = %s::regclass ORDER BY position", (table,)).fetchall()
    settings = TtlSettings(column=options["ttl_column"], expire_after=str(row[0]), unit=options.get("ttl_unit"),
                           tiers=tuple(Tier(str(after), str(storage)) for after, storage, _ in found),
                           archive_before_delete=any(bool(before) for *_, before in found))
    return TableDescription(table, settings, options)
