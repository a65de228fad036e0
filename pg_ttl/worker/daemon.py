"""The worker process: one loop thread per database (``loop``), the main thread for signals and systemd.

Each database loop keeps one control connection: it LISTENs on ``pg_ttl``
(every policy change notifies it) as a wake-up hint, re-reads the catalog with
one query on a hint or every ``poll_interval``, runs due tables one at a time
through the engine, and otherwise sleeps until the next tick, poll, heartbeat
or lag measurement. An idle worker therefore costs about one query per poll
interval per database, whatever the number of tables.

Losing the server ends the session; the loop reconnects with capped
exponential backoff (with jitter, so many workers do not stampede). Any other
error (a lock, a timeout, a permission, bad data) is one table's failure: it
is logged and counted, and the loop goes on to the next table. On a
standby the loop only waits and logs: it never starts a run. SIGTERM/SIGINT
stop claiming new work; the engine finishes its current batch and commits;
the process exits 0 (1 if a run outlived ``shutdown_timeout``). SIGHUP re-reads
the configuration.

Modules, each using only those after it: ``daemon`` (this process) -> ``loop``
(a database's thread) -> ``rounds`` (catalog poll, runs through the engine) ->
``lag`` (expiration lag) -> ``session`` (connecting, lost sessions, waits,
heartbeats) -> ``shared`` (state they share).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

from pg_ttl import __version__
from pg_ttl.wakeup import Wakeup
from pg_ttl.worker import config as config_mod
from pg_ttl.worker.config import WorkerConfig
from pg_ttl.worker.logs import log
from pg_ttl.worker.logs import setup as setup_logging
from pg_ttl.worker.loop import DatabaseLoop
from pg_ttl.worker.metrics import WorkerMetrics
from pg_ttl.worker.schedule import Clock
from pg_ttl.worker.sdnotify import SystemdNotifier, watchdog_interval
from pg_ttl.worker.session import RoleRefused
from pg_ttl.worker.shared import Shared

if TYPE_CHECKING:
    from pg_ttl.expire.seam import OldestExpired, OpenEngine


def load_engine() -> tuple[OpenEngine, OldestExpired]:
    """The engine, imported when a worker starts (the CLI reports it missing)."""
    from pg_ttl.expire import Engine, oldest_expired

    return Engine, oldest_expired


class Worker:
    """The whole process: database loops, metrics server, signals, systemd."""

    def __init__(self, config: WorkerConfig, *, cli_overrides: dict[str, Any] | None = None, once: bool = False,
                 engine: OpenEngine | None = None, oldest_expired: OldestExpired | None = None,
                 notifier: SystemdNotifier | None = None) -> None:
        self.cli_overrides = dict(cli_overrides or {})
        self.logger = setup_logging(config.log_format, config.log_level)
        if engine is None or oldest_expired is None:
            loaded_engine, loaded_oldest = load_engine()
            engine = engine or loaded_engine
            oldest_expired = oldest_expired or loaded_oldest
        self._wake = Wakeup()
        self.shared = Shared(config=config, metrics=WorkerMetrics(config.name), logger=self.logger,
                             clock=Clock(config.clock_offset), engine=engine, oldest_expired=oldest_expired,
                             wake_main=self._wake, once=once)
        self.notifier = notifier or SystemdNotifier()
        self.loops: dict[str, DatabaseLoop] = {}
        self.shared.metrics.stalls.source = lambda: {n: lp.status.stalled_for() for n, lp in list(self.loops.items())}
        self._reload_requested = False
        self._stop_signalled = False
        self._signals = 0
        self.metrics_port: int | None = None

    # -- signals ------------------------------------------------------------------------
    def _on_stop(self, signum: int, _frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals > 1:
            # A second signal: the operator insists. Uncommitted work rolls back with the connection.
            os.write(2, b"pg-ttl worker: second signal, exiting now\n")
            os._exit(1)
        # Only a flag and a pipe write: a handler that took a lock (Event.set) could run while
        # the main thread holds that lock and hang the worker (wakeup.py). The main loop
        # stops the loops.
        self._stop_signalled = True
        self._wake.wake()

    def _on_hup(self, _signum: int, _frame: FrameType | None) -> None:
        self._reload_requested = True
        self._wake.wake()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)

    # -- lifecycle ----------------------------------------------------------------------
    def _start_loops(self) -> None:
        for db in self.shared.config.databases:
            if db.name not in self.loops:
                loop = DatabaseLoop(db, self.shared)
                self.loops[db.name] = loop
                loop.start()

    def reload(self) -> None:
        """SIGHUP: re-read the config file and environment; add/remove databases, apply intervals and logging."""
        self.notifier.reloading()
        old = self.shared.config
        try:
            new = config_mod.load({**self.cli_overrides, "name": old.name})
        except config_mod.ConfigError as exc:
            log(self.logger, logging.ERROR, "reload failed, keeping the old configuration", error=str(exc))
            self.notifier.ready()
            return
        setup_logging(new.log_format, new.log_level)
        if new.metrics_addr != old.metrics_addr:
            log(self.logger, logging.WARNING, "metrics_addr changes need a restart", metrics_addr=old.metrics_addr)
            new.metrics_addr = old.metrics_addr
        new.clock_offset = old.clock_offset
        self.shared.config = new
        wanted = {db.name: db for db in new.databases}
        for name, loop in list(self.loops.items()):
            if name not in wanted or wanted[name].dsn != loop.db.dsn:
                loop.retire.set()
                loop.wake()
                loop.join(new.shutdown_timeout)
                del self.loops[name]
                self.shared.metrics.forget_database(name)
        self._start_loops()
        for loop in self.loops.values():
            loop.reload = True
            loop.wake()
        log(self.logger, logging.INFO, "configuration reloaded", databases=",".join(sorted(wanted)),
            poll_interval=new.poll_interval)
        self.notifier.ready(self.status_text())

    def status_text(self) -> str:
        loops = list(self.loops.values())
        running = [f"{lp.db.name}/{lp.current}" for lp in loops if lp.current]
        if running:
            return "running " + ", ".join(running)
        tables = sum(len(lp.scheduler.entries) for lp in loops)
        states = sorted({lp.state for lp in loops})
        wakes = [w for lp in loops if (w := lp.next_wake_at) is not None]
        nxt = f"; next run {min(wakes).strftime('%Y-%m-%d %H:%M:%S')} UTC" if wakes else ""
        return f"{'/'.join(states) or 'idle'}: {tables} tables in {len(loops)} database(s){nxt}"

    def run(self) -> int:
        cfg = self.shared.config
        if cfg.metrics_host_port:
            host, port = cfg.metrics_host_port
            try:
                self.metrics_port = self.shared.metrics.serve(host, port)
            except OSError as exc:
                raise config_mod.ConfigError(f"cannot serve metrics on {cfg.metrics_addr}: "
                                             f"{exc.strerror or exc}") from None
        log(self.logger, logging.INFO, "worker starting", worker=cfg.name, version=__version__,
            databases=",".join(db.name for db in cfg.databases), metrics_port=self.metrics_port,
            poll_interval=cfg.poll_interval, config=cfg.config_path)
        self._start_loops()
        self.notifier.ready(self.status_text())
        watchdog = watchdog_interval()
        last_status = ""
        tick = min(watchdog or 5.0, 5.0)
        while not self.shared.stop.is_set() and not self._stop_signalled:
            if self.shared.once and all(not lp.is_alive() for lp in self.loops.values()):
                break
            self._wake.wait(0.2 if self.shared.once else tick)
            if self._stop_signalled:
                break
            if self._reload_requested:
                self._reload_requested = False
                self.reload()
            if watchdog and all(lp.is_alive() for lp in self.loops.values()):
                self.notifier.watchdog()
            text = self.status_text()
            if text != last_status:
                self.notifier.status(text)
                last_status = text
        return self._shutdown()

    def _shutdown(self) -> int:
        cfg = self.shared.config
        self.shared.stop.set()
        self.notifier.stopping("stopping: finishing the current batch")
        log(self.logger, logging.INFO, "worker stopping", timeout=cfg.shutdown_timeout)
        deadline = time.monotonic() + cfg.shutdown_timeout
        for loop in self.loops.values():
            loop.wake()
        stuck = []
        for loop in self.loops.values():
            loop.join(max(0.0, deadline - time.monotonic()))
            if loop.is_alive():
                stuck.append(loop.db.name)
        self.shared.metrics.shutdown()
        if stuck:
            log(self.logger, logging.ERROR, "runs did not finish within shutdown_timeout; exiting anyway "
                "(uncommitted batches roll back)", databases=",".join(stuck))
            return 1
        refused = next((lp.exit_error for lp in self.loops.values() if isinstance(lp.exit_error, RoleRefused)),
                       None)
        if refused is not None:
            raise refused
        errors = [lp for lp in self.loops.values() if lp.exit_error is not None]
        failed = sum(lp.failed_runs for lp in self.loops.values())
        log(self.logger, logging.INFO, "worker stopped", **({"failed_runs": failed} if failed else {}))
        if not self.shared.once:
            return 0
        # --once: 2 when a database could not be served, 1 when some table's run failed (the others ran).
        return 2 if errors else 1 if failed else 0


__all__ = ["DatabaseLoop", "RoleRefused", "Shared", "Worker", "load_engine"]
