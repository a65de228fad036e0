"""Engine: what a pass returns (typed results, the engine's own counts) and how its runs end
(the status the database judges; a run closed even when an unexpected error escapes)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import TableResult, UnitResult, columns, expire
from pg_ttl.expire import rows as rows_mod
from pg_ttl.expire.engine import STOPPED

Conn = psycopg.Connection[Any]


@pytest.fixture
def conn(db: Conn) -> Conn:
    db.autocommit = True
    return db


def _events(conn: Conn, table: str = "ev") -> None:
    conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, ts timestamptz NOT NULL, v int)")
    conn.execute(f"INSERT INTO {table} SELECT g, CASE WHEN g <= 5 THEN now() - interval '2 days' ELSE now() END, g "
                 "FROM generate_series(1, 10) g")
    conn.execute(f"SELECT ttl.enable('{table}', expire_after => '1 day', column_name => 'ts')")


def _run(conn: Conn, table: str = "ev") -> tuple[Any, ...]:
    row = conn.execute("SELECT status, error, finished_at IS NOT NULL FROM ttl.run r "
                       "WHERE r.table_name = %s ORDER BY run_id DESC LIMIT 1", (table,)).fetchone()
    assert row is not None
    return tuple(row)


def test_unexpected_error_mid_run_closes_the_run(conn: Conn, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a psycopg error (a bug): the run is failed, with the error, before the error goes on."""
    _events(conn)

    def broken(ctx: Any, strategy: str) -> str:
        raise RuntimeError("engine bug: no strategy for this")

    monkeypatch.setattr(rows_mod, "delete_rows", broken)
    with pytest.raises(RuntimeError, match="engine bug"):
        expire(dsn)
    assert _run(conn) == ("failed", "engine bug: no strategy for this", True)
    assert conn.execute("SELECT status, error FROM ttl.run_unit").fetchall() == [
        ("failed", "engine bug: no strategy for this")]
    # The unit's claim went with it: the next pass (bug gone) does the work.
    monkeypatch.undo()
    [result] = expire(dsn)
    assert (result.status, result.rows_deleted) == ("ok", 5)


def test_unexpected_error_in_a_column_only_run_closes_it(conn: Conn, dsn: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    conn.execute("CREATE TABLE pv (path text PRIMARY KEY, views int)")
    conn.execute("SELECT ttl.enable_column('pv', 'views', '1 hour', 'write')")
    conn.execute("INSERT INTO pv VALUES ('/a', 1)")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("column bug")

    monkeypatch.setattr(columns, "null_batches", broken)
    with pytest.raises(RuntimeError, match="column bug"):
        expire(dsn)
    assert _run(conn, "pv") == ("failed", "column bug", True)


def test_values_nulled_is_the_engines_count(conn: Conn, dsn: str) -> None:
    _events(conn)
    conn.execute("SELECT ttl.enable_column('ev', 'v', '1 hour', 'write')")
    conn.execute("UPDATE ev SET ttl_cell_v = tstzrange(now() - interval '2 hours', now() - interval '1 hour') "
                 "WHERE id IN (6, 7, 8)")
    [result] = expire(dsn)
    assert isinstance(result, TableResult) and all(isinstance(u, UnitResult) for u in result.units)
    assert (result.status, result.rows_deleted, result.values_nulled) == ("ok", 5, 3)
    assert [u.values_nulled for u in result.units] == [3]
    assert conn.execute("SELECT sum(values_nulled) FROM ttl.run_unit WHERE run_id = %s",
                        (result.run_id,)).fetchone() == (3,)


def test_column_only_result_counts_its_values(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE pv (path text PRIMARY KEY, views int)")
    conn.execute("SELECT ttl.enable_column('pv', 'views', '1 hour', 'write')")
    conn.execute("INSERT INTO pv VALUES ('/a', 1), ('/b', 2)")
    conn.execute("UPDATE pv SET ttl_cell_views = tstzrange(now() - interval '2 hours', now() - interval '1 hour')")
    [result] = expire(dsn)
    assert (result.table, result.status, result.values_nulled) == ("pv", "ok", 2)
    assert [(u.unit, u.status, u.values_nulled) for u in result.units] == [("pv", "ok", 2)]


def test_status_is_the_one_the_database_records(conn: Conn, dsn: str) -> None:
    """A unit another run holds: skipped, and a run whose every unit was skipped is 'busy'."""
    _events(conn)
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_catalog.pg_advisory_lock(ttl._claim_key('ev'::regclass))")
        [result] = expire(dsn)
    assert result.status == "busy" == _run(conn)[0]
    assert [(u.action, u.status) for u in result.units] == [("skip", "skipped")]
    assert conn.execute("SELECT action, status, error FROM ttl.run_unit").fetchall() == [
        ("skip", "skipped", "busy: another run is working on it")]


def test_stop_between_units_leaves_a_partial_run(conn: Conn, dsn: str) -> None:
    conn.execute("CREATE TABLE ev (id int, ts timestamptz NOT NULL) PARTITION BY RANGE (ts)")
    conn.execute("CREATE TABLE ev_a PARTITION OF ev FOR VALUES FROM ('2000-01-01') TO ('2050-01-01')")
    conn.execute("CREATE TABLE ev_b PARTITION OF ev DEFAULT")  # visited in every run
    conn.execute("INSERT INTO ev VALUES (1, now() - interval '2 days'), (2, '2160-01-01')")
    conn.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts')")
    stop = threading.Event()

    class StopAfterFirst:
        def unit_started(self, *a: Any) -> None:
            pass

        def batch_done(self, *a: Any) -> None:
            pass

        def unit_finished(self, result: UnitResult) -> None:
            stop.set()

    [result] = expire(dsn, stop=stop, progress=StopAfterFirst())
    assert result.status == "partial" == _run(conn)[0]
    assert [(u.unit, u.status) for u in result.units] == [("ev_a", "ok"), ("ev_b", "skipped")]
    assert conn.execute("SELECT unit_name, status, error FROM ttl.run_unit ORDER BY 1").fetchall() == [
        ("ev_a", "ok", None), ("ev_b", "skipped", STOPPED)]
