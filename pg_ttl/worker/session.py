"""A database loop's session: connecting (and what is refused), telling a lost session from
one statement's failure, reconnect backoff, waiting for a NOTIFY or a wake-up, heartbeats."""

from __future__ import annotations

import logging
import os
import random
import socket

import psycopg
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from pg_ttl import __version__
from pg_ttl.wakeup import Wakeup
from pg_ttl.worker import config as config_mod
from pg_ttl.worker.shared import LoopState, one_line

Conn = psycopg.Connection[TupleRow]

CHANNEL = "pg_ttl"
IS_INSTALLED = "SELECT pg_catalog.to_regclass('ttl.worker_schedule') IS NOT NULL AND " \
               "pg_catalog.to_regclass('ttl.run') IS NOT NULL"
HEARTBEAT = "SELECT ttl.worker_heartbeat(%s, %s, %s, %s, %s, %s, %s, %s)"
# The first role this session is, or can act as, that is a superuser or has
# BYPASSRLS: its own (current_user, or session_user if it differs) first.
# pg_has_role(..., 'MEMBER') is true where SET ROLE would work.
PRIVILEGED_ROLE = """
SELECT r.rolname, r.rolsuper, r.rolname IN (current_user, session_user) AS own, current_user
  FROM pg_catalog.pg_roles r
 WHERE (r.rolsuper OR r.rolbypassrls)
   AND (r.rolname IN (current_user, session_user)
        OR pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
        OR pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER'))
 ORDER BY own DESC, r.rolsuper DESC, r.rolname
 LIMIT 1
"""
# SQLSTATEs (besides class 08, connection exception) after which the server
# has ended or refuses the session: admin_shutdown, crash_shutdown, cannot_connect_now.
SESSION_ENDED = frozenset({"57P01", "57P02", "57P03"})


class NotInstalled(Exception):
    """The database has no (or an older) pg_ttl schema: wait and retry, like a lost connection."""


class RoleRefused(Exception):
    """The worker connected as (or can act as) a superuser or BYPASSRLS role and was not allowed to."""


def connection_lost(exc: BaseException, conn: Conn | None = None) -> bool:
    """True when ``exc`` means the session is gone and must be opened again; False when it is one
    statement's failure (a lock or statement timeout, a permission, a missing object, bad data) that
    leaves the session usable. psycopg files many of the latter under OperationalError, so the class
    alone cannot tell."""
    if conn is not None and conn.broken:
        return True
    if isinstance(exc, psycopg.InterfaceError):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate
    if state is None:
        # No SQLSTATE: libpq's own error (connection refused, closed, reset), not the server's answer.
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith("08") or state in SESSION_ENDED


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Capped exponential backoff with full jitter in the upper half: base*2^(n-1), at most cap."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return float(ceiling * (0.5 + 0.5 * (rng or random).random()))


def connect(loop: LoopState) -> Conn:
    """The loop's control session, checked: not a refused role, pg_ttl installed, in the version we run."""
    conn = psycopg.connect(loop.db.connect_dsn, autocommit=True, application_name="pg-ttl worker",
                           connect_timeout=10)
    try:
        check_role(loop, conn)
        row = conn.execute(IS_INSTALLED).fetchone()
        if not row or not row[0]:
            raise NotInstalled("pg_ttl (with its worker and engine tables) is not installed in this database; "
                               "run: pg-ttl install")
        check_schema(conn)
    except BaseException:
        conn.close()
        raise
    loop.log(logging.INFO, "connected", dsn=config_mod.redact(loop.db.dsn))
    return conn


def check_schema(conn: Conn) -> None:
    """An upgrade while we run: wait for the matching worker."""
    from pg_ttl.install import schema_problem

    problem = schema_problem(conn)
    if problem is not None:
        raise NotInstalled(problem)


def check_role(loop: LoopState, conn: Conn) -> None:
    """Refuse a superuser or BYPASSRLS role unless allow_superuser: with those rights the engine
    would run table owners' code unchecked, and row security would not guard the run history."""
    row = conn.execute(PRIVILEGED_ROLE).fetchone()
    if row is None:
        return
    role, superuser, own, current = row
    kind = "a superuser" if superuser else "a role with BYPASSRLS"
    what = (f'connected as role "{role}", {kind}' if own
            else f'role "{current}" is a member of "{role}", {kind}, and can act as it')
    if loop.shared.config.allow_superuser:
        loop.log(logging.WARNING, "running with superuser or BYPASSRLS rights (allow_superuser is set)", role=role)
        return
    raise RoleRefused(
        f"database {loop.db.name}: {what}; refusing to run: the engine would run table owners' code "
        "(triggers, defaults, expressions) with those rights and row security would not guard the run "
        "history. Connect as a dedicated role (LOGIN NOSUPERUSER NOBYPASSRLS, a member of each TTL "
        "table's owner role; see docs/worker.md), or pass --allow-superuser "
        "(allow_superuser = true in the config file) to run anyway")


class Heartbeat:
    """``ttl.worker``'s row of this worker, for ``pg-ttl status``; a refused one is logged once."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop
        self._error: str | None = None  # the problem last logged

    def __call__(self, conn: Conn, state: str, tables: int) -> None:
        if self.loop.standby:
            return
        try:
            conn.execute(HEARTBEAT, (self.loop.shared.config.name, socket.gethostname(), os.getpid(), __version__,
                                     state, tables, Jsonb(self.loop.skipped), self.loop.pace))
        except psycopg.Error as exc:
            # The heartbeat only informs `pg-ttl status`: a refused one must not stop the expiry.
            if connection_lost(exc, conn):
                raise
            if self._error != one_line(exc):
                self._error = one_line(exc)
                self.loop.log(logging.WARNING, "heartbeat not recorded", error=self._error)
            return
        self._error = None


def sleep(wakeup: Wakeup, conn: Conn | None, seconds: float) -> bool:
    """Sleep up to ``seconds``; True if a NOTIFY arrived on ``conn``. Returns early on
    ``wakeup.wake()``."""
    if conn is not None and drain(conn):
        return True
    wakeup.wait(seconds, None if conn is None else conn.fileno())
    return conn is not None and drain(conn)


def drain(conn: Conn) -> bool:
    """Consume pending notifications; True if another session sent one. Our own (the
    'run' notice worker_begin_run sends to wake the other workers) must not make us
    re-read the catalog after every table we run."""
    got = False
    for n in conn.notifies(timeout=0):
        got = got or n.pid != conn.info.backend_pid
    return got
