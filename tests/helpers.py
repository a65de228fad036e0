"""Small helpers shared by tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from pg_ttl.expire import expire
from pg_ttl.expire.context import NullProgress
from pg_ttl.localserver import LocalServer
from tests.worker_proc import wait_until

ENGINE_SESSIONS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl engine'"


def catalog_state(conn: psycopg.Connection[Any]) -> tuple[list[Any], list[Any]]:
    """Every catalog row, to assert that a refused call changed nothing."""
    policies = conn.execute("SELECT * FROM ttl.policy ORDER BY relid").fetchall()
    columns = conn.execute("SELECT * FROM ttl.column_policy ORDER BY relid, attnum").fetchall()
    return policies, columns


def wait_for_engine_lock_wait(db: psycopg.Connection[Any], statement: str, seconds: float = 30) -> None:
    """Until the engine's session waits on a lock in a statement starting with ``statement``
    (e.g. 'DELETE', 'DROP TABLE'), or with it inside a WITH (a unit's last range is deleted and
    counted by one WITH statement); fails if it never does."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        waiting = db.execute(ENGINE_SESSIONS + " AND wait_event_type = 'Lock' AND (query LIKE %s OR query LIKE %s)",
                             (statement + "%", "WITH % AS (" + statement + "%")).fetchone()
        db.commit()
        if waiting and waiting[0]:
            return
        time.sleep(0.02)
    raise AssertionError(f"the engine never reached its {statement}")


def wait_for_engine_gone(db: psycopg.Connection[Any], seconds: float = 10) -> None:
    """Until the server has ended the engine's session (after its process was killed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        gone = db.execute(ENGINE_SESSIONS).fetchone()
        db.commit()
        if gone == (0,):
            return
        time.sleep(0.05)


@contextmanager
def engine_killed_at(db: psycopg.Connection[Any], dsn: str, table: str, statement: str,
                     release: Callable[[], None]) -> Iterator[None]:
    """``pg-ttl run TABLE`` in a process of its own, until its session waits on a lock in a
    statement starting with ``statement`` (held by the caller); the body runs then; then
    the process is killed (kill -9), ``release`` frees the lock, and the server ends the
    engine's session."""
    proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "run", table, "--quiet", "--dsn", dsn],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"})
    try:
        wait_for_engine_lock_wait(db, statement)
        yield
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        release()
    wait_for_engine_gone(db)


def ttl_table(conn: psycopg.Connection[Any], name: str, expired: int = 20, live: int = 5) -> None:
    """Table ``name`` (may be schema-qualified) with ``expired`` rows 3 days old and ``live`` new ones,
    under a 1-day TTL on created_at."""
    from psycopg import sql

    ident = sql.Identifier(*name.split("."))
    conn.execute(sql.SQL("CREATE TABLE {} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)").format(ident))
    conn.execute(sql.SQL("INSERT INTO {} (created_at) SELECT now() - interval '3 days' "
                         "FROM generate_series(1, %s)").format(ident), (expired,))
    conn.execute(sql.SQL("INSERT INTO {} (created_at) SELECT now() FROM generate_series(1, %s)").format(ident),
                 (live,))
    conn.execute("SELECT ttl.enable(%s::regclass, expire_after => '1 day', column_name => 'created_at')", (name,))


def standby_of(primary: LocalServer) -> LocalServer:
    """A hot standby of ``primary``, streaming from it (pg_basebackup -R), started."""
    base = Path(tempfile.mkdtemp(prefix="pg_ttl-standby-"))
    standby = LocalServer(bindir=primary.bindir, base_dir=base, run_as=primary.run_as)
    standby._owns_dir = True  # its cleanup() removes the directory made here too
    base.chmod(0o755)
    standby.sockdir.mkdir()
    for path in (base, standby.sockdir):
        standby._chown(path)
    cmd = standby._cmd(str(primary.bindir / "pg_basebackup"), "-D", str(standby.datadir), "-R", "-X", "stream",
                       "--checkpoint=fast", "-h", "127.0.0.1", "-p", str(primary.port), "-U", primary.superuser)
    subprocess.run(cmd, check=True, capture_output=True)
    standby.settings = {"hot_standby": "on", "log_statement": "none"}
    standby.start()
    return standby


class StopAfter(NullProgress):
    """Sets ``stop`` after ``n`` committed ranges, like SIGTERM in the worker."""

    def __init__(self, stop: threading.Event, n: int) -> None:
        self.stop, self.n, self.seen = stop, n, 0

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        self.seen += 1
        if self.seen >= self.n:
            self.stop.set()


class Together(NullProgress):
    """Holds each run after its first committed range until every run sharing ``barrier``
    got that far: runs started together overlap."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier, self.first = barrier, True

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        if self.first:
            self.first = False
            self.barrier.wait()


def call_killed_after(db: psycopg.Connection[Any], caller: psycopg.Connection[Any], statement: str,
                      deleted: int) -> None:
    """``statement`` (a CALL) run by ``caller`` in a thread, its session terminated once the
    run's units have deleted ``deleted`` rows (between two of its transactions, as a restart
    or pg_terminate_backend does)."""
    pid = caller.info.backend_pid
    done = threading.Event()

    def call() -> None:
        with contextlib.suppress(psycopg.OperationalError):
            caller.execute(statement)  # type: ignore[arg-type]  # the tests' own constants
        done.set()

    thread = threading.Thread(target=call)
    thread.start()
    wait_until(lambda: (db.execute("SELECT coalesce(sum(rows_deleted), 0) FROM ttl.run_unit").fetchone()
                        or [0])[0] >= deleted, timeout=20)
    db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    db.commit()
    assert done.wait(10)
    thread.join()


def checkpointed_table(db: psycopg.Connection[Any], dsn: str) -> None:
    """Table t of 20,000 expired rows, swept in block ranges, whose first run stopped after
    two transactions: a checkpoint for the next run to take over (lock_timeout 200ms)."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz)")
    db.execute("INSERT INTO t SELECT g, '2020-01-01' FROM generate_series(1, 20000) g")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v', delete_batch_size => 500)")
    db.execute("UPDATE ttl.settings SET value = 'ctid' WHERE name = 'row_strategy'")
    db.execute("UPDATE ttl.settings SET value = '200ms' WHERE name = 'lock_timeout'")
    db.execute("ANALYZE t")
    db.commit()
    stop = threading.Event()
    [first] = expire(dsn, ["t"], stop=stop, progress=StopAfter(stop, 2))
    assert first.status == "partial"


class AfterFirstBatch(NullProgress):
    """Runs ``action`` after the pass's first committed DELETE (between two of its statements)."""

    def __init__(self, action: Any) -> None:
        self.action, self.done = action, False

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        if not self.done:
            self.done = True
            self.action()
