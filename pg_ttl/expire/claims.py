"""Claims: one session advisory lock per unit (a partition's or table's oid).

Session locks vanish with the connection, so a killed run frees its units at
once; a concurrent run skips the units it cannot claim instead of waiting.
"""

from __future__ import annotations

from typing import Any

import psycopg

# High 32 bits of every key, so our locks do not collide with an application's.
NAMESPACE = 0x7474_6C00  # "ttl\0"


def key(relid: int) -> int:
    return (NAMESPACE << 32) | (relid & 0xFFFF_FFFF)


def try_claim(conn: psycopg.Connection[Any], relid: int) -> bool:
    row = conn.execute("SELECT pg_catalog.pg_try_advisory_lock(%s::int8)", (key(relid),)).fetchone()
    return bool(row and row[0])


def release(conn: psycopg.Connection[Any], relid: int) -> None:
    conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s::int8)", (key(relid),))
