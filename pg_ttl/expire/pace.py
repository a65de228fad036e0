"""The adaptive throttle: how fast the engine works, judged from how the other sessions fare.

While the engine works, a sampler (a thread with its own connection) reads
``pg_stat_activity`` every ``SAMPLE_SECONDS``: for each other client session,
its last statement's server time (``state_change - query_start``), or for a
statement seen running that ended between two samples, how long it was seen
running. Statements that started while the engine was working are
compared with those that started while it rested (between its transactions,
or before it began): when the working ones are more than ``throttle_target``
times slower (90th percentile), the engine works less of the time; while they
are not, it works more (additive increase, multiplicative decrease, decided
every ``DECIDE_SECONDS``). The pace is a duty cycle: after a transaction that
took t seconds, the engine rests t * (1 / duty - 1), never inside a
transaction. With no other session at work the duty is 1: full speed. A
replica that has more than ``throttle_replica_lag`` of WAL left to replay
(``pg_stat_replication``) lowers the duty too, whatever the sessions show.

Seeing other roles' sessions takes ``pg_read_all_stats`` (or superuser): a role
without it sees only its own, and the pace says so (``blind``). The
policies' ``delete_rate_limit`` still caps the rate on top of this.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import psycopg

from pg_ttl.expire.results import error_text
from pg_ttl.wakeup import StopRequest

# Other sessions' statements that finished, and sessions this role cannot see. Sessions of
# pg_ttl itself (other workers, the engine, this sampler) are not the foreground.
SAMPLE = """
SELECT pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()),
       pg_catalog.array_agg(a.pid) FILTER (WHERE a.state IN ('idle', 'idle in transaction', 'active')),
       pg_catalog.array_agg(pg_catalog.date_part('epoch', a.query_start))
                 FILTER (WHERE a.state IN ('idle', 'idle in transaction', 'active')),
       pg_catalog.array_agg(pg_catalog.date_part('epoch', CASE WHEN a.state = 'active'
                                                              THEN pg_catalog.clock_timestamp() - a.query_start
                                                              ELSE a.state_change - a.query_start END))
                 FILTER (WHERE a.state IN ('idle', 'idle in transaction', 'active')),
       pg_catalog.array_agg(a.state = 'active') FILTER (WHERE a.state IN ('idle', 'idle in transaction', 'active')),
       -- sessions in a database this role may not see (their state, and backend_type, read NULL)
       pg_catalog.count(*) FILTER (WHERE a.state IS NULL AND a.datid IS NOT NULL)::int,
       -- WAL the slowest replica has yet to replay (NULL: none, or not visible to this role)
       (SELECT pg_catalog.max(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), r.replay_lsn))::int8
          FROM pg_catalog.pg_stat_replication r)
  FROM pg_catalog.pg_stat_activity a
 WHERE (a.backend_type = 'client backend' OR a.backend_type IS NULL)
   AND a.pid <> pg_catalog.pg_backend_pid() AND a.pid <> %s
   AND a.application_name NOT LIKE 'pg-ttl%%'
"""

SAMPLE_SECONDS = 0.02
WARMUP_SECONDS = 0.1  # a unit paced (and sampled) once it has worked this long, unless big
# A unit whose expired rows, at the pace of its first PROJECT_AFTER_ROWS or more, will take
# this long opens its sampler then (prepare): its first sample is in as the pace begins.
# (A first window of 1,000 rows is mostly fixed cost: its pace alone would say "long".)
PROJECTED_SECONDS = 2 * WARMUP_SECONDS
PROJECT_AFTER_ROWS = 4000
FRESH_SAMPLE_SECONDS = 0.2  # a big unit waits this long at most for a sample of the sessions now
BUSY_SECONDS = 0.1
RETRY_SECONDS = 10.0  # a sampler that failed is opened again after this long
DECIDE_SECONDS = 0.1
MIN_DUTY = 0.02
START_DUTY = 0.1  # when other sessions are busy as the engine starts: start gently, speed up
INCREASE = 0.02  # duty added per decision while the others are fine
DECREASE = 0.5  # duty multiplied by this when they are not
MAX_REST = 1.0  # seconds: the longest rest after one transaction
MIN_STATEMENTS = 20  # statements needed on each side to judge
BASELINE_SECONDS = 30.0  # how long a rest observation counts in the baseline
BASELINE_SIZE = 500
# Below this many seconds (0.05 ms) a statement's time is noise: the ratio is taken above it.
FLOOR = 0.00005


REASONS = ("off", "idle", "healthy", "throttled", "replica_lag", "measuring", "blind", "unmeasured")


@dataclass(frozen=True)
class PaceState:
    """The current pace: ``duty`` (share of the time the engine works, 0-1) and why."""

    duty: float
    reason: str  # one of REASONS
    slowdown: float | None = None  # the others' p90 while working / while resting, last measured
    detail: str | None = None
    replica_lag: int | None = None  # bytes of WAL the slowest replica has yet to replay, last read

    def describe(self) -> str:
        text = {"off": "full speed: the throttle is off",
                "idle": "full speed: no other session at work",
                "healthy": "other sessions unaffected",
                "throttled": "throttled: other sessions slower while expiring",
                "replica_lag": "throttled: a replica is behind",
                "measuring": "measuring the other sessions' latency",
                "blind": "full speed: other roles' sessions are not visible (grant pg_read_all_stats)",
                "unmeasured": "full speed: the throttle cannot sample"}[self.reason]
        if self.slowdown is not None and self.reason in ("healthy", "throttled"):
            text += f" ({self.slowdown:.1f}x)"
        if self.replica_lag is not None and self.reason == "replica_lag":
            text += f" ({_size(self.replica_lag)} of WAL to replay)"
        if self.detail:
            text += f": {self.detail}"
        return f"{self.duty:.0%} ({text})"


def _size(n: int) -> str:
    for unit in ("bytes", "kB", "MB", "GB"):
        if n < 10240 or unit == "GB":
            return f"{n} {unit}"
        n //= 1024
    return f"{n} GB"


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]


class Controller:
    """The duty cycle, from the other sessions' statement times (no I/O: tests feed it)."""

    def __init__(self, target: float = 1.25) -> None:
        self.target = target
        self.replica_lag: int | None = None  # bytes the slowest replica has yet to replay
        self.replica_lag_limit: int | None = None  # above it, slow down whatever the sessions show
        self.duty = 1.0
        self.reason = "idle"
        self.slowdown: float | None = None
        self.baseline: deque[tuple[float, float]] = deque(maxlen=BASELINE_SIZE)  # (when, seconds)
        self.working: list[float] = []
        self.slowed_down = 0  # decisions that lowered the duty

    def start(self, others_active: bool) -> None:
        """The engine starts working: gently when other sessions are at work."""
        if others_active and self.duty > START_DUTY:
            self.duty, self.reason = START_DUTY, "measuring"

    def observe(self, when: float, seconds: float, during_work: bool) -> None:
        if during_work:
            self.working.append(seconds)
        else:
            self.baseline.append((when, seconds))

    def decide(self, now: float, blind: bool = False) -> None:
        """One decision from what was observed since the last one."""
        while self.baseline and self.baseline[0][0] < now - BASELINE_SECONDS:
            self.baseline.popleft()
        if self.replica_lag is not None and self.replica_lag_limit is not None \
                and self.replica_lag > self.replica_lag_limit:
            self._slow_down("replica_lag")  # less WAL, whatever the sessions here show
            return
        working, self.working = self.working, []
        if len(working) < MIN_STATEMENTS:
            if not working and not self.baseline:  # nobody else at work
                self.duty, self.reason = 1.0, ("blind" if blind else "idle")
            elif not working:  # others were at work before; none while this engine worked
                self._speed_up("healthy" if self.duty + INCREASE < 1.0 else "idle")
            else:
                self.working = working  # too few to judge: keep them for the next decision
            return
        if len(self.baseline) < MIN_STATEMENTS:  # no reference yet: rest to take one
            self.duty, self.reason = min(self.duty, 0.5), "measuring"
            self.working = working
            return
        rested = _p90([s for _, s in self.baseline])
        self.slowdown = max(_p90(working), FLOOR) / max(rested, FLOOR)
        if self.slowdown > self.target:
            self._slow_down("throttled")
        else:
            self._speed_up("healthy")

    def _slow_down(self, reason: str) -> None:
        self.duty, self.reason = max(MIN_DUTY, self.duty * DECREASE), reason
        self.slowed_down += 1

    def _speed_up(self, reason: str) -> None:
        self.duty, self.reason = min(1.0, self.duty + INCREASE), reason

    def rest_after(self, worked: float) -> float:
        """Seconds to rest after ``worked`` seconds of work."""
        if self.duty >= 1.0:
            return 0.0
        return min(MAX_REST, worked * (1.0 / self.duty - 1.0))

    def state(self) -> PaceState:
        return PaceState(self.duty, self.reason, self.slowdown, replica_lag=self.replica_lag)


class Pace:
    """One engine session's throttle: the sampler thread, the controller, the rests.

    The engine calls ``unit_started`` and ``unit_ended`` around each unit of work and
    ``between_transactions`` after each commit; the sampler runs only while the engine
    works (an idle worker costs no statement)."""

    def __init__(self, dsn: str, engine_pid: int, *, enabled: bool = True, target: float = 1.5,
                 stop: StopRequest | None = None) -> None:
        self._dsn = dsn
        self._engine_pid = engine_pid
        self.enabled = enabled
        self.controller = Controller(target)
        self._lock = threading.Lock()
        self._seen: dict[int, float] = {}  # pid -> query_start of its last statement counted
        self._running: dict[int, tuple[float, float]] = {}  # pid -> (query_start, seconds so far)
        self._observed: list[tuple[float, float]] = []  # (local start, seconds), for the engine thread
        self._work: deque[tuple[float, float]] = deque(maxlen=4096)  # (start, end) of work, local clock
        self._working_since: float | None = None
        self._unit_started = 0.0
        self._expected: int | None = None  # rows the unit is expected to delete (prepare), until judged
        self._prepared_at = 0.0
        self._done = 0  # rows committed since prepare
        self._busy_sessions = 0  # other sessions with a statement in the last BUSY_SECONDS, last sample
        self._hidden = 0
        self._replica_lag: int | None = None
        self._offset = 0.0  # server clock - local clock
        self._decided = 0.0
        self._active = threading.Event()
        self._sampled = threading.Event()  # set by each sample
        self._first_sample = threading.Event()  # the sampler's first sample is in, or it failed
        self._starting = False  # a sampler opening while the engine goes on
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._error: str | None = None
        self._failed_at = 0.0
        self.stop = stop
        self.rested = 0.0  # seconds rested in all
        self.samples = 0  # pg_stat_activity reads

    # -- the engine's side ---------------------------------------------------------

    def configure(self, enabled: bool, target: float, replica_lag_limit: int | None = None) -> None:
        self.enabled = enabled
        self.controller.target = target
        self.controller.replica_lag_limit = replica_lag_limit
        if not enabled:
            self.controller.duty, self.controller.reason = 1.0, "off"

    def unit_started(self, big: bool = False) -> None:
        """A unit begins. ``big``: one of many transactions (a table swept range by range),
        paced from its first commit: a first WARMUP_SECONDS at full speed, in transactions
        growing toward ttl.transaction_seconds(), was what other sessions felt most of a paced pass."""
        if not self.enabled:
            return
        now = self._unit_started = self._working_since = time.time()
        stale = now - self._decided > BASELINE_SECONDS
        if stale:
            # What the last decision saw is too old to go by (the worker idled since): full speed
            # until the sessions say otherwise.
            self.controller.duty, self.controller.reason = 1.0, "idle"
        if big:
            if not self._sampling():
                self._begin_sampling(now)
            elif stale:  # the sessions were last read long ago: read them before it begins
                self._sampled.clear()
                self._active.set()
                if self._sampled.wait(FRESH_SAMPLE_SECONDS):
                    self.controller.start(self._busy_sessions >= 2)
                    self._decided = now
            self._unit_started = now - WARMUP_SECONDS
        if self._sampling():
            self._active.set()

    def prepare(self, expected_rows: int) -> None:
        """A unit expected to delete ``expected_rows`` begins its transactions. Once it has
        committed PROJECT_AFTER_ROWS rows (key windows: at its second commit), its rows left
        at the pace so far are projected; past PROJECTED_SECONDS, the sampler opens then, in
        its own thread, so that its first sample is in when the pace begins at
        WARMUP_SECONDS, and the engine does not wait for it. A unit done before that opens
        no session (20% of a 10,000-row unit's time, measured)."""
        if self.enabled and not self._sampling():
            self._expected, self._prepared_at, self._done = expected_rows, time.time(), 0

    def _project(self, now: float, rows: int) -> None:
        """After ``rows`` committed: open the sampler if the unit looks long (prepare)."""
        assert self._expected is not None
        self._done += rows
        if self._done < PROJECT_AFTER_ROWS:
            return
        left = max(0, self._expected - self._done) * (now - self._prepared_at) / self._done
        if now - self._unit_started + left >= PROJECTED_SECONDS:
            self._begin_sampling(now, wait=False)
        self._expected = None

    def unit_ended(self) -> None:
        self._expected = None
        if self._working_since is not None:
            now = time.time()
            self._add_work(self._working_since, now)
            self._working_since = None
            if self._sampling() and not self._starting:  # what the unit's last moments showed
                self._decide(now)
        self._active.clear()

    def resumed(self) -> None:
        """Work goes on after a wait that was not the throttle's (a rate limit's)."""
        if self._working_since is not None:
            self._working_since = time.time()

    def between_transactions(self, rows: int) -> None:
        """After a commit (of ``rows``): decide now and then, and rest as the pace says."""
        if not self.enabled or self._working_since is None:
            return
        now = time.time()
        worked = now - self._working_since
        self._add_work(self._working_since, now)
        if self._expected is not None and not self._sampling():
            self._project(now, rows)
        if now - self._unit_started < WARMUP_SECONDS:
            # A unit done within WARMUP_SECONDS is not paced: small tables cost no sampling, no rest.
            self._working_since = now
            return
        if not self._sampling() and not self._begin_sampling(now, wait=False):
            self._working_since = now
            return
        self._active.set()
        if self._starting and self._first_sample.is_set():
            # the sampler opened meanwhile: its first sample says how to go on
            self._starting = False
            if self._sampling():
                self.controller.start(self._busy_sessions >= 2)
                self._decided = now
        elif not self._starting and now - self._decided >= DECIDE_SECONDS:
            self._decide(now)
        rest = self.controller.rest_after(worked)
        if rest > 0:
            if self.stop is not None:
                self.stop.wait(rest)
            else:
                time.sleep(rest)
            self.rested += rest
        self._working_since = time.time()

    def _begin_sampling(self, now: float, wait: bool = True) -> bool:
        """The sampler started, its first sample taken: gently if others are at work. False
        when it cannot sample (a sampler that failed is opened again, not at once).
        ``wait`` False: the engine goes on meanwhile (opening a session and a first read of
        pg_stat_activity took 17 ms of a 0.25 s pass), and between_transactions starts the
        pace from the first sample once it is in (a unit ``prepare`` projects long opens it
        early, so that it is in by then)."""
        if self._error is not None and time.monotonic() - self._failed_at < RETRY_SECONDS:
            return False
        self._start_sampler()
        self._starting = not wait
        if not wait:
            return True
        self._first_sample.wait()
        if not self._sampling():
            return False
        self.controller.start(self._busy_sessions >= 2)
        self._decided = now
        return True

    def _decide(self, now: float) -> None:
        self._drain(now)
        self.controller.decide(now, blind=self._hidden > 0)
        self._decided = now

    @property
    def slowed(self) -> bool:
        """Working less than all the time: each transaction is kept small."""
        return self.enabled and self.controller.duty < 1.0

    def _add_work(self, start: float, end: float) -> None:
        if self._work and start - self._work[-1][1] < 0.0005:  # no rest between: one interval
            self._work[-1] = (self._work[-1][0], end)
        else:
            self._work.append((start, end))

    def state(self) -> PaceState:
        if not self.enabled:
            return PaceState(1.0, "off")
        if self._error is not None:
            return PaceState(1.0, "unmeasured", detail=self._error)
        return self.controller.state()

    def close(self) -> None:
        self._closed.set()
        self._active.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._conn is not None:
            self._conn.close()

    # -- the sampler ---------------------------------------------------------------

    def _sampling(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _failed(self, exc: psycopg.Error) -> None:
        """The engine goes on at full speed; the state says why until the sampler is back."""
        self._error = error_text(exc)
        self._failed_at = time.monotonic()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _start_sampler(self) -> None:
        """The sampler's thread started: it opens its session and takes the first sample
        (``_first_sample`` set when it has, or has failed)."""
        self._first_sample.clear()
        self._thread = threading.Thread(target=self._run, name="pg-ttl pace", daemon=True)
        self._thread.start()

    def _open(self) -> bool:
        try:
            self._conn = psycopg.connect(self._dsn, autocommit=True, application_name="pg-ttl pace")
            if self._closed.is_set():  # the engine closed while this session opened
                self._conn.close()
                return False
            self._conn.execute("SELECT pg_catalog.set_config('statement_timeout', '1s', false)")
            self._sample(first=True)  # what the others did just before: the first reference
        except psycopg.Error as exc:
            self._failed(exc)
            return False
        self._error = None
        return True

    def _run(self) -> None:
        try:
            if not self._open():
                return
        finally:
            self._first_sample.set()
        while not self._closed.is_set():
            if not self._active.wait(1.0):
                continue
            if self._closed.is_set():
                break
            try:
                self._sample(first=False)
            except psycopg.Error as exc:
                self._failed(exc)
                return
            self._closed.wait(SAMPLE_SECONDS)

    def _sample(self, first: bool) -> None:
        assert self._conn is not None
        before = time.time()
        row = self._conn.execute(SAMPLE, (self._engine_pid,)).fetchone()
        after = time.time()
        self.samples += 1
        assert row is not None
        server_now, pids, starts, seconds, active, hidden, replica_lag = row
        self._offset = server_now - (before + after) / 2
        fresh: list[tuple[float, float]] = []
        seen: dict[int, float] = {}
        running: dict[int, tuple[float, float]] = {}
        busy = 0
        for pid, start, secs, is_active in zip(pids or [], starts or [], seconds or [], active or [], strict=True):
            if start is None or secs is None:
                continue
            if self._seen.get(pid) == start:  # this statement was counted already
                seen[pid] = start
                continue
            if is_active:  # still running: counted when it ends, or by how long it ran at least
                running[pid] = (start, secs)
                continue
            seen[pid] = start
            # The first sample takes only what ended in the last second (an idle session's
            # last statement may be hours old).
            if not first or server_now - (start + secs) <= 1.0:
                fresh.append((start - self._offset, max(0.0, secs)))
            busy += server_now - (start + secs) <= BUSY_SECONDS
        for pid, (start, secs) in self._running.items():
            # A statement seen running that ended unseen (the session moved on, or left): it
            # ran at least as long as it was seen running.
            if running.get(pid, (None,))[0] != start and seen.get(pid) != start:
                fresh.append((start - self._offset, max(0.0, secs)))
        self._seen, self._running = seen, running  # sessions gone are forgotten
        self._busy_sessions = busy + len(running)
        with self._lock:
            self._replica_lag = None if replica_lag is None else int(replica_lag)
            self._hidden = hidden
            self._observed.extend(fresh)
        self._sampled.set()

    def _drain(self, now: float) -> None:
        """Hand the sampled statements to the controller, each as during work or at rest."""
        with self._lock:
            observed, self._observed = self._observed, []
            self.controller.replica_lag = self._replica_lag
        current = self._working_since
        for start, secs in observed:
            during = (current is not None and start >= current) or \
                any(a <= start <= b for a, b in self._work)
            self.controller.observe(start, secs, during)
        # Work intervals older than any statement still to come are not needed.
        horizon = now - 5.0
        while self._work and self._work[0][1] < horizon:
            self._work.popleft()


__all__ = ["REASONS", "Controller", "Pace", "PaceState"]
