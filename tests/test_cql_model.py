"""CQL-style tables ("value_ttls") against a model of Cassandra's cell and row-marker expiry.

A hypothesis state machine writes to a table declared with
``{"expire_after": "<3 or 0> seconds", "value_ttls": "true"}`` and strict
visibility: INSERTs of new keys (USING TTL 0-3 s, or the table default),
UPDATEs of one or two values (with or without USING TTL), UPDATEs setting a
value to NULL (CQL's DELETE of a value), DELETEs of rows, short sleeps so that
TTLs pass, and engine passes. The model keeps what the table physically holds:
per row, the INSERT's marker expiry and each non-NULL value with its own expiry
(None: never), all computed from the server's ``now()`` of the writing
transaction. After every step, in one transaction (one ``now()``):

- the raw table, read by the superuser, holds exactly the model's rows and
  non-NULL values;
- ``ttl.expires_at(p)`` / ``ttl.expires_at(p, col)`` equal the model's row and
  value expiries (``ttl.ttl`` agrees with them);
- an unprivileged role sees, through ``ttl_live.<table>``, exactly the rows live
  at ``now()`` (marker or some value live) with their expired values NULL, and
  through the table itself (row security) exactly the live keys.

An engine pass runs with a cutoff read from the server (its now(), or exactly
an expiry instant that has passed: the boundary); the table it leaves equals
the model evaluated at that cutoff (dead rows gone, expired values NULL).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from pg_ttl.expire import engine

Conn = psycopg.Connection[Any]
Values = tuple[int | None, ...]

READER = "cql_model_reader"  # an ordinary role: row security applies to it
COLUMNS = ("a", "b")
KEYS = 4
SLEEP_BUDGET = 5.0  # seconds one example may sleep in all (bounds a run's length)
TOLERANCE = timedelta(milliseconds=1)  # ttl.expires_at() vs the model (same server clock)

# No example database written to the repository; no deadline (every step waits on the server).
# Steps must not draw differently from one run to the next: no rule has a precondition
# (what the table holds depends on the clock); a rule that cannot apply does nothing.
# Every replay sleeps again: the fast tier reports a failing sequence as found (shrinking
# it takes minutes), the slow tier shrinks it (within its own timeout).
BASE = settings(deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
FAST = settings(BASE, max_examples=12, stateful_step_count=40,
                phases=[Phase.explicit, Phase.reuse, Phase.generate])
SLOW = settings(BASE, max_examples=50, stateful_step_count=50)

TTLS = st.sampled_from([1, 2, 3, None, 0])  # USING TTL n s (0: never); None: the table default
VALUES = st.integers(-1000, 1000)
KEY = st.integers(0, KEYS - 1)


def live(expires: datetime | None, t: datetime) -> bool:
    return expires is None or expires > t


@dataclass
class Cell:
    value: int
    expires: datetime | None  # None: never


@dataclass
class Row:
    marker: datetime | None  # the INSERT's row marker; None: never
    cells: dict[str, Cell] = field(default_factory=dict)  # the non-NULL values

    def expiry(self) -> datetime | None:
        """When the row goes: the latest of its marker and values; None if any never expires."""
        instants = [self.marker, *(c.expires for c in self.cells.values())]
        finite = [t for t in instants if t is not None]
        return max(finite) if len(finite) == len(instants) else None

    def live_at(self, t: datetime) -> bool:
        """CQL: a row is there while its marker or any of its values is."""
        return live(self.marker, t) or any(live(c.expires, t) for c in self.cells.values())

    def values_at(self, t: datetime) -> Values:
        """What a reader sees at ``t``: expired values are NULL."""
        return tuple(c.value if c is not None and live(c.expires, t) else None
                     for c in (self.cells.get(col) for col in COLUMNS))

    def raw(self) -> Values:
        return tuple(c.value if c is not None else None for c in (self.cells.get(col) for col in COLUMNS))

    def instants(self) -> list[datetime]:
        return [t for t in (self.marker, *(c.expires for c in self.cells.values())) if t is not None]


def close(got: datetime | None, want: datetime | None) -> bool:
    if got is None or want is None:
        return got is want
    return abs(got - want) <= TOLERANCE


def seconds_left(expires: datetime | None, now: datetime) -> int | None:
    """What ttl.ttl() reports: whole seconds left, rounded up; 0 once expired; NULL for never."""
    if expires is None:
        return None
    return max(0, math.ceil((expires - now) / timedelta(seconds=1)))


class CqlModel(RuleBasedStateMachine):
    """One table per example; the test sets ``dsn`` and ``serial`` (table numbers)."""

    dsn: str
    serial: Iterator[int]

    def __init__(self) -> None:
        super().__init__()
        self.conn: Conn = psycopg.connect(self.dsn, autocommit=True)
        self.table = f"pv_{next(self.serial)}"
        self.default_ttl = 0
        self.rows: dict[int, Row] = {}  # what the table holds
        self.clock = datetime.min.replace(tzinfo=UTC)  # the server's now() last read
        self.slept = 0.0
        self.cutoffs: set[datetime] = set()  # of the engine's passes so far

    def teardown(self) -> None:
        self.conn.close()

    @initialize(default_ttl=st.sampled_from([3, 0]),
                seed=st.lists(st.tuples(VALUES | st.none(), VALUES | st.none(), TTLS), max_size=KEYS))
    def create(self, default_ttl: int, seed: list[tuple[int | None, int | None, int | None]]) -> None:
        """The table: CQL-style with a default TTL of 3 s or none, strict, readable by the reader
        role; and a few rows to begin with, one INSERT each."""
        self.default_ttl = default_ttl
        t = self.table
        with self.conn.transaction():
            self.conn.execute(f"CREATE TABLE {t} (k int PRIMARY KEY, a int, b int)")
            self.conn.execute("SELECT ttl.set_options(%s, %s::jsonb)",
                              (t, f'{{"expire_after": "{default_ttl} seconds", "value_ttls": "true"}}'))
            self.conn.execute("SELECT ttl.set_option(%s, 'strict', 'true')", (t,))
            self.conn.execute(f"GRANT USAGE ON SCHEMA public, ttl_live TO {READER}")
            self.conn.execute(f"GRANT SELECT ON {t}, ttl_live.{t} TO {READER}")
        for k, (a, b, using) in enumerate(seed):
            self.insert(k, a, b, using)

    # -- writes: one transaction each, the model from its now() ------------------------

    def _now(self) -> datetime:
        row = self.conn.execute("SELECT now()").fetchone()
        assert row is not None
        self.clock = row[0]
        return self.clock

    def _write(self, using: int | None, sql: str, params: tuple[Any, ...]) -> tuple[datetime, int]:
        """now(), ``USING TTL using`` (None: none), the statement; returns now() and the rowcount."""
        with self.conn.transaction():
            now = self._now()
            if using is not None:
                self.conn.execute("SELECT ttl.using_ttl(%s::interval)", (f"{using} seconds",))
            n = self.conn.execute(sql, params).rowcount
        return now, n

    def _expiry(self, now: datetime, using: int | None) -> datetime | None:
        """A write's expiry: USING TTL, else the table default; 0 = never."""
        ttl = self.default_ttl if using is None else using
        return None if ttl == 0 else now + timedelta(seconds=ttl)

    @rule(k=KEY, a=VALUES | st.none(), b=VALUES | st.none(), using=TTLS)
    def insert(self, k: int, a: int | None, b: int | None, using: int | None) -> None:
        """INSERT of a key the table does not hold (the first free one from ``k``; none: nothing).
        The marker and every non-NULL value written get now + TTL."""
        free = [key for key in ((k + i) % KEYS for i in range(KEYS)) if key not in self.rows]
        if not free:
            return
        now, n = self._write(using, f"INSERT INTO {self.table} (k, a, b) VALUES (%s, %s, %s)", (free[0], a, b))
        assert n == 1
        exp = self._expiry(now, using)
        self.rows[free[0]] = Row(exp, {col: Cell(v, exp) for col, v in zip(COLUMNS, (a, b), strict=True)
                                       if v is not None})

    @rule(k=KEY, values=st.dictionaries(st.sampled_from(COLUMNS), VALUES, min_size=1, max_size=2), using=TTLS)
    def update(self, k: int, values: dict[str, int], using: int | None) -> None:
        """UPDATE … SET of one or two values: each gets now + TTL, whatever it had; the marker stays.
        A key the table does not hold: nothing (UPDATE creates no row)."""
        sets = ", ".join(f"{col} = %s" for col in values)
        now, n = self._write(using, f"UPDATE {self.table} SET {sets} WHERE k = %s", (*values.values(), k))
        row = self.rows.get(k)
        assert n == (row is not None)
        if row is not None:
            exp = self._expiry(now, using)
            row.cells.update({col: Cell(v, exp) for col, v in values.items()})

    @rule(k=KEY, col=st.sampled_from(COLUMNS), using=TTLS)
    def set_null(self, k: int, col: str, using: int | None) -> None:
        """UPDATE … SET col = NULL (CQL's DELETE of a value): the value goes, with its TTL
        (USING TTL changes nothing)."""
        _, n = self._write(using, f"UPDATE {self.table} SET {col} = NULL WHERE k = %s", (k,))
        row = self.rows.get(k)
        assert n == (row is not None)
        if row is not None:
            row.cells.pop(col, None)

    @rule(k=KEY)
    def delete(self, k: int) -> None:
        _, n = self._write(None, f"DELETE FROM {self.table} WHERE k = %s", (k,))
        assert n == (k in self.rows)
        self.rows.pop(k, None)

    # -- time and the engine -------------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        """Time passes, while something is yet to expire and the example's budget lasts."""
        due = any(t > self.clock for row in self.rows.values() for t in row.instants())
        if due and self.slept + seconds <= SLEEP_BUDGET:
            self.slept += seconds
            time.sleep(seconds)

    @rule(seconds=st.floats(0.3, 1.2))
    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)

    @rule(seconds=st.floats(0.3, 1.2))
    def sleep_again(self, seconds: float) -> None:
        """A second sleep rule: time passes about as often as anything is written."""
        self._sleep(seconds)

    def _expire(self, cutoff: datetime) -> None:
        """An engine pass with ``cutoff``: the table left is the model's at the cutoff."""
        [result] = engine.expire(self.dsn, [self.table], cutoff=cutoff)
        assert result.status == "ok", result
        self.cutoffs.add(cutoff)
        gone = [k for k, row in self.rows.items() if not row.live_at(cutoff)]
        for k in gone:
            del self.rows[k]
        nulled = 0
        for row in self.rows.values():
            for col in [col for col, cell in row.cells.items() if not live(cell.expires, cutoff)]:
                del row.cells[col]
                nulled += 1
        with self.conn.transaction():
            assert self._raw() == self._model_raw(), f"after an engine pass at {cutoff}"
        assert (result.rows_deleted, result.values_nulled) == (len(gone), nulled), cutoff

    def _passed(self) -> tuple[datetime, list[datetime]]:
        """The server's now() and the expiry instants passed by then, latest first."""
        with self.conn.transaction():
            now = self._now()
        return now, sorted({t for row in self.rows.values() for t in row.instants() if t <= now}, reverse=True)

    @rule()
    def expire(self) -> None:
        """`pg-ttl run` now: the cutoff is the server's now(), read first (nothing expired: no pass)."""
        now, passed = self._passed()
        if passed:
            self._expire(now)

    @rule(pick=st.integers(0, 2 * KEYS * (1 + len(COLUMNS))))
    def expire_at_boundary(self, pick: int) -> None:
        """A pass whose cutoff is exactly an expiry instant already passed: what expires at
        the cutoff has expired. Not the cutoff of an earlier pass: a pass with the cutoff of
        a finished run is skipped as done, by design (ttl._begin_unit, sql/50_history.sql)."""
        _, passed = self._passed()
        fresh = [t for t in passed if t not in self.cutoffs]
        if fresh:
            self._expire(fresh[pick % len(fresh)])

    # -- the checks ----------------------------------------------------------------------

    def _raw(self) -> dict[int, Values]:
        return {k: (a, b) for k, a, b in self.conn.execute(f"SELECT k, a, b FROM {self.table}").fetchall()}

    def _model_raw(self) -> dict[int, Values]:
        return {k: row.raw() for k, row in self.rows.items()}

    @invariant()
    def matches_the_model(self) -> None:
        t = self.table
        per_value = ", ".join(f"ttl.expires_at(p, '{c}'), ttl.ttl(p, '{c}')" for c in COLUMNS)
        with self.conn.transaction():
            now = self._now()
            raw = self._raw()
            expiries = self.conn.execute(f"SELECT k, ttl.expires_at(p), ttl.ttl(p), {per_value} FROM {t} p").fetchall()
            self.conn.execute(f"SET LOCAL ROLE {READER}")
            seen = {k: (a, b) for k, a, b in self.conn.execute(f"SELECT k, a, b FROM ttl_live.{t}").fetchall()}
            keys = {k for (k,) in self.conn.execute(f"SELECT k FROM {t}").fetchall()}
        assert raw == self._model_raw(), f"the table at {now}"
        for k, row_exp, row_ttl, *cells in expiries:
            row = self.rows[k]
            assert close(row_exp, row.expiry()), (k, "row expiry", row_exp, row)
            assert row_ttl == seconds_left(row_exp, now), (k, "row ttl", row_ttl, row_exp, now)
            for i, col in enumerate(COLUMNS):
                exp, ttl = cells[2 * i], cells[2 * i + 1]
                cell = row.cells.get(col)
                assert close(exp, cell.expires if cell else None), (k, col, "expiry", exp, row)
                assert ttl == seconds_left(exp, now), (k, col, "ttl", ttl, exp, now)
        want = {k: row.values_at(now) for k, row in self.rows.items() if row.live_at(now)}
        assert seen == want, f"ttl_live.{t} as {READER} at {now}"
        assert keys == set(want), f"{t} as {READER} at {now} (row security)"


def _run(dsn: str, db: Conn, how: settings) -> None:
    db.autocommit = True
    db.execute(f"CREATE ROLE {READER} NOLOGIN")
    try:
        machine = type("Machine", (CqlModel,), {"dsn": dsn, "serial": iter(range(10**9))})
        run_state_machine_as_test(machine, settings=how)
    finally:
        db.execute(f"DROP OWNED BY {READER}")
        db.execute(f"DROP ROLE {READER}")


def test_cql_tables_follow_the_model(dsn: str, db: Conn) -> None:
    _run(dsn, db, FAST)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_cql_tables_follow_the_model_long(dsn: str, db: Conn) -> None:
    _run(dsn, db, SLOW)
