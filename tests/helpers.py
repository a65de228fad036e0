"""Small helpers shared by tests."""

from __future__ import annotations

from typing import Any

import psycopg


def catalog_state(conn: psycopg.Connection[Any]) -> tuple[list[Any], list[Any]]:
    """Every catalog row, to assert that a refused call changed nothing."""
    policies = conn.execute("SELECT * FROM ttl.policy ORDER BY relid").fetchall()
    columns = conn.execute("SELECT * FROM ttl.column_policy ORDER BY relid, attnum").fetchall()
    return policies, columns
