"""What the worker's parts share: the process-wide ``Shared`` and each database loop's ``LoopState``.

The bottom of the worker's modules: ``daemon`` (the process) -> ``loop`` (a database's
thread) -> ``rounds`` (scheduling and runs) -> ``lag`` -> ``session`` -> here. Each
reads and writes the state below it, never a module above.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pg_ttl.wakeup import Wakeup
from pg_ttl.worker.config import DatabaseConfig, WorkerConfig
from pg_ttl.worker.logs import log
from pg_ttl.worker.metrics import WorkerMetrics
from pg_ttl.worker.schedule import Clock

if TYPE_CHECKING:
    from pg_ttl.expire.seam import OldestExpired, OpenEngine


@dataclass
class Shared:
    """What every database loop shares with the main thread."""

    config: WorkerConfig
    metrics: WorkerMetrics
    logger: logging.Logger
    clock: Clock
    engine: OpenEngine
    oldest_expired: OldestExpired
    stop: threading.Event = field(default_factory=threading.Event)
    wake_main: Wakeup = field(default_factory=Wakeup)  # the main thread has news to act on
    once: bool = False


@dataclass
class LoopState:
    """One database loop: what it is doing, as the main thread (systemd status) reads it."""

    db: DatabaseConfig
    shared: Shared
    retire: threading.Event = field(default_factory=threading.Event)  # this database left the config (SIGHUP)
    state: str = "starting"
    current: str | None = None  # the table being run
    standby: bool = False
    last_activity: float = field(default_factory=time.monotonic)  # monotonic: the last sign of progress
    waiting: bool = False  # asleep until its next poll, run or retry: not stuck, however long
    next_wake_at: datetime | None = None
    failed_runs: int = 0  # runs that failed (the loop went on to the next table)
    skipped: dict[str, str] = field(default_factory=dict)  # tables this worker cannot act on -> why
    pace: str | None = None  # the adaptive throttle's pace as the latest run ended (pg_ttl/expire/pace.py)

    def stop_requested(self) -> bool:
        return self.shared.stop.is_set() or self.retire.is_set()

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def stalled_for(self) -> float:
        """Seconds since the loop last showed progress (a batch, a unit, a run, a pass of its
        loop) while not asleep by design; 0 while asleep."""
        return 0.0 if self.waiting else max(0.0, time.monotonic() - self.last_activity)

    def log(self, level: int, msg: str, **fields: object) -> None:
        log(self.shared.logger, level, msg, db=self.db.name, **fields)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
