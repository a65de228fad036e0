"""One database's thread: keeps a control session (reconnecting with backoff when it is lost),
polls the catalog on a NOTIFY hint or every ``poll_interval``, runs due tables one at a time,
and otherwise sleeps until the next tick, poll, heartbeat or lag measurement."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from datetime import datetime

import psycopg

from pg_ttl.wakeup import Wakeup
from pg_ttl.worker.config import DatabaseConfig
from pg_ttl.worker.lag import LagMeter
from pg_ttl.worker.rounds import Rounds
from pg_ttl.worker.schedule import Entry, Scheduler
from pg_ttl.worker.session import (
    CHANNEL,
    Conn,
    Heartbeat,
    NotInstalled,
    RoleRefused,
    backoff_delay,
    connect,
    connection_lost,
    drain,
    sleep,
)
from pg_ttl.worker.shared import LoopState, Shared, one_line


class DatabaseLoop(threading.Thread):
    """Schedules and runs the TTL tables of one database."""

    def __init__(self, db: DatabaseConfig, shared: Shared) -> None:
        super().__init__(name=f"pg-ttl-{db.name}", daemon=True)
        self.db = db
        self.shared = shared
        self.status = LoopState(db, shared)
        self.scheduler = Scheduler()
        self.lag = LagMeter(self.status, self.scheduler)
        self.rounds = Rounds(self.status, self.scheduler, self.lag)
        self.heartbeat = Heartbeat(self.status)
        self.wakeup = Wakeup()
        self.conn: Conn | None = None
        self.exit_error: BaseException | None = None
        self._next_poll = 0.0
        self._pending: deque[tuple[Entry, datetime]] = deque()  # due tables of this pass, in order
        self._next_heartbeat = 0.0
        self.reload = True  # re-read the catalog at the next turn
        self._connected = False

    # -- what the main thread reads and asks ------------------------------------------
    @property
    def retire(self) -> threading.Event:
        """Set: this database left the config (SIGHUP)."""
        return self.status.retire

    @property
    def state(self) -> str:
        return self.status.state

    @property
    def current(self) -> str | None:
        return self.status.current

    @property
    def next_wake_at(self) -> datetime | None:
        return self.status.next_wake_at

    @property
    def failed_runs(self) -> int:
        return self.status.failed_runs

    def wake(self) -> None:
        self.wakeup.wake()

    def stop_requested(self) -> bool:
        return self.status.stop_requested()

    def _wait(self, conn: Conn | None, seconds: float) -> bool:
        """The loop's sleep (session.sleep), marked as such for pg_ttl_loop_stalled_seconds."""
        self.status.waiting = True
        try:
            return sleep(self.wakeup, conn, seconds)
        finally:
            self.status.waiting = False
            self.status.touch()

    def _set_up(self, value: int) -> None:
        # A loop retired by a reload may end after its successor (same name, new DSN)
        # has connected, or after the database's series were removed: it reports nothing.
        if not self.retire.is_set():
            self.shared.metrics.up.labels(self.db.name).set(value)

    # -- the thread ---------------------------------------------------------------
    def run(self) -> None:
        attempt = 0
        metrics = self.shared.metrics
        try:
            while not self.stop_requested():
                try:
                    self._connected = False
                    if self._session():
                        return
                except RoleRefused as exc:
                    # Not a passing condition: retrying would only repeat it. Stop the whole worker.
                    self.exit_error = exc
                    self.shared.stop.set()
                    self.shared.wake_main.wake()
                    return
                except Exception as exc:
                    self._set_up(0)
                    if self.stop_requested():
                        return
                    lost = isinstance(exc, NotInstalled) or connection_lost(exc)
                    # A session that got going resets the backoff; repeated failures double it.
                    attempt = 1 if self._connected and lost else attempt + 1
                    self.status.state = "reconnecting"
                    delay = backoff_delay(attempt, self.shared.config.min_backoff, self.shared.config.max_backoff)
                    if lost:
                        metrics.reconnects.labels(self.db.name).inc()
                        self.status.log(logging.WARNING, "database unavailable", error=one_line(exc),
                                        attempt=attempt, retry_in=delay)
                    elif isinstance(exc, psycopg.Error):  # the server refused something outside a run
                        self.status.log(logging.ERROR, "worker loop error", error=one_line(exc), retry_in=delay)
                    else:  # a bug or an unexpected answer: keep the traceback
                        self.shared.logger.exception("worker loop error", extra={"fields": {
                            "db": self.db.name, "error": one_line(exc), "retry_in": round(delay, 3)}})
                    if self.shared.once:
                        self.exit_error = exc
                        return
                    self._wait(None, delay)
        finally:
            self.status.state = "stopped"
            self._set_up(0)
            self.wakeup.close()

    # -- one connected session ----------------------------------------------------
    def _session(self) -> bool:
        """Serve until stop (True) or until the connection fails (raises)."""
        cfg = self.shared.config
        loop = self.status
        with connect(loop) as conn, contextlib.closing(self.rounds):
            self.conn = conn
            loop.state = "connected"
            self._set_up(1)
            listening = False
            self.reload = True
            self._next_poll = 0.0
            self._next_heartbeat = 0.0
            self._connected = True
            while not self.stop_requested():
                loop.touch()
                mono = time.monotonic()
                if self.reload or mono >= self._next_poll:
                    # (with the schema's revision: an upgrade while we run stops us until the
                    # matching worker runs; session.check_schema)
                    self.rounds.load_catalog(conn)
                    self._pending.clear()  # listed again from the fresh catalog
                    self.reload = False
                    self._next_poll = mono + cfg.poll_interval
                    if not loop.standby and not listening:
                        conn.execute("LISTEN " + CHANNEL)  # constant channel name, no user input
                        listening = True
                        self.rounds.load_catalog(conn)  # changes made before LISTEN took effect
                if mono >= self._next_heartbeat and not loop.standby:
                    self.heartbeat(conn, "running", len(self.scheduler.entries))
                    self._next_heartbeat = mono + cfg.heartbeat_interval
                if loop.standby:
                    loop.state = "standby"
                    if self.shared.once:
                        return True
                    self._wait(conn, cfg.poll_interval)
                    continue
                now = self.shared.clock.now()
                # The due tables are listed once per pass and run in order (listing them again
                # after each run would cost O(tables) per table); a catalog reload lists afresh.
                while self._pending and not self.scheduler.still_due(*self._pending[0], now):
                    self._pending.popleft()
                if not self._pending:
                    self._pending = deque(self.scheduler.due(now))
                if self._pending:
                    entry, tick = self._pending.popleft()
                    self.rounds.run_table(conn, entry, tick)
                    self.reload = drain(conn) or self.reload
                    continue
                if self.shared.once:
                    self.heartbeat(conn, "stopped", len(self.scheduler.entries))
                    return True
                self.lag.refresh(conn)
                loop.state = "idle"
                loop.current = None
                wake_at = self.scheduler.next_wake(now)
                loop.next_wake_at = wake_at
                timeout = self._next_poll - time.monotonic()
                if wake_at is not None:
                    timeout = min(timeout, (wake_at - self.shared.clock.now()).total_seconds())
                timeout = min(timeout, self._next_heartbeat - time.monotonic())
                if self.lag.pending():
                    timeout = min(timeout, self.lag.next_at - time.monotonic())
                if self._wait(conn, max(timeout, 0.0) + 0.001):
                    self.reload = True
            self.heartbeat(conn, "stopped", len(self.scheduler.entries))
            return True
