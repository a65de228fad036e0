"""Read the ``ttl`` catalog from Python.

Python callers write through the SQL API (``SELECT ttl.enable(...)``,
``ttl.set_options``, ``ttl.disable``), so the database's validation applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

PolicyConn = psycopg.Connection[Any]


@dataclass
class Policy:
    """One row of the ``ttl.policies`` view."""

    relid: int
    table_name: str
    schema_name: str
    relname: str
    ttl_column: str | None
    expiration_expression: str | None
    expire_after: timedelta | None
    unit: str | None
    job_cron: str
    job_cron_override: bool
    select_batch_size: int
    delete_batch_size: int
    select_rate_limit: int
    delete_rate_limit: int
    paused: bool
    partition_action: str
    detach_schema: str | None
    column_policies: int
    created_at: datetime
    updated_at: datetime

    @property
    def expiry_description(self) -> str:
        if self.expiration_expression:
            return self.expiration_expression
        unit = f" ({self.unit})" if self.unit else ""
        return f"{self.ttl_column}{unit} + {format_interval(self.expire_after)}"


def format_interval(value: timedelta | None) -> str:
    if value is None:
        return ""
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n} {u}{'s' if n != 1 else ''}" for n, u in
             ((days, "day"), (hours, "hour"), (minutes, "minute"), (secs, "second")) if n]
    return " ".join(parts) or "0 seconds"


_POLICY_COLUMNS = sql.SQL(", ").join(sql.Identifier(f) for f in Policy.__dataclass_fields__)


def list_policies(conn: PolicyConn, table: str | None = None) -> list[Policy]:
    """Policies, optionally only the one of ``table`` (any name regclass accepts)."""
    where = sql.SQL("WHERE relid = %s::regclass") if table is not None else sql.SQL("")
    query = sql.SQL("SELECT {} FROM ttl.policies {} ORDER BY schema_name, relname").format(_POLICY_COLUMNS, where)
    with conn.cursor(row_factory=class_row(Policy)) as cur:
        cur.execute(query, (table,) if table is not None else None)
        return cur.fetchall()


def describe(conn: PolicyConn, table: str) -> list[tuple[str, str | None]]:
    rows = conn.execute("SELECT option, value FROM ttl.describe(%s)", (table,)).fetchall()
    return [(str(o), None if v is None else str(v)) for o, v in rows]


def settings(conn: PolicyConn) -> dict[str, str]:
    return {str(k): str(v) for k, v in conn.execute("SELECT name, value FROM ttl.settings").fetchall()}
