"""Trust: owners' SQL runs as the owner, history nobody else can forge, runs that
resume where they stopped and are never left 'running', exact comparisons.

Security tests connect as real unprivileged roles; the engine runs as the
test superuser, the worst case (its rights must never reach an owner's code).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import expire, plan
from pg_ttl.expire.context import NullProgress, UnitResult
from tests.helpers import StopAfter, catalog_state, checkpointed_table

C = datetime(2026, 3, 31, 0, 0, tzinfo=UTC)


@pytest.fixture
def roles(db: psycopg.Connection[Any], dsn: str) -> Iterator[dict[str, psycopg.Connection[Any]]]:
    """alice owns tables; bob and mallory are unrelated roles."""
    db.autocommit = True
    for stmt in (
        "CREATE ROLE alice LOGIN", "CREATE ROLE bob LOGIN", "CREATE ROLE mallory LOGIN",
        "CREATE SCHEMA shared", "GRANT CREATE, USAGE ON SCHEMA public, shared TO alice, bob, mallory",
        # a log anyone may write, to see who ran what
        "CREATE TABLE public.ran (who name, what text)", "GRANT INSERT, SELECT ON public.ran TO PUBLIC",
    ):
        db.execute(stmt)
    conns = {name: psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user=name), autocommit=True)
             for name in ("alice", "bob", "mallory")}
    yield conns
    for conn in conns.values():
        conn.close()
    db.execute("DROP OWNED BY alice, bob, mallory CASCADE")
    db.execute("DROP ROLE alice, bob, mallory")
    db.execute("DROP SCHEMA shared CASCADE")


def _ran(db: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    return [(str(a), str(b)) for a, b in db.execute("SELECT who, what FROM public.ran ORDER BY 1, 2").fetchall()]


def _is_superuser(db: psycopg.Connection[Any], role: str) -> bool:
    row = db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    return bool(row and row[0])


def _owner_table(alice: psycopg.Connection[Any]) -> None:
    """alice's table whose expression and trigger log current_user (and try to escalate)."""
    # Declared STABLE (volatile expressions are refused), but it calls a volatile
    # helper that writes and tries to make alice a superuser.
    alice.execute("""
        CREATE FUNCTION public.escalate() RETURNS void LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            INSERT INTO public.ran VALUES (current_user, 'expression');
            BEGIN
                EXECUTE 'ALTER ROLE alice SUPERUSER';
            EXCEPTION WHEN insufficient_privilege THEN NULL;
            END;
        END $$""")
    alice.execute("""
        CREATE FUNCTION public.exp_of(t timestamptz) RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
        BEGIN PERFORM public.escalate(); RETURN t; END $$""")
    alice.execute("CREATE TABLE public.items (id int PRIMARY KEY, expire_at timestamptz)")
    alice.execute("""
        CREATE FUNCTION public.on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.ran VALUES (current_user, 'trigger'); RETURN OLD; END $$""")
    alice.execute("CREATE TRIGGER log_delete BEFORE DELETE ON public.items FOR EACH ROW EXECUTE FUNCTION on_delete()")
    alice.execute("INSERT INTO public.items VALUES (1, '2020-01-01'), (2, '2999-01-01')")
    alice.execute("SELECT ttl.enable('items', expiration_expression => 'exp_of(expire_at)')")


def test_checking_an_expression_runs_none_of_it(db: psycopg.Connection[Any],
                                                roles: dict[str, psycopg.Connection[Any]]) -> None:
    """The ALTER TABLE check (an event trigger) only parses the owner's expression: a
    superuser altering the table does not run it, so the owner cannot escalate."""
    _owner_table(roles["alice"])
    db.execute("DELETE FROM public.ran")
    db.execute("ALTER TABLE public.items ADD COLUMN note text")  # as the superuser
    roles["alice"].execute("ALTER TABLE public.items ADD COLUMN more text")
    assert _ran(db) == []
    assert not _is_superuser(db, "alice")


def test_engine_runs_owner_code_as_the_owner(db: psycopg.Connection[Any], dsn: str,
                                             roles: dict[str, psycopg.Connection[Any]]) -> None:
    _owner_table(roles["alice"])
    db.execute("DELETE FROM public.ran")
    [result] = expire(dsn, ["items"])  # the test superuser runs the engine
    assert result.status == "ok" and result.rows_deleted == 1, (result.error, result.units)
    ran = _ran(db)
    assert ("alice", "expression") in ran and ("alice", "trigger") in ran
    assert {who for who, _ in ran} == {"alice"}
    assert not _is_superuser(db, "alice")
    # and the engine's session is back to its own role afterwards
    assert db.execute("SELECT current_user").fetchone() == (db.info.user,)


def test_call_run_and_plan_run_owner_code_as_the_owner(db: psycopg.Connection[Any], dsn: str,
                                                       roles: dict[str, psycopg.Connection[Any]]) -> None:
    _owner_table(roles["alice"])
    db.execute("DELETE FROM public.ran")
    plan(db, "items")
    assert {who for who, _ in _ran(db)} == {"alice"}
    db.execute("DELETE FROM public.ran")
    db.execute("CALL ttl.run('items')")
    ran = _ran(db)
    assert ("alice", "trigger") in ran and {who for who, _ in ran} == {"alice"}
    assert db.execute("SELECT current_user").fetchone() == (db.info.user,)
    assert db.execute("SELECT id FROM public.items").fetchall() == [(2,)]
    assert not _is_superuser(db, "alice")


def test_status_estimates_run_owner_code_as_the_owner(db: psycopg.Connection[Any],
                                                     roles: dict[str, psycopg.Connection[Any]]) -> None:
    """`pg-ttl worker status` plans the expression for its backlog estimate; planning runs
    immutable functions of constants, so that too runs as the owner."""
    from pg_ttl.worker.status import collect

    alice = roles["alice"]
    alice.execute("""
        CREATE FUNCTION public.log_grace() RETURNS void LANGUAGE sql VOLATILE
        AS $$ INSERT INTO public.ran VALUES (current_user, 'grace') $$""")
    alice.execute("""
        CREATE FUNCTION public.grace(days int) RETURNS interval LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN PERFORM public.log_grace(); RETURN days * interval '1 day'; END $$""")
    alice.execute("CREATE TABLE public.items (id int PRIMARY KEY, expire_at timestamptz)")
    alice.execute("INSERT INTO public.items SELECT g, '2020-01-01' FROM generate_series(1, 50) g")
    alice.execute("ANALYZE public.items")
    alice.execute("SELECT ttl.enable('items', expiration_expression => 'expire_at + public.grace(1)')")
    db.execute("DELETE FROM public.ran")
    [table] = collect(db, "items").tables
    assert table.backlog and table.oldest_expired is not None
    ran = _ran(db)
    assert ran and {who for who, _ in ran} == {"alice"}
    assert db.execute("SELECT current_user").fetchone() == (db.info.user,)
    # a role that cannot act as the owner gets no estimate, and runs none of the owner's code
    db.execute("DELETE FROM public.ran")
    [other] = collect(roles["bob"], "items").tables
    assert other.backlog is None and other.oldest_expired is None
    assert _ran(db) == []


def test_user_operator_in_the_tables_schema_is_never_used(db: psycopg.Connection[Any], dsn: str,
                                                          roles: dict[str, psycopg.Connection[Any]]) -> None:
    """mallory may create objects in alice's schema: her <= on timestamptz must not run."""
    alice, mallory = roles["alice"], roles["mallory"]
    alice.execute("CREATE TABLE shared.events (id int, expire_at timestamptz)")
    alice.execute("INSERT INTO shared.events VALUES (1, '2020-01-01'), (2, '2999-01-01')")
    alice.execute("SELECT ttl.enable('shared.events', expiration_expression => 'expire_at + interval ''1 day''')")
    mallory.execute("""
        CREATE FUNCTION shared.log(what text) RETURNS void LANGUAGE sql VOLATILE
        AS $$ INSERT INTO public.ran VALUES (current_user, what) $$""")
    mallory.execute("""
        CREATE FUNCTION shared.le(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN PERFORM shared.log('operator'); RETURN true; END $$""")
    mallory.execute("CREATE OPERATOR shared.<= (FUNCTION = shared.le, LEFTARG = timestamptz, RIGHTARG = timestamptz)")
    mallory.execute("""
        CREATE FUNCTION shared.plus(a timestamptz, b interval) RETURNS timestamptz LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN PERFORM shared.log('plus'); RETURN a OPERATOR(pg_catalog.+) b; END $$""")
    mallory.execute("CREATE OPERATOR shared.+ (FUNCTION = shared.plus, LEFTARG = timestamptz, RIGHTARG = interval)")
    [result] = expire(dsn, ["shared.events"])
    db.execute("CALL ttl.run('shared.events')")
    plan(db, "shared.events")
    assert result.rows_deleted == 1
    assert db.execute("SELECT id FROM shared.events").fetchall() == [(2,)]
    assert _ran(db) == []


def test_history_is_written_only_by_the_tables_owners(db: psycopg.Connection[Any], dsn: str,
                                                      roles: dict[str, psycopg.Connection[Any]]) -> None:
    alice, bob = roles["alice"], roles["bob"]
    alice.execute("CREATE TABLE public.logs (id int, created_at timestamptz)")
    alice.execute("SELECT ttl.enable('logs', expire_after => '1 day', column_name => 'created_at')")
    [result] = expire(dsn, ["logs"])
    run_id = result.run_id
    before = db.execute("SELECT * FROM ttl.run ORDER BY run_id").fetchall()
    units_before = db.execute("SELECT * FROM ttl.run_unit ORDER BY run_id, unit_relid").fetchall()
    # bob reads, but his writes reach nothing (row security) or are refused
    assert bob.execute("SELECT count(*) FROM ttl.run WHERE run_id = %s", (run_id,)).fetchone() == (1,)
    assert bob.execute("UPDATE ttl.run SET status = 'failed' WHERE run_id = %s", (run_id,)).rowcount == 0
    assert bob.execute("UPDATE ttl.run_unit SET checkpoint = '{}' WHERE run_id = %s", (run_id,)).rowcount == 0
    assert bob.execute("DELETE FROM ttl.run_unit WHERE run_id = %s", (run_id,)).rowcount == 0
    assert bob.execute("DELETE FROM ttl.run WHERE run_id = %s", (run_id,)).rowcount == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # a forged 'ok' run for the next cutoff
        bob.execute("INSERT INTO ttl.run (relid, table_name, cutoff, status) "
                    "VALUES ('logs'::regclass, 'logs', now(), 'ok')")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        bob.execute("INSERT INTO ttl.run_unit (run_id, unit_relid, unit_name, action, status) "
                    "VALUES (%s, 'logs'::regclass, 'logs', 'delete', 'ok')", (run_id,))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):  # nor pose as another role's worker
        bob.execute("INSERT INTO ttl.worker (name, host, pid, version, role) VALUES ('w', 'h', 1, 'x', 'alice')")
    assert db.execute("SELECT * FROM ttl.run ORDER BY run_id").fetchall() == before
    assert db.execute("SELECT * FROM ttl.run_unit ORDER BY run_id, unit_relid").fetchall() == units_before
    # the owner may (e.g. to clear their own history)
    assert alice.execute("UPDATE ttl.run SET error = 'note' WHERE run_id = %s", (run_id,)).rowcount == 1


def test_non_owner_call_run_is_refused_and_leaves_nothing(db: psycopg.Connection[Any],
                                                          roles: dict[str, psycopg.Connection[Any]]) -> None:
    alice, bob = roles["alice"], roles["bob"]
    alice.execute("CREATE TABLE public.logs (id int, created_at timestamptz)")
    alice.execute("GRANT SELECT, DELETE ON public.logs TO bob")
    alice.execute("SELECT ttl.enable('logs', expire_after => '1 day', column_name => 'created_at')")
    state = catalog_state(db)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match=r"owner of table (public\.)?logs"):
        bob.execute("CALL ttl.run('logs')")
    assert db.execute("SELECT count(*) FROM ttl.run").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM ttl.run_unit").fetchone() == (0,)
    assert catalog_state(db) == state
    # CALL ttl.run() for every table skips the ones bob cannot act for, with a warning
    notices: list[str] = []
    bob.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
    bob.execute("CALL ttl.run()")
    assert any("logs" in n and "skipped" in n for n in notices)
    assert db.execute("SELECT count(*) FROM ttl.run").fetchone() == (0,)


# -- resume ------------------------------------------------------------------------

def _last_unit(db: psycopg.Connection[Any]) -> tuple[Any, ...]:
    row = db.execute("SELECT status, checkpoint, resumed_from, strategy FROM ttl.run_unit "
                     "ORDER BY run_id DESC LIMIT 1").fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize("strategy", ["ctid", "index"])
def test_a_stopped_run_resumes_where_it_stopped(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                strategy: str) -> None:
    """The next run starts at the checkpoint: an expired row before it (held by an
    application lock during the first run) is not revisited until a fresh run."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz)")
    db.execute("CREATE INDEX ON t (v)")
    # id 1 is the oldest and sits in block 0; 20,000 expired rows after it
    db.execute("INSERT INTO t SELECT g, timestamptz '2020-01-01' + g * interval '1 second' "
               "FROM generate_series(1, 20000) g")
    db.execute("INSERT INTO t SELECT g, '2999-01-01' FROM generate_series(20001, 20100) g")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v', delete_batch_size => 500, "
               "select_batch_size => 2000)")
    db.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_strategy'", (strategy,))
    db.execute("ANALYZE t")
    db.commit()
    app = connect(autocommit=False)
    app.execute("SELECT 1 FROM t WHERE id = 1 FOR UPDATE")  # the application holds row 1
    stop = threading.Event()
    [first] = expire(dsn, ["t"], stop=stop, progress=StopAfter(stop, 3))
    assert first.status == "partial"
    status, checkpoint, resumed_from, used = _last_unit(db)
    assert status == "partial" and checkpoint is not None and resumed_from is None and used == strategy
    deleted_first = first.rows_deleted
    assert 0 < deleted_first < 20000
    app.rollback()  # row 1 is free now, and expired

    [second] = expire(dsn, ["t"])
    status, _, resumed_from, used = _last_unit(db)
    assert resumed_from == checkpoint and used == strategy  # it started where the first one stopped
    assert status == "ok"
    # row 1 lies before the checkpoint: the resumed run did not go back for it
    assert db.execute("SELECT id FROM t WHERE id = 1").fetchall() == [(1,)]
    assert deleted_first + second.rows_deleted == 19999
    [third] = expire(dsn, ["t"])  # a fresh run starts from the beginning
    assert _last_unit(db)[2] is None
    assert third.rows_deleted == 1
    assert db.execute("SELECT min(id), count(*) FROM t").fetchone() == (20001, 100)


def test_call_run_resumes_from_the_engines_checkpoint(db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz)")
    db.execute("INSERT INTO t SELECT g, '2020-01-01' FROM generate_series(1, 20000) g")
    db.execute("SELECT ttl.enable('t', expire_after => '1 day', column_name => 'v', delete_batch_size => 500)")
    db.execute("UPDATE ttl.settings SET value = 'ctid' WHERE name = 'row_strategy'")
    db.execute("ANALYZE t")
    db.commit()
    app = connect(autocommit=False)
    app.execute("SELECT 1 FROM t WHERE id = 1 FOR UPDATE")
    stop = threading.Event()
    expire(dsn, ["t"], stop=stop, progress=StopAfter(stop, 2))
    checkpoint = _last_unit(db)[1]
    app.rollback()
    db.commit()
    db.autocommit = True
    db.execute("CALL ttl.run('t')")
    status, _, resumed_from, _ = _last_unit(db)
    assert resumed_from == checkpoint and status == "ok"
    assert db.execute("SELECT id FROM t").fetchall() == [(1,)]  # before the checkpoint: left for a fresh run


def test_a_run_that_cannot_start_a_unit_keeps_its_resume_point(db: psycopg.Connection[Any], dsn: str,
                                                                connect: Any) -> None:
    """CALL ttl.run() takes over the engine's checkpoint but meets a lock on the table:
    its unit ends 'timeout' still holding that checkpoint, and the next run resumes there."""
    checkpointed_table(db, dsn)
    checkpoint = _last_unit(db)[1]
    assert checkpoint is not None
    db.commit()
    holder = connect(autocommit=False)
    holder.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
    db.autocommit = True
    db.execute("CALL ttl.run('t')")
    status, kept, resumed_from, _ = _last_unit(db)
    assert (status, kept, resumed_from) == ("timeout", checkpoint, checkpoint)
    holder.rollback()
    [resumed] = expire(dsn, ["t"])
    assert _last_unit(db)[2] == checkpoint and resumed.status == "ok"


# -- runs never left 'running' ------------------------------------------------------

@pytest.mark.slow
def test_runs_of_a_killed_session_are_closed_as_interrupted(db: psycopg.Connection[Any], dsn: str,
                                                            connect: Any) -> None:
    """A CALL ttl.run() killed mid-unit, and a run killed before its first unit: the
    next pass closes both as 'interrupted' and resumes the unit from its checkpoint."""
    db.execute("CREATE TABLE t (id int PRIMARY KEY, v timestamptz)")
    db.execute("CREATE TABLE u (id int PRIMARY KEY, v timestamptz)")
    db.execute("INSERT INTO t SELECT g, '2020-01-01' FROM generate_series(1, 2000) g")
    # every row costs 5 ms to check: the procedure is surely mid-unit when killed
    db.execute("CREATE FUNCTION slow(ts timestamptz) RETURNS timestamptz LANGUAGE sql STABLE"
               " AS $$ SELECT ts + (pg_sleep(0.005) IS NULL)::int * interval '0' $$")
    db.execute("SELECT ttl.enable('t', expiration_expression => 'slow(v)', delete_batch_size => 100)")
    db.execute("SELECT ttl.enable('u', expire_after => '1 day', column_name => 'v')")
    db.commit()
    victim = connect()
    pid = victim.info.backend_pid
    worker = threading.Thread(target=lambda: _swallow(victim, "CALL ttl.run('t')"))
    worker.start()
    killer = connect()
    for _ in range(200):
        row = killer.execute("SELECT rows_deleted FROM ttl.run_unit ORDER BY run_id DESC LIMIT 1").fetchone()
        if row and row[0] > 0:
            break
        threading.Event().wait(0.05)
    killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
    worker.join(30)
    # a run whose session died before its first unit
    early = connect()
    early.execute("INSERT INTO ttl.run (relid, table_name, cutoff) VALUES ('u'::regclass, 'u', now())")
    early.close()
    threading.Event().wait(0.2)
    assert db.execute("SELECT count(*) FROM ttl.run WHERE status = 'running'").fetchone() == (2,)
    db.commit()
    killed_cp = db.execute("SELECT checkpoint FROM ttl.run_unit WHERE status = 'running'").fetchone()
    assert killed_cp is not None and killed_cp[0] is not None
    expire(dsn, ["u"])  # any pass closes them
    assert db.execute("SELECT count(*) FROM ttl.run WHERE status = 'running'").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM ttl.run_unit WHERE status = 'running'").fetchone() == (0,)
    assert db.execute("SELECT count(*) FROM ttl.run WHERE status = 'interrupted'").fetchone() == (2,)
    [resumed] = expire(dsn, ["t"])
    assert _last_unit(db)[2] == killed_cp[0]
    assert resumed.status == "ok"


def _swallow(conn: psycopg.Connection[Any], stmt: str) -> None:
    with contextlib.suppress(psycopg.Error):  # the session is killed mid-statement
        conn.execute(stmt)


# -- one table's trouble stays that table's ----------------------------------------------

def test_a_lock_on_one_partition_fails_only_that_unit(db: psycopg.Connection[Any], dsn: str, connect: Any) -> None:
    db.execute("CREATE TABLE p (id int, k int, v timestamptz) PARTITION BY LIST (k)")
    db.execute("CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1)")
    db.execute("CREATE TABLE p2 PARTITION OF p FOR VALUES IN (2)")
    db.execute("INSERT INTO p SELECT g, 1 + g % 2, '2020-01-01' FROM generate_series(1, 100) g")
    db.execute("SELECT ttl.enable('p', expire_after => '1 day', column_name => 'v')")
    db.execute("UPDATE ttl.settings SET value = '200ms' WHERE name = 'lock_timeout'")
    db.commit()
    holder = connect(autocommit=False)
    holder.execute("LOCK TABLE p1 IN ACCESS EXCLUSIVE MODE")
    [result] = expire(dsn, ["p"])
    units = {u.unit: u for u in result.units}
    assert units["p1"].status == "timeout" and units["p2"].status == "ok" and units["p2"].rows_deleted == 50
    assert result.status == "partial"
    db.autocommit = True
    db.execute("CALL ttl.run('p')")  # the procedure too: a timeout for p1, not a wait
    assert db.execute("SELECT status FROM ttl.run_unit WHERE unit_name = 'p1' ORDER BY run_id DESC LIMIT 1"
                      ).fetchone() == ("timeout",)
    holder.rollback()
    assert db.execute("SELECT count(*) FROM ttl.run WHERE status = 'running'").fetchone() == (0,)


def test_a_partition_dropped_during_the_run_is_skipped(db: psycopg.Connection[Any], dsn: str,
                                                       connect: Any) -> None:
    db.execute("CREATE TABLE p (id int, k int, v timestamptz) PARTITION BY LIST (k)")
    for k in (1, 2, 3):
        db.execute(f"CREATE TABLE p{k} PARTITION OF p FOR VALUES IN ({k})")
    db.execute("INSERT INTO p SELECT g, 1 + g % 3, '2020-01-01' FROM generate_series(1, 300) g")
    db.execute("SELECT ttl.enable('p', expire_after => '1 day', column_name => 'v')")
    db.commit()
    other = connect()

    class DropNext(NullProgress):
        def unit_finished(self, result: UnitResult) -> None:
            if result.unit == "p1":
                other.execute("DROP TABLE p2")

    [result] = expire(dsn, ["p"], progress=DropNext())
    units = {u.unit: u for u in result.units}
    assert units["p1"].status == "ok" and units["p3"].status == "ok" and units["p3"].rows_deleted == 100
    assert units["p2"].status == "skipped" and "dropped" in (units["p2"].error or "")
    assert result.status != "failed"
    assert db.execute("SELECT count(*) FROM ttl.run_unit WHERE status = 'running'").fetchone() == (0,)


def test_one_failing_table_does_not_stop_the_others(db: psycopg.Connection[Any], dsn: str) -> None:
    db.execute("CREATE TABLE a_bad (id int, v timestamptz)")
    db.execute("CREATE TABLE b_good (id int, v timestamptz)")
    db.execute("INSERT INTO a_bad VALUES (0, '2020-01-01'), (1, '2020-01-01')")
    db.execute("INSERT INTO b_good VALUES (1, '2020-01-01')")
    # fails at run time on row 0 (division by zero)
    db.execute("SELECT ttl.enable('a_bad', expiration_expression => 'v + (1 / id) * interval ''1 day''')")
    db.execute("SELECT ttl.enable('b_good', expire_after => '1 day', column_name => 'v')")
    db.commit()
    results = {r.table: r for r in expire(dsn)}
    assert results["a_bad"].status == "failed" and "division by zero" in (results["a_bad"].error or "")
    assert results["b_good"].status == "ok" and results["b_good"].rows_deleted == 1


# -- bad input refused -------------------------------------------------------------------

@pytest.mark.parametrize("expression", ["v + random() * interval '1 day'", "clock_timestamp()",
                                        "v + (SELECT interval '1 day')", "max(v)"])
def test_unstable_or_non_row_expressions_are_refused(db: psycopg.Connection[Any], expression: str) -> None:
    db.execute("CREATE TABLE t (id int, v timestamptz)")
    db.commit()
    state = catalog_state(db)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match=r"volatile|subqueries"):
        db.execute("SELECT ttl.enable('t', expiration_expression => %s)", (expression,))
    db.rollback()
    assert catalog_state(db) == state


@pytest.mark.parametrize("after", ["10000 years", "100000000 years"])
def test_expire_after_beyond_the_timestamp_range_is_refused(db: psycopg.Connection[Any], after: str) -> None:
    db.execute("CREATE TABLE t (id int, v timestamptz)")
    db.commit()
    state = catalog_state(db)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="too large"):
        db.execute("SELECT ttl.enable('t', expire_after => %s, column_name => 'v')", (after,))
    db.rollback()
    assert catalog_state(db) == state


# -- exact comparisons -------------------------------------------------------------------

NS_AT = 1772236800 * 10**9  # 2026-02-28 00:00:00 UTC in ns: + '1 month 3 days' = C exactly


@pytest.mark.parametrize(("coltype", "unit", "at", "step"), [
    ("bigint", "nanoseconds", NS_AT, 1),
    ("numeric", "seconds", Decimal(NS_AT) / 10**9, Decimal("0.0000000001")),
    ("numeric", "milliseconds", Decimal(NS_AT) / 10**6, Decimal("0.0000001")),
])
def test_month_intervals_compare_exactly_below_a_microsecond(db: psycopg.Connection[Any], dsn: str,
                                                             coltype: str, unit: str, at: Any, step: Any) -> None:
    """A value expiring a fraction of a microsecond after the cutoff stays; one at it goes."""
    db.execute(f"CREATE TABLE t (id int, v {coltype})")
    db.execute("INSERT INTO t VALUES (1, %s), (2, %s), (3, %s)", (at, at + step, at - step))
    db.execute("SELECT ttl.enable('t', expire_after => '1 month 3 days', column_name => 'v', unit => %s)", (unit,))
    db.commit()
    expire(dsn, ["t"], cutoff=C)
    assert db.execute("SELECT id FROM t ORDER BY id").fetchall() == [(2,)]
    # ttl.expires_at() agrees: the instant is never before the value's own
    assert db.execute("SELECT ttl.expires_at(t) > %s FROM t", (C,)).fetchall() == [(True,)]
