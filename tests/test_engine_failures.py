"""The engine session (pg_ttl.expire.Engine) after a table's run that went wrong: nothing
left claimed or 'running', and the owner's SQL of a table with column TTLs only run with the
owner's rights, as every other run's.

Tables are owned by unprivileged roles; the engine connects either as the test superuser (the
worst case: its rights must never reach an owner's code, docs/security.md) or as the
least-privilege worker role docs/worker.md documents (NOINHERIT, a member of each owner).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pg_ttl.expire import Engine, expire
from pg_ttl.expire.context import NullProgress, UnitResult
from tests.helpers import checkpointed_table, ttl_table

OWNERS = ("failures_owner_a", "failures_owner_b")
WORKER = "failures_worker"


@pytest.fixture
def roles(db: psycopg.Connection[Any], dsn: str) -> Iterator[dict[str, Any]]:
    """Two table owners, and a worker role as docs/worker.md grants it (NOINHERIT, a member of
    both owners, no rights of its own); a log anyone may write, to see who ran what."""
    db.autocommit = True
    for stmt in (
        f"CREATE ROLE {OWNERS[0]} LOGIN", f"CREATE ROLE {OWNERS[1]} LOGIN",
        f"CREATE ROLE {WORKER} LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT",
        f"GRANT {OWNERS[0]}, {OWNERS[1]} TO {WORKER}",
        f"GRANT CREATE, USAGE ON SCHEMA public TO {OWNERS[0]}, {OWNERS[1]}",
        "CREATE TABLE public.ran (who name, what text)", "GRANT INSERT, SELECT ON public.ran TO PUBLIC",
    ):
        db.execute(stmt)
    conns: dict[str, Any] = {name: psycopg.connect(psycopg.conninfo.make_conninfo(dsn, user=name), autocommit=True)
                             for name in OWNERS}
    conns["worker_dsn"] = psycopg.conninfo.make_conninfo(dsn, user=WORKER)
    yield conns
    for name in OWNERS:
        conns[name].close()
    db.execute(f"DROP OWNED BY {OWNERS[0]}, {OWNERS[1]}, {WORKER} CASCADE")
    db.execute(f"DROP ROLE {OWNERS[0]}, {OWNERS[1]}, {WORKER}")
    db.execute("DROP TABLE IF EXISTS public.ran")


def _column_only_table(owner: psycopg.Connection[Any]) -> None:
    """A table with a column TTL and no table TTL, one value expired; its owner's UPDATE
    trigger logs the role it runs as."""
    owner.execute("CREATE TABLE public.pv (path text PRIMARY KEY, views int)")
    owner.execute("""CREATE FUNCTION public.pv_log() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO public.ran VALUES (current_user, 'trigger'); RETURN NEW; END $$""")
    owner.execute("SELECT ttl.enable_column('pv', 'views', '1 hour', 'write')")
    owner.execute("CREATE TRIGGER pv_log BEFORE UPDATE ON public.pv FOR EACH ROW EXECUTE FUNCTION pv_log()")
    owner.execute("INSERT INTO public.pv VALUES ('/a', 1), ('/b', 2)")
    owner.execute("UPDATE public.pv SET ttl_cell_views = tstzrange(now() - interval '2 hours', "
                  "now() - interval '1 hour') WHERE path = '/a'")


def test_column_only_table_owner_trigger_runs_as_the_owner(db: psycopg.Connection[Any], dsn: str,
                                                           roles: dict[str, Any]) -> None:
    """A table with column TTLs only is nulled as its owner: the UPDATE and the owner's
    triggers run with the owner's rights, never the engine's (here a superuser's)."""
    _column_only_table(roles[OWNERS[0]])
    db.execute("DELETE FROM public.ran")
    results = expire(dsn)  # the test superuser runs the engine, as tests/test_trust.py does
    assert [(r.table, r.status) for r in results] == [("pv", "ok")]
    assert db.execute("SELECT who, what FROM public.ran").fetchall() == [(OWNERS[0], "trigger")]


def test_column_only_table_is_expired_by_the_least_privilege_worker(db: psycopg.Connection[Any],
                                                                    roles: dict[str, Any]) -> None:
    """The worker role docs/worker.md documents (NOINHERIT, a member of the owner, no table
    rights of its own) nulls a column-only table's expired values (as the owner: as itself it
    may not update the table)."""
    _column_only_table(roles[OWNERS[0]])
    db.execute("DELETE FROM public.ran")
    results = expire(roles["worker_dsn"])
    assert [(r.table, r.status, r.error) for r in results] == [("pv", "ok", None)]
    assert db.execute("SELECT path, views FROM public.pv ORDER BY path").fetchall() == [("/a", None), ("/b", 2)]


def test_a_unit_whose_claim_statement_fails_does_not_keep_its_claim(db: psycopg.Connection[Any], dsn: str,
                                                                   connect: Any) -> None:
    """The statement that claims a unit also takes over the earlier run's checkpoint; when it
    fails after the claim (here lock_timeout on the earlier run's ttl.run_unit row, which
    another session holds), the claim, a session advisory lock the rollback does not undo, goes
    too: else every other run (other workers, pg-ttl run, CALL ttl.run()) would skip the table
    as busy for as long as this session (a worker's) lives."""
    checkpointed_table(db, dsn)
    holder = connect(autocommit=False)
    holder.execute("SELECT 1 FROM ttl.run_unit WHERE unit_relid = 't'::regclass FOR UPDATE")
    with Engine(dsn) as engine:
        [failed] = engine.expire(["t"])
        holder.rollback()
        assert failed.status == "failed" and "lock timeout" in (failed.error or "")
        held = engine.conn.execute("SELECT count(*) FROM pg_catalog.pg_locks WHERE pid = pg_backend_pid() "
                                   "AND locktype = 'advisory'").fetchone()
        [other] = expire(dsn, ["t"])  # another session, while the engine session lives on
    assert held == (0,)
    assert other.status == "ok", [(u.status, u.error) for u in other.units]


def test_a_listener_error_after_the_only_unit_still_ends_the_unit(db: psycopg.Connection[Any], dsn: str,
                                                                 connect: Any) -> None:
    """A table's only unit leaves its end (history row, claim, lock_timeout) to the run's end
    statement; when something raises between the two (here the progress listener), the unit
    is still ended: not left 'running' under a run recorded failed."""
    conn = connect()
    ttl_table(conn, "listened")

    class Broken(NullProgress):
        def unit_finished(self, result: UnitResult) -> None:
            raise RuntimeError("listener bug")

    with Engine(dsn) as engine, pytest.raises(RuntimeError, match="listener bug"):
        engine.expire(["listened"], progress=Broken())
    rows = conn.execute("SELECT r.status, u.status, u.finished_at IS NOT NULL FROM ttl.run r "
                        "JOIN ttl.run_unit u USING (run_id)").fetchall()
    assert rows == [("failed", "ok", True)]


def test_a_run_whose_table_changed_owner_is_not_left_running(db: psycopg.Connection[Any],
                                                             roles: dict[str, Any]) -> None:
    """The table changes owner during its run (the worker is a member of both owners): the
    run's end, written as the owner the run started as, is hidden from it by row security (the
    history rows are the new owner's now). The run is reported failed, not ok, and its history
    is closed by the session's own role instead of staying 'running' for as long as the
    worker's session lives (ttl.close_dead_runs closes the runs of dead sessions only)."""
    owner_a = roles[OWNERS[0]]
    ttl_table(owner_a, "moved")

    class OwnerChanges(NullProgress):
        def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
            db.execute(f"ALTER TABLE public.moved OWNER TO {OWNERS[1]}")  # another session, mid-run

    with Engine(roles["worker_dsn"]) as engine:
        [res] = engine.expire(["moved"], progress=OwnerChanges())
        runs = db.execute("SELECT r.status, u.status FROM ttl.run r JOIN ttl.run_unit u USING (run_id)").fetchall()
    assert res.status != "ok", (res.status, [(u.status, u.error) for u in res.units])
    assert runs and all("running" not in row for row in runs), runs
