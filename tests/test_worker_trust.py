"""The worker's trust rules (docs/worker.md): its settings are checked, it refuses superuser and
BYPASSRLS roles unless allowed, one table's failure never ends it, PostgreSQL reads min_job_interval,
and it does its job as a least-privilege role."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from pg_ttl.expire import Engine, oldest_expired
from pg_ttl.worker import config as config_mod
from pg_ttl.worker.daemon import Worker
from pg_ttl.worker.logs import LOGGER_NAME
from pg_ttl.worker.loop import DatabaseLoop
from pg_ttl.worker.rounds import DEFAULT_MIN_INTERVAL
from pg_ttl.worker.schedule import latest_tick
from pg_ttl.worker.status import collect
from tests.helpers import ttl_table

ROOT = Path(__file__).resolve().parent.parent
# Nothing listens here: a setting that got past validation would end in "database unavailable".
NOWHERE = "host=127.0.0.1 port=1 dbname=nowhere connect_timeout=1"


def _count(conn: psycopg.Connection[Any], table: str, expired_only: bool = False) -> int:
    query = sql.SQL("SELECT count(*) FROM {}" + (" WHERE created_at < now() - interval '1 day'"
                                                   if expired_only else "")).format(sql.Identifier(table))
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def _as(dsn: str, **params: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, **params)


def _events(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def _cli_lines(stderr: str) -> list[str]:
    """The command's own error lines (log lines are key=value or JSON)."""
    return [line for line in stderr.splitlines() if line.startswith("pg-ttl:")]


@contextlib.contextmanager
def _roles(admin: psycopg.Connection[Any], *names: str) -> Iterator[None]:
    """Cluster-wide roles for one test: removed (with what they own here) before and after."""
    def drop() -> None:
        for name in names:
            if admin.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", (name,)).fetchone():
                admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))
    drop()
    try:
        yield
    finally:
        drop()


# -- 1. settings ------------------------------------------------------------------------------------------
SECONDS = "must be a number of seconds greater than 0 up to 31536000"


@pytest.mark.parametrize(("flag", "value"), [
    ("--poll-interval", "nan"), ("--poll-interval", "inf"), ("--poll-interval", "-1"), ("--poll-interval", "0"),
    ("--poll-interval", "soon"), ("--poll-interval", "40000000"), ("--max-backoff", "-0.5"),
    ("--shutdown-timeout", "1e400"),
])
def test_bad_flag_is_refused_in_one_line(cli: Any, flag: str, value: str) -> None:
    res = cli("worker", "--once", "--dsn", NOWHERE, flag, value)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"pg-ttl: {flag} {SECONDS}, not {value!r}"], res.stderr


@pytest.mark.parametrize(("line", "key", "accepts"), [
    ("poll_interval = true", "poll_interval", SECONDS),
    ("poll_interval = nan", "poll_interval", SECONDS),
    ("poll_interval = inf", "poll_interval", SECONDS),
    ("poll_interval = -inf", "poll_interval", SECONDS),
    ("poll_interval = '30'", "poll_interval", SECONDS),
    ("poll_interval = -1", "poll_interval", SECONDS),
    ("poll_interval = 0", "poll_interval", SECONDS),
    ("poll_interval = [30]", "poll_interval", SECONDS),
    ("heartbeat_interval = 0", "heartbeat_interval", SECONDS),
    ("min_backoff = false", "min_backoff", SECONDS),
    ("shutdown_timeout = 1e12", "shutdown_timeout", SECONDS),
    ("lag_refresh_interval = -5", "lag_refresh_interval",
     "must be a number of seconds from 0 (off) up to 31536000"),
    ("lag_queries_per_second = nan", "lag_queries_per_second",
     "must be a number of lookups per second, 0 (off) or more"),
    ("allow_superuser = 'yes'", "allow_superuser", "must be true or false"),
    ("allow_superuser = 1", "allow_superuser", "must be true or false"),
    ("name = 5", "name", "must be a string"),
    ("log_level = 3", "log_level", "must be a string"),
])
def test_bad_config_value_is_refused_naming_file_and_key(cli: Any, tmp_path: Path, line: str, key: str,
                                                        accepts: str) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(f"[worker]\n{line}\n")
    res = cli("worker", "--once", "--dsn", NOWHERE, "--config", str(path))
    assert res.returncode == 2
    (only,) = res.stderr.strip().splitlines()
    assert only.startswith(f"pg-ttl: config file {path}: [worker] {key} {accepts}"), only
    assert "Traceback" not in res.stderr


def test_bad_database_name_and_environment_value_are_refused(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    path.write_text(f"[[databases]]\nname = 7\ndsn = '{NOWHERE}'\n")
    res = cli("worker", "--once", "--config", str(path))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"pg-ttl: config file {path}: databases entry 1: name must be a non-empty string (in quotes), not 7"]
    res = cli("worker", "--once", "--dsn", NOWHERE, env={"PGTTL_POLL_INTERVAL": "nan"})
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"pg-ttl: PGTTL_POLL_INTERVAL {SECONDS}, not 'nan'"]


def test_values_in_range_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "worker.toml"
    path.write_text("[worker]\npoll_interval = 2\nmin_backoff = 0.25\nlag_refresh_interval = 0\n"
                    "lag_queries_per_second = 0\nallow_superuser = true\nshutdown_timeout = 31536000\n")
    cfg = config_mod.load({"config": str(path), "max_backoff": "0.5"}, environ={})
    assert (cfg.poll_interval, cfg.min_backoff, cfg.max_backoff) == (2.0, 0.25, 0.5)
    assert (cfg.lag_refresh_interval, cfg.lag_queries_per_second, cfg.allow_superuser) == (0.0, 0.0, True)
    assert cfg.shutdown_timeout == 31536000
    assert config_mod.load({"dsns": ["dbname=x"]}, environ={}).allow_superuser is False


# -- 2. superuser and BYPASSRLS -------------------------------------------------------------------------------
def test_superuser_is_refused_unless_allowed(dsn: str, connect: Any, cli: Any, tmp_path: Path) -> None:
    conn = connect()
    ttl_table(conn, "ev")
    user, dbname = conn.info.user, conn.info.dbname
    assert conn.execute("SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").fetchone() == (
        True,)
    res = cli("worker", "--once", "--dsn", dsn)
    assert res.returncode == 3, res.stderr
    assert "Traceback" not in res.stderr
    (line,) = _cli_lines(res.stderr)
    assert line.startswith(f'pg-ttl: database {dbname}: connected as role "{user}", a superuser; refusing to run:')
    for reason in ("would run table owners' code", "row security would not guard the run history",
                   "dedicated role", "docs/worker.md", "--allow-superuser"):
        assert reason in line
    # Refused before doing anything: no run, no heartbeat, the expired rows are still there.
    assert _count(conn, "ev", expired_only=True) == 20
    assert conn.execute("SELECT count(*) FROM ttl.run").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM ttl.worker").fetchone() == (0,)

    res = cli("worker", "--once", "--dsn", dsn, "--allow-superuser", "--log-format", "json")
    assert res.returncode == 0, res.stderr
    assert [e["role"] for e in _events(res.stderr) if e["msg"].startswith("running with superuser")] == [user]
    assert _count(conn, "ev", expired_only=True) == 0 and _count(conn, "ev") == 5

    # The config file's allow_superuser = true does the same.
    conn.execute("INSERT INTO ev (created_at) VALUES (now() - interval '2 days')")
    conn.execute("DELETE FROM ttl.worker_schedule")  # due again at once
    path = tmp_path / "worker.toml"
    path.write_text("[worker]\nallow_superuser = true\n")
    res = cli("worker", "--once", "--dsn", dsn, "--config", str(path))
    assert res.returncode == 0, res.stderr
    assert _count(conn, "ev", expired_only=True) == 0


PRIVILEGED = {
    # How the worker could end up with too much, and what it must say.
    "bypassrls login": (["CREATE ROLE ttl_t_bypass LOGIN BYPASSRLS"], {"user": "ttl_t_bypass"},
                        'connected as role "ttl_t_bypass", a role with BYPASSRLS'),
    "member of a superuser role": (["CREATE ROLE ttl_t_super NOLOGIN SUPERUSER",
                                    "CREATE ROLE ttl_t_member LOGIN IN ROLE ttl_t_super"], {"user": "ttl_t_member"},
                                   'role "ttl_t_member" is a member of "ttl_t_super", a superuser, and can act as it'),
    # Acting as a plain role while logged in as the superuser: session_user counts.
    "superuser session acting as a plain role": (["CREATE ROLE ttl_t_plain NOLOGIN"],
                                                 {"options": "-c role=ttl_t_plain"},
                                                 'connected as role "{superuser}", a superuser'),
}


@pytest.mark.parametrize("case", sorted(PRIVILEGED))
def test_privileged_roles_are_refused(db: psycopg.Connection[Any], dsn: str, cli: Any, case: str) -> None:
    statements, params, message = PRIVILEGED[case]
    db.autocommit = True
    with _roles(db, "ttl_t_bypass", "ttl_t_member", "ttl_t_super", "ttl_t_plain"):
        for stmt in statements:
            db.execute(stmt)
        res = cli("worker", "--once", "--dsn", _as(dsn, **params))
        assert res.returncode == 3, res.stderr
        (line,) = _cli_lines(res.stderr)
        assert message.format(superuser=db.info.user) in line and "refusing to run" in line, line


# -- 3. one table's failure ------------------------------------------------------------------------------------
def test_a_locked_table_fails_alone(dsn: str, connect: Any, cli: Any) -> None:
    conn = connect()
    ttl_table(conn, "a")
    ttl_table(conn, "b")  # runs after a: due at the same tick, in name order
    conn.execute("UPDATE ttl.settings SET value = '200ms' WHERE name = 'lock_timeout'")
    holder = connect(autocommit=False)
    holder.execute("LOCK TABLE a IN ACCESS EXCLUSIVE MODE")
    try:
        res = cli("worker", "--once", "--dsn", dsn, "--allow-superuser", "--log-format", "json", timeout=60)
    finally:
        holder.rollback()
    events = _events(res.stderr)
    assert not [e for e in events if e["msg"] == "database unavailable"], res.stderr
    assert _count(conn, "b", expired_only=True) == 0 and _count(conn, "b") == 5
    assert _count(conn, "a", expired_only=True) == 20
    # a's failure is in the log, with the server's reason.
    a_problems = [e for e in events if e.get("table") == "a" and e["level"] in ("warning", "error")]
    assert any("lock timeout" in str(e.get("error")) for e in a_problems), res.stderr
    # Exit code as documented: 1 when a run failed (the engine may also report a lock as a
    # partial run, which is not a failure), never 2 (that is "a database could not be served").
    failed = [e for e in events if e["msg"] == "run failed" or (e["msg"] == "run finished"
                                                               and e["status"] == "failed")]
    assert res.returncode == (1 if failed else 0), res.stderr
    assert [e["table"] for e in failed] in ([], ["a"])


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.getMessage(), dict(getattr(record, "fields", {}))))

    def find(self, msg: str, **fields: Any) -> list[dict[str, Any]]:
        return [f for m, f in self.records if m == msg and all(f.get(k) == v for k, v in fields.items())]


@pytest.fixture
def capture() -> Iterator[_Capture]:
    handler = _Capture()
    logger = logging.getLogger(LOGGER_NAME)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _lock(dsn: str, held: psycopg.Connection[Any]) -> None:
    held.execute("LOCK TABLE a IN ACCESS EXCLUSIVE MODE")
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET lock_timeout = '100ms'")
        c.execute("SELECT count(*) FROM a")


def _statement_timeout(dsn: str, held: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET statement_timeout = '50ms'")
        c.execute("SELECT pg_catalog.pg_sleep(5)")


def _privilege(dsn: str, held: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET ROLE pg_monitor")  # a built-in role without rights on the table
        c.execute("SELECT count(*) FROM a")


def _prerequisite(dsn: str, held: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_catalog.currval('a_id_seq')")  # no nextval in this session yet


def _terminated(dsn: str, held: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid())")


# Real server errors the engine may raise; psycopg files the first four under Operational- or
# ProgrammingError, the last one means the session is gone.
ENGINE_ERRORS: dict[str, tuple[Callable[[str, psycopg.Connection[Any]], None], type[psycopg.Error], bool]] = {
    "lock_timeout (55P03)": (_lock, psycopg.errors.LockNotAvailable, False),
    "statement_timeout (57014)": (_statement_timeout, psycopg.errors.QueryCanceled, False),
    "permission (42501)": (_privilege, psycopg.errors.InsufficientPrivilege, False),
    "prerequisite state (55000)": (_prerequisite, psycopg.errors.ObjectNotInPrerequisiteState, False),
    "session terminated (57P01)": (_terminated, psycopg.errors.AdminShutdown, True),
}


@pytest.mark.parametrize("case", list(ENGINE_ERRORS))
def test_engine_error_fails_only_its_table(dsn: str, connect: Any, capture: _Capture, case: str) -> None:
    fail, error_class, lost = ENGINE_ERRORS[case]
    conn = connect()
    ttl_table(conn, "a")
    ttl_table(conn, "b")
    held = connect(autocommit=False)
    raised: list[BaseException] = []

    a_relid = conn.execute("SELECT 'a'::regclass::oid").fetchone()[0]

    class FailingOnA(Engine):
        """The real engine session, failing the way `fail` does when it runs table a."""

        def expire(self, tables: Sequence[str] | None = None, **kwargs: Any) -> Any:
            if kwargs.get("relids") == [a_relid]:
                try:
                    fail(dsn, held)
                except Exception as exc:
                    raised.append(exc)
                    raise
            return super().expire(tables, **kwargs)

    cfg = config_mod.load({"dsns": [dsn], "allow_superuser": True, "name": "w-fail"}, environ={})
    worker = Worker(cfg, once=True, engine=FailingOnA, oldest_expired=oldest_expired)
    try:
        code = worker.run()
    finally:
        held.rollback()
    assert len(raised) == 1 and isinstance(raised[0], error_class), raised
    db = cfg.databases[0].name
    failures = worker.shared.metrics.registry.get_sample_value(
        "pg_ttl_run_failures_total", {"database": db, "table": "a"})
    if lost:
        # The session is gone: it ends (and, not --once, reconnects): exit 2 under --once.
        assert code == 2
        assert capture.find("database unavailable", db=db)
        return
    assert code == 1  # --once: some table's run failed, the others ran
    (logged,) = capture.find("run failed", table="a")  # once
    assert (raised[0].diag.message_primary or "") in logged["error"]
    assert not capture.find("database unavailable")
    assert failures == 1
    assert _count(conn, "b", expired_only=True) == 0 and _count(conn, "b") == 5
    assert _count(conn, "a", expired_only=True) == 20
    rows = dict(conn.execute("SELECT relid::regclass::text, last_status FROM ttl.worker_schedule "
                             "WHERE finished_at IS NOT NULL").fetchall())
    assert rows == {"a": "failed", "b": "ok"}
    # The run lock of a was released: nobody holds it now.
    assert conn.execute("SELECT ttl.worker_running('a'::regclass)").fetchone() == (0,)


# -- 4. min_job_interval, as PostgreSQL reads it --------------------------------------------------------------
@contextlib.contextmanager
def _loop(dsn: str) -> Iterator[DatabaseLoop]:
    """A database loop, not started: its catalog read is called directly."""
    cfg = config_mod.load({"dsns": [dsn], "allow_superuser": True}, environ={})
    worker = Worker(cfg, engine=Engine, oldest_expired=lambda c, r: None)  # never runs a table
    loop = DatabaseLoop(cfg.databases[0], worker.shared)
    try:
        yield loop
    finally:
        loop.wakeup.close()


# What PostgreSQL says; a parser of its own had read each of these as 15 minutes.
INTERVALS = {"2 weeks": 14 * 86400, "1 mon": 30 * 86400, "P1D": 86400, "1 day 12:00:00": 36 * 3600}


@pytest.mark.parametrize("value", list(INTERVALS))
def test_min_job_interval_is_read_by_postgresql(dsn: str, connect: Any, value: str) -> None:
    conn = connect()
    ttl_table(conn, "ev")  # @hourly, enabled under the default minimum
    tick = latest_tick("@hourly", datetime.now(UTC))
    conn.execute("INSERT INTO ttl.worker_schedule (relid, due_at, started_at, finished_at, last_status) "
                 "VALUES ('ev'::regclass, %s, now(), now(), 'ok')", (tick,))
    conn.execute("UPDATE ttl.settings SET value = %s WHERE name = 'min_job_interval'", (value,))
    row = conn.execute("SELECT extract(epoch FROM %s::interval)::float8", (value,)).fetchone()
    assert row == (INTERVALS[value],)
    expected = timedelta(seconds=INTERVALS[value])
    with _loop(dsn) as loop:
        loop.rounds.load_catalog(conn)
        assert loop.scheduler.min_interval == expected
        (entry,) = loop.scheduler.entries.values()
        assert loop.scheduler.next_run(entry, datetime.now(UTC)) == tick + expected
    # pg-ttl status says the same.
    (table,) = collect(conn, estimates=False).tables
    assert table.next_run == tick + expected


def test_min_job_interval_postgresql_cannot_read_falls_back(dsn: str, connect: Any, capture: _Capture) -> None:
    conn = connect()
    ttl_table(conn, "ev")
    try:
        conn.execute("UPDATE ttl.settings SET value = 'fortnight' WHERE name = 'min_job_interval'")
    except psycopg.Error:
        pytest.skip("the database refuses a min_job_interval that is not an interval")
    with _loop(dsn) as loop:
        loop.rounds.load_catalog(conn)
        assert loop.scheduler.min_interval == DEFAULT_MIN_INTERVAL
        assert [e.table for e in loop.scheduler.entries.values()] == ["ev"]  # the poll still works
    (logged,) = capture.find("setting min_job_interval is not a valid interval; using the default")
    assert "fortnight" in logged["error"]


# -- 5. the least-privilege role of docs/worker.md ------------------------------------------------------------
def _doc_role_sql() -> list[str]:
    """The statements of the SQL block docs/worker.md marks as the worker's role, as written there."""
    text = (ROOT / "docs" / "worker.md").read_text()
    match = re.search(r"<!-- worker-role-sql[^>]*-->\s*```sql\n(.*?)```", text, re.S)
    assert match, "docs/worker.md lost its worker-role-sql block"
    body = "\n".join(line for line in match.group(1).splitlines() if not line.lstrip().startswith("--"))
    return [stmt.strip() for stmt in body.split(";") if stmt.strip()]


def test_documented_least_privilege_role_runs_the_worker(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    statements = _doc_role_sql()
    assert statements == ["CREATE ROLE ttl_worker LOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT",
                          "GRANT app_owner TO ttl_worker"]
    db.autocommit = True
    with _roles(db, "ttl_worker", "app_owner"):
        db.execute("CREATE ROLE app_owner NOLOGIN")
        db.execute("GRANT CREATE ON SCHEMA public TO app_owner")
        for stmt in statements:
            db.execute(stmt)
        # Exactly what the page grants: a plain login role, a member of app_owner, no table rights of its own.
        row = db.execute("SELECT rolcanlogin, rolsuper, rolbypassrls, rolinherit FROM pg_catalog.pg_roles "
                         "WHERE rolname = 'ttl_worker'").fetchone()
        assert row == (True, False, False, False)
        assert db.execute("SELECT array_agg(m.roleid::regrole::text) FROM pg_catalog.pg_auth_members m "
                          "WHERE m.member = 'ttl_worker'::regrole").fetchone() == (["app_owner"],)
        assert db.execute("SELECT count(*) FROM information_schema.role_table_grants "
                          "WHERE grantee = 'ttl_worker'").fetchone() == (0,)
        db.execute("SET ROLE app_owner")
        ttl_table(db, "events", expired=30, live=5)
        db.execute("RESET ROLE")

        res = cli("worker", "--once", "--dsn", _as(dsn, user="ttl_worker"), "--name", "least-priv",
                  "--log-format", "json")
        assert res.returncode == 0, res.stderr
        connected = [e["dsn"] for e in _events(res.stderr) if e["msg"] == "connected"]
        assert connected and all("user=ttl_worker" in d for d in connected), res.stderr
        assert _count(db, "events", expired_only=True) == 0 and _count(db, "events") == 5
        runs = db.execute("SELECT status, rows_deleted, worker FROM ttl.run "
                          "WHERE relid = 'events'::regclass").fetchall()
        assert runs == [("ok", 30, "least-priv")]
        assert db.execute("SELECT last_status FROM ttl.worker_schedule").fetchall() == [("ok",)]


def _compose_worker_dsn(text: str) -> str:
    try:
        import yaml
    except ImportError:  # without PyYAML: the PGTTL_DSN line of the worker service's block
        block = text.split("\n  worker:\n", 1)[1]
        found = re.search(r"PGTTL_DSN: (\S+)", block)
        assert found
        return found.group(1)
    return str(yaml.safe_load(text)["services"]["worker"]["environment"]["PGTTL_DSN"])


def test_compose_worker_connects_as_its_own_role(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "./deploy/compose-roles.sql:/docker-entrypoint-initdb.d/" in text
    user = psycopg.conninfo.conninfo_to_dict(_compose_worker_dsn(text))["user"]
    assert user != "postgres"
    db.autocommit = True
    with _roles(db, str(user), "app"):
        db.execute((ROOT / "deploy" / "compose-roles.sql").read_text())  # what the postgres image runs
        assert db.execute("SELECT rolsuper OR rolbypassrls FROM pg_catalog.pg_roles WHERE rolname = %s",
                          (user,)).fetchone() == (False,)
        db.execute("SET ROLE app")  # the demo's table owner
        ttl_table(db, "events")
        db.execute("RESET ROLE")
        res = cli("worker", "--once", "--dsn", _as(dsn, user=str(user)))
        assert res.returncode == 0, res.stderr
        assert _count(db, "events", expired_only=True) == 0
