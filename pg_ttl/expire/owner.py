"""Acting as a table's owner.

A table's owner writes its expiration expression, its triggers and its column
defaults; the engine, ``plan`` and the lag metric run that SQL as the owner
(``SET ROLE``), never with their own rights: a worker connected as a
privileged role must not lend those privileges to every table owner. The
caller's session role must be a member of the owner's role.
"""

from __future__ import annotations

from typing import Any

import psycopg

# The engine session's own search_path, between tables (each table's run uses the table's).
SEARCH_PATH = "pg_catalog, pg_temp"


class NotOwner(Exception):
    """The session may not act as the table's owner."""


def can_act_as(conn: psycopg.Connection[Any], owner: str) -> bool:
    # SET ROLE is allowed to members of the role, checked against the session user.
    row = conn.execute("SELECT pg_catalog.pg_has_role(session_user, %s, 'MEMBER')", (owner,)).fetchone()
    return bool(row and row[0])


def become(conn: psycopg.Connection[Any], owner: str, table: str, *, local: bool) -> None:
    """Take ``owner``'s role, for the transaction (``local``) or the session; one round trip."""
    # SET ROLE is allowed to members of the role, checked against the session user.
    row = conn.execute("SELECT CASE WHEN pg_catalog.pg_has_role(session_user, %s, 'MEMBER') "
                       "THEN pg_catalog.set_config('role', %s, %s) END", (owner, owner, local)).fetchone()
    if row is None or row[0] is None:
        raise NotOwner(not_member(owner, table))


def not_member(owner: str, table: str) -> str:
    """Why the session may not act as ``owner``, and the GRANT that fixes it."""
    return (f'cannot act as "{owner}", the owner of table {table}: the role this runs as is not a '
            f'member of it (GRANT "{owner}" TO the worker\'s role, or run as the owner)')


def restore(conn: psycopg.Connection[Any], *, local: bool, search_path: str | None = None) -> None:
    """Back to the session's own role (and to ``search_path``, when given, in the same round trip)."""
    if conn.broken:
        return
    if search_path is None:
        conn.execute("SELECT pg_catalog.set_config('role', 'none', %s)", (local,))
    else:
        conn.execute("SELECT pg_catalog.set_config('role', 'none', %s), pg_catalog.set_config('search_path', %s, %s)",
                     (local, search_path, local))
