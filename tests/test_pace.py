"""The adaptive throttle (pg_ttl/expire/pace.py): the engine slows down while it slows other
sessions, runs at full speed when nobody else is at work, says when it cannot see, and the
setting turns it off."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pg_ttl.expire import Engine
from pg_ttl.expire.context import NullProgress
from pg_ttl.expire.pace import DECREASE, INCREASE, MAX_REST, MIN_STATEMENTS, START_DUTY, Controller

# -- the controller alone ---------------------------------------------------------------------


def _feed(c: Controller, seconds: float, n: int, during_work: bool, at: float = 100.0) -> None:
    for i in range(n):
        c.observe(at + i * 0.001, seconds, during_work)


def test_nobody_else_at_work_means_full_speed() -> None:
    c = Controller(1.5)
    c.duty = 0.2
    c.decide(now=100.0)
    assert (c.duty, c.reason) == (1.0, "idle")
    assert c.rest_after(0.05) == 0.0


def test_statements_slower_while_working_lower_the_duty_and_unaffected_ones_raise_it() -> None:
    c = Controller(1.5)
    _feed(c, 0.001, MIN_STATEMENTS, during_work=False)  # the reference: 1 ms while resting
    _feed(c, 0.005, MIN_STATEMENTS, during_work=True)  # 5x slower while working
    c.decide(now=100.1)
    assert c.reason == "throttled" and c.duty == pytest.approx(DECREASE)
    assert c.slowdown == pytest.approx(5.0)
    _feed(c, 0.0012, MIN_STATEMENTS, during_work=True, at=100.2)  # 1.2x: within the target
    c.decide(now=100.3)
    assert c.reason == "healthy" and c.duty == pytest.approx(DECREASE + INCREASE)
    assert c.slowed_down == 1


def test_too_few_statements_wait_for_more_and_no_reference_means_resting_to_take_one() -> None:
    c = Controller(1.5)
    _feed(c, 0.001, MIN_STATEMENTS, during_work=False)
    _feed(c, 0.009, MIN_STATEMENTS - 1, during_work=True)
    c.decide(now=100.1)
    assert c.duty == 1.0 and c.reason != "throttled"  # not judged on too few
    _feed(c, 0.009, 1, during_work=True, at=100.2)
    c.decide(now=100.3)
    assert c.reason == "throttled"  # the earlier ones were kept: now enough

    fresh = Controller(1.5)
    _feed(fresh, 0.001, MIN_STATEMENTS, during_work=True)
    fresh.decide(now=100.1)
    assert (fresh.duty, fresh.reason) == (0.5, "measuring")


def test_a_busy_start_is_gentle_and_rests_follow_the_duty() -> None:
    c = Controller(1.5)
    c.start(others_active=True)
    assert (c.duty, c.reason) == (START_DUTY, "measuring")
    c.duty = 0.25
    assert c.rest_after(0.01) == pytest.approx(0.03)
    assert c.rest_after(10.0) == MAX_REST
    quiet = Controller(1.5)
    quiet.start(others_active=False)
    assert quiet.duty == 1.0


def test_a_replica_behind_its_limit_lowers_the_duty_whatever_the_sessions_show() -> None:
    c = Controller(1.5)
    c.replica_lag_limit, c.replica_lag = 1_000_000, 5_000_000
    c.decide(now=100.0)  # nobody else at work: still slowed
    assert (c.duty, c.reason) == (DECREASE, "replica_lag")
    assert "4882 kB of WAL to replay" in c.state().describe()
    c.replica_lag = 10_000  # caught up: the sessions decide again
    c.decide(now=100.1)
    assert (c.duty, c.reason) == (1.0, "idle")


def test_old_reference_statements_age_out() -> None:
    c = Controller(1.5)
    _feed(c, 0.001, MIN_STATEMENTS, during_work=False, at=0.0)
    c.decide(now=1000.0)  # long after: nobody at work any more
    assert (c.duty, c.reason) == (1.0, "idle") and not c.baseline


# -- against the server -----------------------------------------------------------------------

ROWS = 600_000


def _big_table(db: psycopg.Connection[Any], name: str = "t", owner: str | None = None, rows: int = ROWS) -> None:
    """``rows`` expired rows and 1,000 live ones: a pass of many short transactions."""
    if owner:
        db.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(owner)))
    db.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, created_at timestamptz NOT NULL, pad text)").format(
        sql.Identifier(name)))
    db.execute(sql.SQL("INSERT INTO {} SELECT g, CASE WHEN g <= %s THEN now() - interval '3 days' ELSE now() END, "
                       "repeat('x', 40) FROM generate_series(1, %s) g").format(sql.Identifier(name)),
               (rows, rows + 1000))
    if owner:
        db.execute("RESET ROLE")
    db.execute("SELECT ttl.enable(%s::regclass, expire_after => '1 day', column_name => 'created_at')", (name,))
    db.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(name)))
    db.commit()


@contextlib.contextmanager
def _foreground(dsn: str, statement: str, transaction: bool = False, sessions: int = 1) -> Iterator[list[int]]:
    """``sessions`` other sessions running ``statement`` over and over (in a transaction of its
    own each time when ``transaction``) until the block ends; yields [statements run]."""
    done = threading.Event()
    count = [0]
    failures: list[BaseException] = []

    def run() -> None:
        try:
            with psycopg.connect(dsn, autocommit=not transaction, application_name="app") as conn:
                while not done.is_set():
                    conn.execute(statement)  # type: ignore[arg-type]  # the tests' own constants
                    if transaction:
                        conn.commit()
                    count[0] += 1
                    done.wait(0.001)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(sessions)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    try:
        yield count
    finally:
        done.set()
        for thread in threads:
            thread.join(10)
    assert not failures, failures


def test_idle_server_full_speed(db: psycopg.Connection[Any], dsn: str) -> None:
    _big_table(db)
    with Engine(dsn) as engine:
        [res] = engine.expire(["t"])
        pace = engine.pace
        assert pace.samples > 0, "the pass was long enough to be sampled"
        assert pace.rested == 0.0
        assert res.pace is not None and (res.pace.duty, res.pace.reason) == (1.0, "idle")
    assert res.status == "ok" and res.rows_deleted == ROWS
    assert db.execute("SELECT count(*) FROM t").fetchone() == (1000,)


def test_the_engine_slows_down_while_it_slows_other_sessions(db: psycopg.Connection[Any], dsn: str) -> None:
    """The application's statement waits for the engine's transactions (a SHARE lock on the table
    conflicts with DELETE's), so it runs far slower while the engine works than while it rests.
    Four such sessions busy as the pass starts: it starts gently, and slows down further."""
    rows = 4 * ROWS  # at 10% a big table's sweep could finish these rows within the 3 s
    _big_table(db, rows=rows)
    with _foreground(dsn, "LOCK TABLE t IN SHARE MODE", transaction=True, sessions=4) as ran, \
            Engine(dsn) as engine:
        stop = threading.Event()
        threading.Timer(3.0, stop.set).start()  # enough to see it; the rest would only be slow
        started = time.monotonic()
        [res] = engine.expire(["t"], stop=stop)
        took = time.monotonic() - started
        pace = engine.pace
        assert ran[0] > 0
    assert pace.controller.slowed_down > 0, pace.state()
    assert pace.controller.slowdown is not None and pace.controller.slowdown > pace.controller.target
    assert pace.rested > 0.5 * took, (pace.rested, took)  # mostly resting
    assert res.status == "partial" and 0 < res.rows_deleted < rows
    assert db.execute("SELECT count(*) FROM t").fetchone() == (rows + 1000 - res.rows_deleted,)
    assert db.execute("SELECT count(*) FROM t WHERE id > %s", (rows,)).fetchone() == (1000,)


def test_throttle_off(db: psycopg.Connection[Any], dsn: str) -> None:
    _big_table(db)
    db.execute("SELECT ttl.set_option('t', 'delete_rate_limit', %s)", (str(ROWS // 3),))
    db.execute("UPDATE ttl.settings SET value = 'off' WHERE name = 'throttle'")
    db.commit()
    with _foreground(dsn, "LOCK TABLE t IN SHARE MODE", transaction=True), Engine(dsn) as engine:
        [res] = engine.expire(["t"])
        assert engine.pace.samples == 0 and engine.pace.rested == 0.0
    assert res.pace is not None and res.pace.reason == "off" and "throttle is off" in res.pace.describe()
    assert res.status == "ok" and res.rows_deleted == ROWS


@pytest.mark.parametrize(("name", "value"), [("throttle", "fast"), ("throttle_target", "1"),
                                             ("throttle_target", "0.5"), ("throttle_target", "x")])
def test_bad_settings_are_refused(db: psycopg.Connection[Any], name: str, value: str) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("UPDATE ttl.settings SET value = %s WHERE name = %s", (value, name))


def _as(dsn: str, user: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["user"] = user
    return psycopg.conninfo.make_conninfo(**params)  # type: ignore[arg-type]


def test_without_pg_read_all_stats_the_throttle_says_it_cannot_see(db: psycopg.Connection[Any], dsn: str) -> None:
    """An engine role that may not see other roles' sessions runs at full speed and says why;
    with pg_read_all_stats it sees them."""
    db.autocommit = True
    for role in ("pace_worker", "pace_owner"):
        db.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    db.execute("CREATE ROLE pace_owner NOLOGIN")
    db.execute("GRANT CREATE ON SCHEMA public TO pace_owner")
    db.execute("CREATE ROLE pace_worker LOGIN NOINHERIT IN ROLE pace_owner")
    try:
        db.autocommit = False
        _big_table(db, owner="pace_owner")
        # The superuser's session: not visible to pace_worker.
        with _foreground(dsn, "SELECT pg_catalog.pg_sleep(0.0005)"), Engine(_as(dsn, "pace_worker")) as engine:
            [res] = engine.expire(["t"])
            assert engine.pace.samples > 0
        assert res.status == "ok" and res.rows_deleted == ROWS
        assert res.pace is not None and (res.pace.duty, res.pace.reason) == (1.0, "blind")
        assert "pg_read_all_stats" in res.pace.describe()
    finally:
        db.rollback()
        db.autocommit = True
        db.execute("DROP OWNED BY pace_worker, pace_owner CASCADE")
        db.execute("DROP ROLE pace_worker")
        db.execute("DROP ROLE pace_owner")


def test_run_json_and_summary_say_the_pace(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    """pg-ttl run reports each table's pace; its summary notes it when the throttle had a say."""
    import json

    _big_table(db, rows=300_000)  # past the throttle's first 0.1 s, then slowed
    with _foreground(dsn, "LOCK TABLE t IN SHARE MODE", transaction=True, sessions=4):
        res = cli("run", "--json", "--dsn", dsn, "t")
    assert res.returncode == 0, res.stderr
    [out] = json.loads(res.stdout)
    assert out["status"] == "ok" and out["rows_deleted"] == 300_000
    pace = out["pace"]
    assert pace["duty"] < 1 and pace["reason"] in ("throttled", "healthy", "measuring"), pace
    assert pace["text"].startswith(f"{pace['duty']:.0%} (")


@pytest.mark.slow
def test_a_replica_behind_slows_the_engine_down() -> None:
    """A real standby whose replay is paused: the WAL it has left to replay grows past
    throttle_replica_lag, and the engine slows down for it, with nobody else at work."""
    from pg_ttl import install
    from pg_ttl.localserver import LocalServer
    from tests.helpers import standby_of

    primary = LocalServer(settings={"max_wal_senders": "4"})
    primary.start()
    standby = None
    try:
        dsn = primary.create_database("lagdb")
        install.upgrade(dsn)
        with psycopg.connect(dsn) as db:
            _big_table(db, rows=4 * ROWS)  # a pass of several decisions at full speed
            db.execute("UPDATE ttl.settings SET value = '1MB' WHERE name = 'throttle_replica_lag'")
            db.commit()
        standby = standby_of(primary)
        with psycopg.connect(dsn, autocommit=True) as db:
            deadline = time.monotonic() + 30  # caught up first: the lag is the pass's own WAL
            while db.execute("SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false) "
                             "FROM pg_stat_replication").fetchone() != (True,):
                assert time.monotonic() < deadline, "the standby did not catch up"
                time.sleep(0.1)
        with psycopg.connect(standby.dsn("lagdb"), autocommit=True) as s:
            s.execute("SELECT pg_wal_replay_pause()")
        with Engine(dsn) as engine:
            stop = threading.Event()
            threading.Timer(3.0, stop.set).start()
            [res] = engine.expire(["t"], stop=stop)
            pace = engine.pace
        assert pace.controller.slowed_down > 0, pace.state()
        assert res.pace is not None and res.pace.reason == "replica_lag" and res.pace.duty < 0.5
        assert res.pace.replica_lag is not None and res.pace.replica_lag > 1024 * 1024
        assert "of WAL to replay" in res.pace.describe()
        assert pace.rested > 0
        with psycopg.connect(dsn) as db:  # what it did delete is gone, the rest waits for the next run
            assert db.execute("SELECT count(*) FROM t").fetchone() == (4 * ROWS + 1000 - res.rows_deleted,)
    finally:
        if standby is not None:
            standby.cleanup()
        primary.cleanup()


def test_a_sampler_whose_session_ended_is_opened_again(db: psycopg.Connection[Any], dsn: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """idle_session_timeout or an administrator may end the sampler's session between passes:
    the next pass opens another (here at once; RETRY_SECONDS apart otherwise)."""
    from pg_ttl.expire import pace as pace_module

    monkeypatch.setattr(pace_module, "RETRY_SECONDS", 0.0)
    _big_table(db, "t", rows=300_000)
    _big_table(db, "t2", rows=300_000)
    sampler = "SELECT pid FROM pg_stat_activity WHERE application_name = 'pg-ttl pace'"
    with Engine(dsn) as engine:
        engine.expire(["t"])
        first = db.execute(sampler).fetchall()
        db.commit()
        assert len(first) == 1 and engine.pace.samples > 0
        db.execute("SELECT pg_terminate_backend(%s)", first[0])
        db.commit()
        before = engine.pace.samples
        [res] = engine.expire(["t2"])
        second = db.execute(sampler).fetchall()
        db.commit()
    assert res.status == "ok" and res.rows_deleted == 300_000
    assert len(second) == 1 and second != first
    assert engine.pace.samples > before
    assert res.pace is not None and res.pace.reason == "idle", res.pace


def test_a_slowed_pace_does_not_hold_small_tables_or_outlive_its_reasons(db: psycopg.Connection[Any],
                                                                         dsn: str) -> None:
    """After a pass the throttle slowed, a small table (done within the first 0.1 s) rests not at
    all; a pace decided long ago is not applied to the next pass."""
    _big_table(db, "t", rows=300_000)
    ttl_small = "CREATE TABLE s (id int PRIMARY KEY, created_at timestamptz NOT NULL)"
    db.execute(ttl_small)
    db.execute("INSERT INTO s SELECT g, now() - interval '3 days' FROM generate_series(1, 50) g")
    db.execute("SELECT ttl.enable('s', expire_after => '1 day', column_name => 'created_at')")
    db.commit()
    with Engine(dsn) as engine:
        engine.expire(["t"])  # long enough to start the sampler
        assert engine.pace.samples > 0
        engine.pace.controller.duty, engine.pace.controller.reason = 0.05, "throttled"
        engine.pace._decided = time.time()  # as if just decided
        [small] = engine.expire(["s"])
        assert small.rows_deleted == 50 and engine.pace.rested == 0.0
        # the same slowed pace, decided a minute ago: the next long unit starts at full speed
        db.execute("INSERT INTO t SELECT g, now() - interval '3 days', 'x' FROM generate_series(-300000, -1) g")
        db.commit()
        engine.pace._decided = time.time() - 60
        [big] = engine.expire(["t"])
    assert big.rows_deleted == 300_000 and engine.pace.rested == 0.0
    assert big.pace is not None and (big.pace.duty, big.pace.reason) == (1.0, "idle")


class _Batches:
    """Each DELETE's rows, with whether the pace was slowed as it was sized (the pace changes
    only between transactions, after each batch is reported)."""

    def __init__(self, engine: Engine, on_batch: Any = None) -> None:
        self.engine, self.on_batch = engine, on_batch
        self.batches: list[tuple[int, bool]] = []

    def unit_started(self, *a: Any) -> None:
        pass

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        self.batches.append((deleted, self.engine.pace.slowed))
        if self.on_batch is not None:
            self.on_batch(len(self.batches))

    def unit_finished(self, result: Any) -> None:
        pass


def _shared_sweep_table(db: psycopg.Connection[Any], rows: int) -> None:
    """A table swept in shared ranges of 128 blocks (about 18,000 of its rows each)."""
    _big_table(db, rows=rows)
    db.autocommit = True
    db.execute("UPDATE ttl.settings SET value = '1MB' WHERE name = 'row_range_bytes'")
    db.execute("VACUUM t")  # relpages: the size the engine judges the table by


def _pass_while_busy(engine: Engine, dsn: str) -> tuple[Any, _Batches]:
    """Two seconds of a pass over t while four sessions of the application wait on its
    transactions (a SHARE lock conflicts with DELETE's)."""
    with _foreground(dsn, "LOCK TABLE t IN SHARE MODE", transaction=True, sessions=4):
        stop = threading.Event()
        threading.Timer(2.0, stop.set).start()
        listener = _Batches(engine)
        [res] = engine.expire(["t"], stop=stop, progress=listener)
    return res, listener


def test_a_sweep_slowed_midway_keeps_each_transaction_to_delete_batch_size(db: psycopg.Connection[Any],
                                                                          dsn: str) -> None:
    """A big table's sweep starts at full speed on an idle server, its DELETEs growing to a
    whole range each; when the application comes and the throttle slows the pass, each
    transaction is cut to about delete_batch_size rows (1000) from then on, ranges swept whole
    included."""
    _shared_sweep_table(db, rows=4 * ROWS)
    load: list[Any] = []
    with Engine(dsn) as engine:
        def on_batch(n: int) -> None:
            if n == 12:  # the application comes
                load.append(_foreground(dsn, "LOCK TABLE t IN SHARE MODE", transaction=True, sessions=4))
                load[0].__enter__()

        stop = threading.Event()
        threading.Timer(6.0, stop.set).start()
        listener = _Batches(engine, on_batch)
        try:
            [res] = engine.expire(["t"], stop=stop, progress=listener)
        finally:
            if load:
                load[0].__exit__(None, None, None)
    unpaced = [n for n, slowed in listener.batches if not slowed]
    paced = [n for n, slowed in listener.batches if slowed]
    assert max(unpaced) > 10_000, listener.batches[:20]  # whole ranges, before the application came
    assert len(paced) >= 10, listener.batches  # then it was slowed
    assert max(paced) <= 1250, [n for n, _ in listener.batches]
    assert res.rows_deleted == sum(n for n, _ in listener.batches)
    assert db.execute("SELECT count(*) FROM t WHERE id > %s", (4 * ROWS,)).fetchone() == (1000,)


def test_a_big_table_is_paced_from_its_first_transaction_when_others_are_at_work(
        db: psycopg.Connection[Any], dsn: str) -> None:
    """The application is at work as a big table's sweep begins: the pass is gentle from its
    first commit (the sessions read before it), not after a first 0.1 s at full speed."""
    _shared_sweep_table(db, rows=2 * ROWS)
    with Engine(dsn) as engine:
        res, listener = _pass_while_busy(engine, dsn)
    assert res.rows_deleted > 0 and len(listener.batches) >= 2
    # every DELETE after the first was sized by a slowed pace: about delete_batch_size rows
    assert all(slowed for _, slowed in listener.batches[1:]), listener.batches[:10]
    assert max(n for n, _ in listener.batches) <= 1250, listener.batches[:10]


def test_a_worker_back_from_idling_reads_the_sessions_before_a_big_table(db: psycopg.Connection[Any],
                                                                         dsn: str) -> None:
    """One engine session (a worker's): its sampler was last active a minute ago, so what it
    decided then is not gone by; a big table reads the sessions afresh before its first
    transaction and is gentle from its first commit."""
    _shared_sweep_table(db, rows=300_000)
    with Engine(dsn) as engine:
        engine.expire(["t"])  # an idle pass: the sampler started, full speed
        assert engine.pace.samples > 0 and engine.pace.state().duty == 1.0
        db.execute("INSERT INTO t SELECT g, now() - interval '3 days', 'x' FROM generate_series(-1200000, -1) g")
        db.execute("VACUUM t")
        engine.pace._decided = time.time() - 60  # a minute ago
        res, listener = _pass_while_busy(engine, dsn)
    # (the first pass left its blocks empty: the DELETEs' sizes follow the rows, not asserted)
    assert res.rows_deleted > 0 and len(listener.batches) >= 2
    assert all(slowed for _, slowed in listener.batches[1:]), listener.batches[:10]


def _keyed_table(db: psycopg.Connection[Any], expired: int) -> None:
    """Table t: ``expired`` rows 0.1 s apart (~150 bytes each), 1,000 live ones, deleted
    in key windows."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, created_at timestamptz NOT NULL, pad text)")
    db.execute("CREATE INDEX ON t (created_at)")
    db.execute("INSERT INTO t SELECT g, CASE WHEN g <= %s THEN now() - interval '3 days' + g * interval '0.1 s'"
               " ELSE now() END, rpad('x', 100, 'x') FROM generate_series(1, %s::int) g", (expired, expired + 1000))
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'created_at')")
    db.execute("UPDATE ttl.settings SET value = 'index' WHERE name = 'row_strategy'")
    db.execute("ANALYZE t")
    db.commit()


def test_the_engine_goes_on_while_its_sampler_opens(db: psycopg.Connection[Any], dsn: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler opens its session in its own thread: the engine's transactions go on
    meanwhile, and the pace starts from the sampler's first sample once it is in. Here the
    sampler's connect waits for the engine to commit three more transactions: an engine that
    waited for it would commit none. It is opened at the unit's second commit, which projects
    600,000 rows past 0.2 s. (Key windows: a table swept in shared block ranges takes its
    first sample before its first transaction, by design.)"""
    from pg_ttl.expire import pace as pace_module

    _keyed_table(db, 600_000)
    commits = [0]
    more = threading.Event()
    seen: list[int] = []
    real_connect = psycopg.connect

    class Progress:
        def unit_started(self, *args: Any) -> None:
            pass

        def batch_done(self, *args: Any) -> None:
            commits[0] += 1
            if seen and commits[0] >= seen[0] + 3:
                more.set()

        def unit_finished(self, *args: Any) -> None:
            more.set()  # (the table done first: the assertion below says so)

    def slow_connect(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("application_name") != "pg-ttl pace":  # (psycopg's own: the engine's too)
            return real_connect(*args, **kwargs)
        seen.append(commits[0])
        waited = more.wait(30)
        seen.append(commits[0] if waited else -1)
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(pace_module.psycopg, "connect", slow_connect)
    with Engine(dsn) as engine:
        [res] = engine.expire(["t"], progress=Progress())  # type: ignore[arg-type]
        sampler = engine.pace
        deadline = time.monotonic() + 10
        while sampler.samples == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sampler.samples > 0  # it did open, and sample
    assert res.status == "ok" and res.rows_deleted == 600_000
    assert [u.strategy for u in res.units] == ["index"]
    # opened at the second commit (the unit projected long), and the engine went on
    assert len(seen) == 2 and seen[0] == 2 and seen[1] >= 5, seen


def test_a_unit_of_a_few_short_windows_opens_no_sampler(db: psycopg.Connection[Any], dsn: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 expired rows in key windows of 1,000, 4,000 and 15,000 rows: more than one
    window, done long before any pace could apply (0.1 s). The second commit projects the
    rest at the pace of the first two windows, well under 0.2 s: no sampler session is
    opened."""
    from pg_ttl.expire import pace as pace_module

    _keyed_table(db, 20_000)
    opened: list[str] = []
    real_connect = psycopg.connect

    def recording_connect(*args: Any, **kwargs: Any) -> Any:
        opened.append(str(kwargs.get("application_name")))
        return real_connect(*args, **kwargs)

    monkeypatch.setattr(pace_module.psycopg, "connect", recording_connect)
    sizes: list[int] = []

    class Sizes(NullProgress):
        def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
            sizes.append(deleted)

    with Engine(dsn) as engine:
        [res] = engine.expire(["t"], progress=Sizes())
        assert res.status == "ok" and res.rows_deleted == 20_000 and [u.strategy for u in res.units] == ["index"]
        assert sizes == [1000, 4000, 15000]
        assert "pg-ttl pace" not in opened and engine.pace.samples == 0


def test_a_table_of_one_window_opens_no_sampler(db: psycopg.Connection[Any], dsn: str) -> None:
    """A unit whose expired rows fit in one window is done before any pace could apply:
    no sampler session, no sample."""
    db.execute("CREATE TABLE s (id int PRIMARY KEY, created_at timestamptz NOT NULL)")
    db.execute("CREATE INDEX ON s (created_at)")
    db.execute("INSERT INTO s SELECT g, CASE WHEN g <= 500 THEN now() - interval '3 days' ELSE now() END"
               " FROM generate_series(1, 5000) g")
    db.execute("SELECT ttl.enable('s', expire_after => '1 day', column_name => 'created_at')")
    db.execute("ANALYZE s")
    db.commit()
    with Engine(dsn) as engine:
        [res] = engine.expire(["s"])
        assert res.status == "ok" and res.rows_deleted == 500 and [u.strategy for u in res.units] == ["index"]
        assert engine.pace.samples == 0
        assert db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl pace'"
                          ).fetchone() == (0,)
