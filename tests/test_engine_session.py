"""One engine session for many passes (pg_ttl.expire.Engine), as the worker keeps one per
database: what a pass leaves in the session, and what the next one finds."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pg_ttl.expire import Engine, UnitResult
from pg_ttl.worker import config as config_mod
from pg_ttl.worker.daemon import Worker
from pg_ttl.worker.rounds import Rounds
from tests.conftest import dsn_of
from tests.helpers import ttl_table


def _count(conn: psycopg.Connection[Any], name: str) -> int:
    row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(*name.split(".")))).fetchone()
    assert row is not None
    return int(row[0])


def test_worker_runs_every_table_through_one_engine_session(dsn: str, connect: Any) -> None:
    conn = connect()
    names = [f"t{i}" for i in range(6)]
    for name in names:
        ttl_table(conn, name)
    cfg = config_mod.load({"dsns": [dsn], "allow_superuser": True, "name": "w-one-session"}, environ={})
    assert Worker(cfg, once=True).run() == 0
    assert [_count(conn, name) for name in names] == [5] * len(names)
    sessions = conn.execute("SELECT count(*), count(DISTINCT (backend_pid, backend_start)) FROM ttl.run "
                            "WHERE worker = 'w-one-session'").fetchone()
    assert sessions == (len(names), 1)  # six runs, one engine session


def test_a_run_records_the_session_that_runs_it(dsn: str, connect: Any) -> None:
    """ttl.run's backend_pid and backend_start are the engine session's own, as
    pg_stat_activity shows that session to another: what tells a run still going from one
    whose session died (ttl._session_start)."""
    conn = connect()
    ttl_table(conn, "mine")
    with Engine(dsn) as engine:
        engine.expire(["mine"])
        [run] = conn.execute("SELECT backend_pid, backend_start FROM ttl.run").fetchall()
        assert run[0] == engine.conn.info.backend_pid
        assert conn.execute("SELECT backend_start FROM pg_catalog.pg_stat_activity WHERE pid = %s",
                            (run[0],)).fetchone() == (run[1],)
        assert run[1] is not None


def test_a_run_that_left_nothing_records_no_lag_without_a_query(
        dsn: str, connect: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unit deleted every expired row it met, none held, none done by another run: the
    run left nothing expired, and says so without reading the table again."""
    from pg_ttl.expire import expire, oldest

    conn = connect()
    ttl_table(conn, "clean", expired=10, live=2)

    def must_not_read(*args: Any) -> None:
        raise AssertionError("the run read the oldest expired row though it left none")

    monkeypatch.setattr(oldest, "oldest_left", must_not_read)
    [res] = expire(dsn, ["clean"])
    assert res.status == "ok" and res.rows_deleted == 10
    assert (res.oldest_measured, res.oldest_left) == (True, None)
    assert [u.rows_may_remain for u in res.units] == [False]


def test_a_run_resumed_from_another_runs_checkpoint_reads_what_is_left(
        dsn: str, connect: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit an earlier run did in part (it may have left rows the application held): the
    run reads the oldest expired row at its end."""
    import threading

    from pg_ttl.expire import expire, oldest
    from tests.helpers import StopAfter

    conn = connect()
    conn.execute("CREATE TABLE part (id int PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute("INSERT INTO part SELECT g, now() - interval '3 days' FROM generate_series(1, 3000) g")
    conn.execute("SELECT ttl.enable('part', expire_after => '1 day', column_name => 'created_at', "
                 "delete_batch_size => 100, select_batch_size => 100, delete_rate_limit => 1000000)")
    stop = threading.Event()
    [first] = expire(dsn, ["part"], stop=stop, progress=StopAfter(stop, 2))
    assert first.status == "partial" and not first.oldest_measured  # stopped: not read either
    reads: list[Any] = []
    original = oldest.oldest_left

    def counted(*args: Any) -> Any:
        reads.append(args)
        return original(*args)

    monkeypatch.setattr(oldest, "oldest_left", counted)
    [res] = expire(dsn, ["part"])
    assert res.status == "ok" and res.units[0].rows_may_remain and len(reads) == 1
    assert (res.oldest_measured, res.oldest_left) == (True, None)


def test_worker_lag_is_what_the_run_left(dsn: str, connect: Any) -> None:
    """The run reads what it left at its end: a row the application holds is skipped by the run,
    and the lag metric counts from that row's expiry."""
    conn = connect()
    ttl_table(conn, "held", expired=10, live=2)
    holder = connect(autocommit=False)
    oldest = holder.execute("SELECT id, created_at + interval '1 day' FROM held ORDER BY created_at, id LIMIT 1 "
                            "FOR UPDATE").fetchone()
    assert oldest is not None
    cfg = config_mod.load({"dsns": [dsn], "allow_superuser": True, "name": "w-lag"}, environ={})
    worker = Worker(cfg, once=True, oldest_expired=_must_not_be_called)
    try:
        assert worker.run() == 0
    finally:
        holder.rollback()
    assert _count(conn, "held") == 3  # the held row stayed
    db = cfg.databases[0].name
    assert worker.shared.metrics.lag.lag(db, "held", now=oldest[1] + timedelta(seconds=10)) == 10.0


def _must_not_be_called(conn: psycopg.Connection[Any], relid: int) -> None:
    raise AssertionError("the run measured the lag itself: no separate lookup")


def test_a_pass_that_raises_leaves_no_claim_in_the_session(dsn: str, connect: Any) -> None:
    conn = connect()
    ttl_table(conn, "claimed")

    class Broken:
        """A progress listener with a bug: raises once a unit is claimed and started."""

        def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
            raise RuntimeError("listener bug")

        def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
            pass

        def unit_finished(self, result: UnitResult) -> None:
            pass

    with Engine(dsn) as engine:
        with pytest.raises(RuntimeError, match="listener bug"):
            engine.expire(["claimed"], progress=Broken())
        # The session is still open (as the worker keeps it), yet another session can claim the unit.
        other = conn.execute("SELECT pg_catalog.pg_try_advisory_lock(ttl._claim_key('claimed'::regclass))").fetchone()
        assert other == (True,)
        conn.execute("SELECT pg_catalog.pg_advisory_unlock(ttl._claim_key('claimed'::regclass))")
        # ... and the next pass in the same session works.
        results = engine.expire(["claimed"])
    assert [r.status for r in results] == ["ok"]
    assert _count(conn, "claimed") == 5


def test_engine_session_follows_setting_changes(dsn: str, connect: Any) -> None:
    conn = connect()
    ttl_table(conn, "settings_t")
    with Engine(dsn) as engine:
        engine.expire(["settings_t"])
        conn.execute("UPDATE ttl.settings SET value = '7s' WHERE name = 'statement_timeout'")
        conn.execute("UPDATE ttl.settings SET value = '3s' WHERE name = 'lock_timeout'")
        engine.expire(["settings_t"])
        shown = engine.conn.execute("SELECT current_setting('statement_timeout'), "
                                    "current_setting('lock_timeout')").fetchone()
    assert shown == ("7s", "3s")


def test_names_resolve_in_the_callers_search_path_on_every_pass(db: psycopg.Connection[Any], connect: Any) -> None:
    conn = connect()
    conn.execute("CREATE SCHEMA app")
    ttl_table(conn, "app.events")
    dsn = psycopg.conninfo.make_conninfo(dsn_of(db), options="-c search_path=app,public")
    with Engine(dsn) as engine:
        first = engine.expire(["events"])
        conn.execute("INSERT INTO app.events (created_at) VALUES (now() - interval '3 days')")
        second = engine.expire(["events"])  # the pass before left the engine's own search_path set
        path = engine.conn.execute("SELECT current_setting('search_path')").fetchone()
    assert [r.rows_deleted for r in first + second] == [20, 1]
    assert path == ("pg_catalog, pg_temp",)  # the session's own, between passes


def test_engine_session_lost_is_reopened_by_the_worker(dsn: str, connect: Any, caplog: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's engine session ended by the server while idle (here: terminated between two
    tables, every session checked): the next table gets a new one, and its run succeeds."""
    monkeypatch.setattr(Rounds, "ENGINE_IDLE_CHECK_SECONDS", 0.0)
    conn = connect()
    for name in ("k1", "k2"):
        ttl_table(conn, name)

    class KillsItself(Engine):
        kills = 0

        def expire(self, *args: Any, **kwargs: Any) -> Any:
            results = super().expire(*args, **kwargs)
            if KillsItself.kills == 0:  # after the first table, the session is terminated
                KillsItself.kills += 1
                pid = self.conn.info.backend_pid
                # pg_terminate_backend only signals: wait until the session is gone, as it is
                # when it ended while idle (else the worker's check could still find it alive)
                conn.execute("SELECT pg_catalog.pg_terminate_backend(%s, 10000)", (pid,))
            return results

    cfg = config_mod.load({"dsns": [dsn], "allow_superuser": True, "name": "w-reopen"}, environ={})
    with caplog.at_level(logging.INFO):
        assert Worker(cfg, once=True, engine=KillsItself).run() == 0
    assert (_count(conn, "k1"), _count(conn, "k2")) == (5, 5)
    sessions = conn.execute("SELECT count(DISTINCT (backend_pid, backend_start)) FROM ttl.run "
                            "WHERE worker = 'w-reopen'").fetchone()
    assert sessions == (2,)


def test_a_small_tables_run_is_six_statements_of_the_engine_session(
        dsn: str, connect: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the worker runs a table (the settings and cutoff read with the run's start, in the
    worker's own session): the table's policy with its owner's role, the run's row with its
    predicate, the unit's claim, the unit's start with its strategy, one DELETE, and the run's
    end with the unit's and with the session's own role and search_path back. A run that left
    a row the application holds reads the lag as the owner after its end, then goes back."""
    from pg_ttl.expire.context import PASS_SETTINGS, EngineSettings
    from pg_ttl.expire.engine import SEARCH_PATH

    conn = connect()
    ttl_table(conn, "warm")
    ttl_table(conn, "small", expired=10, live=2)
    ttl_table(conn, "held", expired=10, live=2)
    with Engine(dsn) as engine:
        engine.expire(["warm"])  # a session's first pass also closes dead runs and prunes the history
        sent: list[str] = []
        original = psycopg.Cursor.execute

        def counting(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
            if self.connection is engine.conn:
                sent.append(str(query)[:80])
            return original(self, query, *args, **kwargs)

        def run(table: str) -> Any:
            row = conn.execute("SELECT now(), " + PASS_SETTINGS + " FROM ttl._pass_settings() s").fetchone()
            assert row is not None
            relid = conn.execute("SELECT %s::regclass::oid", (table,)).fetchone()
            assert relid is not None
            sent.clear()
            with monkeypatch.context() as patch:
                patch.setattr(psycopg.Cursor, "execute", counting)
                [res] = engine.expire(relids=[relid[0]], cutoff=row[0], settings=EngineSettings.from_pass_row(row[1:]))
            held = engine.conn.execute(
                "SELECT current_setting('role'), current_setting('search_path'), "
                "(SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory')").fetchone()
            assert held == ("none", SEARCH_PATH, 0)  # its own role and search_path, no claim
            return res

        res = run("small")
        assert res.status == "ok" and res.rows_deleted == 10 and len(sent) == 6, sent
        holder = connect(autocommit=False)
        holder.execute("SELECT 1 FROM held ORDER BY created_at, id LIMIT 1 FOR UPDATE")
        try:
            res = run("held")
        finally:
            holder.rollback()
        assert res.status == "ok" and res.rows_deleted == 9 and res.oldest_left is not None
        # the run's end (its unit's with it), then the lag read as the owner, then the role back
        ends = [i for i, q in enumerate(sent) if "ttl._end_unit" in q]
        assert ends == [len(sent) - 3] and "set_config('role', 'none'" in sent[-1], sent
    ended = conn.execute("SELECT r.table_name, u.status, u.finished_at IS NOT NULL, r.status, r.rows_deleted"
                         " FROM ttl.run r JOIN ttl.run_unit u USING (run_id) WHERE r.table_name <> 'warm'"
                         " ORDER BY r.run_id").fetchall()
    assert ended == [("small", "ok", True, "ok", 10), ("held", "ok", True, "ok", 9)]


def test_worker_sessions_carry_tcp_keepalives_unless_the_dsn_sets_its_own(dsn: str, connect: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that vanishes without closing the connection must not leave a loop blocked in
    a read: the worker's control and engine sessions are opened with TCP keepalives and a user
    timeout (pg_ttl/worker/config.py, DatabaseConfig.connect_dsn); a DSN's own values win."""
    conn = connect()
    ttl_table(conn, "ka")
    seen: dict[str, dict[str, str]] = {}
    real_connect = psycopg.connect

    def recording_connect(*args: Any, **kwargs: Any) -> Any:
        c = real_connect(*args, **kwargs)
        seen[str(kwargs.get("application_name"))] = {
            o.keyword.decode(): o.val.decode() for o in c.pgconn.info if o.val is not None}
        return c

    monkeypatch.setattr(psycopg, "connect", recording_connect)
    mine = psycopg.conninfo.make_conninfo(dsn, keepalives_idle="7")
    cfg = config_mod.load({"dsns": [mine], "allow_superuser": True, "name": "w-keepalive"}, environ={})
    assert Worker(cfg, once=True).run() == 0
    assert _count(conn, "ka") == 5
    for session in ("pg-ttl worker", "pg-ttl engine"):
        got = seen[session]
        assert (got["keepalives"], got["keepalives_interval"], got["keepalives_count"],
                got["tcp_user_timeout"]) == ("1", "10", "6", "120000"), session
        assert got["keepalives_idle"] == "7", session  # the DSN's own
