"""Engine end to end through `pg-ttl run` / `pg-ttl plan` as real processes: kill -9 and
resume, two concurrent runs, output and errors, standby refusal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pg_ttl.localserver import LocalServer


def _plain(text: str) -> str:
    """Terminal output without its colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _events(db: psycopg.Connection[Any], n: int, partitions: int = 0, **options: Any) -> None:
    """ev: n rows, odd ids expired (2020), even ids live (2099)."""
    if partitions:
        db.execute("CREATE TABLE ev (id int PRIMARY KEY, ts timestamptz, pad text) PARTITION BY HASH (id)")
        for r in range(partitions):
            db.execute(f"CREATE TABLE ev_{r} PARTITION OF ev FOR VALUES WITH (MODULUS {partitions}, REMAINDER {r})")
    else:
        db.execute("CREATE TABLE ev (id int PRIMARY KEY, ts timestamptz, pad text)")
    db.execute("""INSERT INTO ev SELECT g, CASE WHEN g %% 2 = 1 THEN timestamptz '2020-01-01' + g * interval '1 s'
                                               ELSE timestamptz '2099-01-01' END, repeat('x', 20)
                    FROM generate_series(1, %s) g""", (n,))
    db.execute("ANALYZE ev")
    opts = "".join(f", {k} => {v!r}" for k, v in options.items())
    db.execute(f"SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts'{opts})")
    db.commit()


def _pg_ttl(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "pg_ttl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_engine_gone(conn: psycopg.Connection[Any]) -> None:
    """The server notices a killed client at its next read; wait for that backend to exit."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg-ttl engine'"
                           " AND datname = current_database()").fetchone()
        if row == (0,):
            return
        time.sleep(0.05)
    raise AssertionError("the killed run's backend is still there")


@pytest.mark.slow
@pytest.mark.parametrize("index", [False, True], ids=["ctid", "index"])
def test_kill9_mid_run_then_resume_loses_nothing(db: psycopg.Connection[Any], dsn: str, connect: Any,
                                                 index: bool) -> None:
    n = 60_000
    _events(db, n, delete_batch_size=500, select_batch_size=2000, delete_rate_limit=10_000)
    if index:
        db.execute("CREATE INDEX ON ev (ts)")
        db.commit()
    watch = connect()
    proc = _pg_ttl("run", "--once", "--quiet", "ev", "--dsn", dsn)
    deadline = time.monotonic() + 20
    deleted = 0
    while time.monotonic() < deadline:
        row = watch.execute("SELECT coalesce(sum(rows_deleted), 0) FROM ttl.run_unit").fetchone()
        deleted = int(row[0]) if row else 0
        if deleted >= 3000:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    assert 3000 <= deleted < n // 2, "the run should have been killed mid-way"
    _wait_engine_gone(watch)
    # every committed delete is counted exactly, and nothing live was touched
    counted = watch.execute("SELECT rows_deleted, status, checkpoint IS NOT NULL FROM ttl.run_unit").fetchone()
    left = watch.execute("SELECT count(*) FILTER (WHERE id % 2 = 1), count(*) FILTER (WHERE id % 2 = 0) FROM ev"
                         ).fetchone()
    assert counted is not None and left is not None
    assert counted[1] == "running" and counted[2]
    assert left == (n // 2 - counted[0], n // 2)

    watch.execute("SELECT ttl.set_option('ev', 'delete_rate_limit', '0')")
    proc = _pg_ttl("run", "--once", "--quiet", "ev", "--dsn", dsn)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert watch.execute("SELECT count(*) FILTER (WHERE id % 2 = 1), count(*) FROM ev").fetchone() == (0, n // 2)
    runs = watch.execute("SELECT r.status, u.status, u.rows_deleted FROM ttl.run r JOIN ttl.run_unit u USING (run_id)"
                         " ORDER BY run_id").fetchall()
    assert [(r[0], r[1]) for r in runs] == [("interrupted", "interrupted"), ("ok", "ok")]
    assert sum(r[2] for r in runs) == n // 2  # no row counted twice, none missed
    # the second run resumed from the checkpoint, not from the start
    assert runs[1][2] == n // 2 - counted[0]


def test_sigterm_stops_a_run_after_its_batch(db: psycopg.Connection[Any], dsn: str,
                                              connect: Any) -> None:
    """SIGTERM while the run rests between rate-limited batches (in stop.wait()): it stops at once,
    after the batch it was on, says so, exits 0; the history counts what went."""
    n = 40_000
    _events(db, n, delete_batch_size=500, delete_rate_limit=2_000)
    watch = connect()
    proc = _pg_ttl("run", "ev", "--dsn", dsn)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = watch.execute("SELECT coalesce(sum(rows_deleted), 0) FROM ttl.run_unit").fetchone()
        if row and row[0] >= 1000:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=10)
    assert time.monotonic() - sent < 3, "the run did not stop promptly"
    assert proc.returncode == 0, err
    assert "Stopped after the current batch" in _plain(out)
    run = watch.execute("SELECT r.status, u.rows_deleted FROM ttl.run r JOIN ttl.run_unit u USING (run_id)").fetchone()
    left = watch.execute("SELECT count(*) FILTER (WHERE id % 2 = 1) FROM ev").fetchone()
    assert run is not None and left is not None
    assert run[0] == "partial" and 1000 <= run[1] < n // 2 and left[0] == n // 2 - run[1]


def test_two_concurrent_runs_share_units_without_double_counting(db: psycopg.Connection[Any], dsn: str,
                                                                 connect: Any) -> None:
    n = 16_000
    _events(db, n, partitions=4, delete_batch_size=200, delete_rate_limit=8000)
    expected = dict(db.execute("SELECT tableoid::regclass::text, count(*) FILTER (WHERE id % 2 = 1) FROM ev"
                               " GROUP BY 1").fetchall())
    db.commit()
    procs = [_pg_ttl("run", "--once", "--json", "ev", "--dsn", dsn) for _ in range(2)]
    outputs = [p.communicate(timeout=60) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err and "ERROR" not in err
    check = connect()
    assert check.execute("SELECT count(*) FILTER (WHERE id % 2 = 1), count(*) FROM ev").fetchone() == (0, n // 2)
    units = check.execute("SELECT unit_name, status, rows_deleted FROM ttl.run_unit ORDER BY unit_name").fetchall()
    assert sum(u[2] for u in units) == n // 2
    assert {u[1] for u in units} <= {"ok", "skipped"}
    # the runs overlapped: some unit was busy in one of them and done by the other
    assert any(u[1] == "skipped" for u in units)
    by_unit: dict[str, int] = {}
    for name, _status, rows in units:
        by_unit[name] = by_unit.get(name, 0) + rows
    assert by_unit == expected  # per partition: every expired row counted once, by one of the runs


def test_run_and_plan_output(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    _events(db, 1000)
    res = cli("plan", "ev", "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    assert "delete rows" in res.stdout and "500" in res.stdout and "1,000" in res.stdout
    assert "nothing was changed" in res.stdout
    assert db.execute("SELECT count(*) FROM ev").fetchone() == (1000,)
    db.commit()
    # Not a terminal (a pipe, a log): no progress bars, the summary only.
    res = cli("run", "--once", "ev", "--dsn", dsn)
    assert res.returncode == 0, res.stderr
    assert "expiration run" in res.stdout and "500" in res.stdout and "ok" in res.stdout
    assert " rows" not in res.stdout.split("expiration run")[0], res.stdout
    db.execute("INSERT INTO ev SELECT g, '2020-01-01' FROM generate_series(5001, 5010) g")
    db.commit()
    # On a terminal (FORCE_COLOR makes rich treat the pipe as one): one bar per table, ending at
    # what was done; nothing left to delete: 0 rows, not a full bar of one.
    tty = {"FORCE_COLOR": "1", "NO_COLOR": ""}
    res = cli("run", "ev", "--dsn", dsn, env=tty)
    assert res.returncode == 0, res.stderr
    assert "10/10 rows" in _plain(res.stdout), res.stdout
    assert db.execute("SELECT count(*) FROM ev").fetchone() == (500,)
    db.commit()
    res = cli("run", "ev", "--dsn", dsn, env=tty)
    assert res.returncode == 0, res.stderr
    assert "0/0 rows" in _plain(res.stdout) and "1/1 rows" not in _plain(res.stdout), res.stdout
    res = cli("run", "nope", "--dsn", dsn)
    assert res.returncode == 1 and res.stderr.strip() == 'pg-ttl: table "nope" does not exist'
    res = cli("plan", "--json", "--dsn", dsn)
    assert res.returncode == 0 and '"rows": 0' in res.stdout


def test_failed_table_exits_nonzero(db: psycopg.Connection[Any], dsn: str, cli: Any) -> None:
    _events(db, 10)
    # a referencing row makes the delete fail (foreign key): the table fails, the run says so
    db.execute("CREATE TABLE child (ev_id int REFERENCES ev)")
    db.execute("INSERT INTO child VALUES (1)")
    db.commit()
    res = cli("run", "--once", "ev", "--dsn", dsn)
    assert res.returncode == 1
    assert "failed" in res.stdout and "foreign key" in res.stdout


def test_a_statement_timeout_too_short_for_the_run_says_where_it_is_set(db: psycopg.Connection[Any], dsn: str,
                                                                       cli: Any, connect: Any) -> None:
    """ttl.settings' statement_timeout bounds every statement of pg-ttl run, its own bookkeeping
    too: one of those held past it (here by a lock on the run history, shorter than
    lock_timeout) stops the run, which says which setting it was."""
    _events(db, 10)
    db.execute("UPDATE ttl.settings SET value = '100ms' WHERE name = 'statement_timeout'")
    db.commit()
    holder = connect(autocommit=False)
    holder.execute("LOCK TABLE ttl.run IN ACCESS EXCLUSIVE MODE")
    res = cli("run", "--once", "ev", "--dsn", dsn)
    holder.rollback()
    assert res.returncode == 1
    assert "canceling statement due to statement timeout" in res.stderr, res.stderr
    assert "ttl.settings" in res.stderr and "Traceback" not in res.stderr, res.stderr


@pytest.mark.slow
def test_standby_is_refused(tmp_path: Path) -> None:
    """A real standby: pg_basebackup -R of a small primary of our own."""
    from pg_ttl import install
    from pg_ttl.expire import expire
    from pg_ttl.expire.engine import EngineError

    with LocalServer() as primary:
        dsn = primary.create_database("app")
        install.upgrade(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE ev (id int PRIMARY KEY, ts timestamptz)")
            conn.execute("INSERT INTO ev VALUES (1, '2020-01-01')")
            conn.execute("SELECT ttl.enable('ev', expire_after => '1 day', column_name => 'ts')")
        standby = LocalServer(bindir=primary.bindir)
        assert standby.base_dir is not None
        standby.base_dir.chmod(0o755)
        standby._chown(standby.base_dir)
        standby.sockdir.mkdir()
        standby._chown(standby.sockdir)
        standby._run(str(primary.bindir / "pg_basebackup"), "-D", str(standby.datadir), "-R", "-X", "stream",
                     "-c", "fast", "-h", "127.0.0.1", "-p", str(primary.port), "-U", primary.superuser)
        try:
            standby.start()
            sdsn = standby.dsn("app")
            with pytest.raises(EngineError, match="standby"):
                expire(sdsn)
            env = {**os.environ, "COLUMNS": "200"}
            proc = subprocess.run([sys.executable, "-m", "pg_ttl", "run", "--dsn", sdsn], capture_output=True,
                                  text=True, env=env, timeout=60)
            assert proc.returncode == 1 and "standby" in proc.stderr and "Traceback" not in proc.stderr
            with psycopg.connect(sdsn, autocommit=True) as conn, pytest.raises(psycopg.Error, match="standby"):
                conn.execute("CALL ttl.run()")
        finally:
            standby.cleanup()
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT count(*) FROM ev").fetchone() == (1,)
