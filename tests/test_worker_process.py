"""The worker as a real process: scheduling, NOTIFY, signals, systemd notify, metrics, status, reload."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pg_ttl import install
from pg_ttl.worker.schedule import latest_tick
from tests.worker_proc import WorkerProcess, scrape, wait_until

FAST = ("--poll-interval", "0.5", "--max-backoff", "1")


def _events_table(conn: psycopg.Connection[Any], name: str, expired: int, live: int, **options: Any) -> None:
    conn.execute(f"CREATE TABLE {name} (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL)")
    conn.execute(f"INSERT INTO {name} (created_at) SELECT now() - interval '3 days' - g * interval '1 second' "
                 "FROM generate_series(1, %s) g", (expired,))
    conn.execute(f"INSERT INTO {name} (created_at) SELECT now() FROM generate_series(1, %s) g", (live,))
    opts = ", ".join(f"{k} => %s" for k in options)
    conn.execute(f"SELECT ttl.enable('{name}', expire_after => '1 day', column_name => 'created_at'"
                 f"{', ' + opts if opts else ''})", tuple(options.values()))


def _runs(conn: psycopg.Connection[Any], table: str) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute("SELECT * FROM ttl.run WHERE relid = %s::regclass ORDER BY run_id", (table,)).fetchall()


def test_runs_due_policy_metrics_and_status_match_history(dsn: str, connect: Any, cli: Any,
                                                          tmp_path: Path) -> None:
    conn = connect()
    _events_table(conn, "ev", expired=120, live=80)
    cfg = tmp_path / "w.toml"
    cfg.write_text("[worker]\nlag_refresh_interval = 1\nlag_queries_per_second = 10\n")
    w = WorkerProcess("--config", str(cfg), "--dsn", dsn, "--metrics-addr", "127.0.0.1:0", "--name", "w-main", *FAST)
    try:
        port = w.metrics_port
        done = w.wait_for("run finished", table="ev")[0]
        assert done["status"] == "ok" and done["rows"] == 120
        assert conn.execute("SELECT count(*) FROM ev").fetchone() == (80,)
        runs = _runs(conn, "ev")
        assert [(r["status"], r["rows_deleted"], r["worker"]) for r in runs] == [("ok", 120, "w-main")]
        # The tick it ran for is the latest @hourly tick; it is not run again before the next one.
        tick = conn.execute("SELECT due_at FROM ttl.worker_schedule WHERE relid = 'ev'::regclass").fetchone()[0]
        assert tick == latest_tick("@hourly", datetime.now(UTC))
        conn.execute("INSERT INTO ev (created_at) VALUES (now() - interval '2 days')")
        w.wait_for("worker starting")
        polls_before = len(w.events())
        time.sleep(1.5)  # three poll intervals
        assert len(_runs(conn, "ev")) == 1 and len(w.events()) >= polls_before

        # Metrics show what the history shows.
        db = conn.info.dbname
        labels = f'{{database="{db}",table="ev"}}'
        m = wait_until(lambda: (s := scrape(port)).get(f"pg_ttl_expiration_lag_seconds{labels}") is not None and s,
                       what="lag metric")
        assert m[f"pg_ttl_rows_deleted_total{labels}"] == sum(r["rows_deleted"] for r in runs) == 120
        assert m[f"pg_ttl_rows_selected_total{labels}"] == sum(r["rows_selected"] for r in runs)
        assert m[f'pg_ttl_runs_total{{database="{db}",status="ok",table="ev"}}'] == len(runs)
        assert m[f"pg_ttl_units_total{labels}"] == 1
        assert m[f'pg_ttl_tables{{database="{db}"}}'] == 1
        assert m[f'pg_ttl_database_up{{database="{db}"}}'] == 1
        assert m[f"pg_ttl_next_run_timestamp_seconds{labels}"] == (tick + timedelta(hours=1)).timestamp()
        # The row inserted after the run is expired and still there: once re-measured, the lag is its age
        # (it expired one day after created_at = now() - 2 days).
        lag_line = f"pg_ttl_expiration_lag_seconds{labels}"
        lag = wait_until(lambda: scrape(port)[lag_line], timeout=5, what="lag after refresh")
        assert 86400 <= lag < 86400 + 600

        # status --json says the same.
        res = cli("status", "--json", "--dsn", dsn)
        assert res.returncode == 0, res.stderr
        st = json.loads(res.stdout)
        (t,) = st["tables"]
        assert t["table"] == "ev" and t["last_run"]["status"] == "ok" and t["last_run"]["rows_deleted"] == 120
        assert t["last_run"]["run_id"] == runs[0]["run_id"] and t["last_run"]["duration"] > 0
        assert datetime.fromisoformat(t["next_run"]) == tick + timedelta(hours=1)
        assert t["backlog"] >= 1 and 86400 <= t["lag_seconds"] < 86400 + 600
        assert [x["name"] for x in st["workers"]] == ["w-main"] and st["workers"][0]["state"] == "running"
        res = cli("status", "--dsn", dsn)
        assert res.returncode == 0 and "ev" in res.stdout and "w-main" in res.stdout
        assert w.stop() == 0
        assert w.find("worker stopped")
    finally:
        w.close()
    row = conn.execute("SELECT state, pace FROM ttl.worker WHERE name = 'w-main'").fetchone()
    # the pace of its latest run: a small table, never slowed
    assert row == ("stopped", "100% (full speed: no other session at work)")


def test_new_policy_is_picked_up_by_notify(dsn: str, connect: Any) -> None:
    conn = connect()
    # Polling every 60 s: only the NOTIFY can make this quick.
    w = WorkerProcess("--dsn", dsn, "--poll-interval", "60")
    try:
        w.wait_for("connected")
        time.sleep(0.5)  # LISTEN is issued right after the first catalog read
        started = time.monotonic()
        _events_table(conn, "late", expired=10, live=5)
        w.wait_for("run finished", table="late", timeout=10)
        took = time.monotonic() - started
        assert took < 5, took
        assert conn.execute("SELECT count(*) FROM late").fetchone() == (5,)
        # A change (pause) is picked up too: the next run records it.
        conn.execute("SELECT ttl.disable('late')")
        w.wait_for("policy removed", table="late", timeout=5)
        assert w.stop() == 0
    finally:
        w.close()


def test_an_upgrade_while_it_runs_stops_it_until_the_schema_is_its_own(dsn: str, connect: Any) -> None:
    """The catalog poll reads the schema's revision with the policies (one round trip): a
    revision this worker does not run, as a newer pg-ttl's upgrade leaves it, stops its runs
    with the reason and the fix; it goes on once the schema is its own again."""
    conn = connect()
    ours = conn.execute("SELECT version_num FROM ttl.alembic_version").fetchone()[0]
    w = WorkerProcess("--dsn", dsn, *FAST)
    try:
        w.wait_for("connected")
        conn.execute("UPDATE ttl.alembic_version SET version_num = '9999'")
        [event] = w.wait_for("database unavailable", timeout=10)
        assert "revision 9999" in event["error"] and "newer pg-ttl" in event["error"], event
        _events_table(conn, "meanwhile", expired=10, live=5)
        time.sleep(1.5)  # polls and retries come and go: nothing runs
        assert conn.execute("SELECT count(*) FROM meanwhile").fetchone() == (15,)
        conn.execute("UPDATE ttl.alembic_version SET version_num = %s", (ours,))
        w.wait_for("run finished", table="meanwhile", timeout=15)
        assert conn.execute("SELECT count(*) FROM meanwhile").fetchone() == (5,)
        assert w.stop() == 0
    finally:
        w.close()


@pytest.mark.slow
def test_cron_ticks_and_min_interval(dsn: str, connect: Any) -> None:
    conn = connect()
    _events_table(conn, "every_minute", expired=5, live=1, job_cron="* * * * *", job_cron_override=True)
    # A policy written while min_job_interval was lower; raised since: the worker still holds it to 15 minutes.
    conn.execute("UPDATE ttl.settings SET value = '1 minute' WHERE name = 'min_job_interval'")
    _events_table(conn, "throttled", expired=5, live=1, job_cron="* * * * *")
    conn.execute("UPDATE ttl.settings SET value = '15 minutes' WHERE name = 'min_job_interval'")
    # Shift the worker's clock so that the next minute tick is ~3 s away.
    now = datetime.now(UTC)
    boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    fake_start = boundary + timedelta(minutes=10) - timedelta(seconds=3)
    offset = (fake_start - now).total_seconds()
    w = WorkerProcess("--dsn", dsn, *FAST, env={"PGTTL_WORKER_CLOCK_OFFSET": str(offset)})
    try:
        first = w.wait_for("run started", table="every_minute")[0]
        w.wait_for("run finished", table="throttled")
        for table in ("every_minute", "throttled"):
            conn.execute(f"INSERT INTO {table} (created_at) "
                         "SELECT now() - interval '2 days' FROM generate_series(1, 3)")
        second = w.wait_for("run started", count=2, table="every_minute", timeout=10)[1]
        t1 = datetime.fromisoformat(first["tick"])
        t2 = datetime.fromisoformat(second["tick"])
        assert t2 - t1 == timedelta(minutes=1)
        # The second run started at the tick, not before (worker clock = real + offset).
        started_fake = datetime.fromisoformat(second["ts"].replace("Z", "+00:00")) + timedelta(seconds=offset)
        assert started_fake >= t2
        w.wait_for("run finished", count=2, table="every_minute")
        time.sleep(1.0)
        assert len(w.find("run started", table="every_minute")) == 2
        assert len(w.find("run started", table="throttled")) == 1  # next at tick + 15 min
        assert conn.execute("SELECT count(*) FROM every_minute").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM throttled").fetchone() == (4,)
        assert w.stop() == 0
    finally:
        w.close()


def test_sigterm_mid_run_exits_cleanly_and_counts_exactly(dsn: str, connect: Any) -> None:
    conn = connect()
    _events_table(conn, "big", expired=20000, live=100, delete_batch_size=200, select_batch_size=1000,
                  delete_rate_limit=4000)
    w = WorkerProcess("--dsn", dsn, *FAST)
    try:
        w.wait_for("run started", table="big")
        wait_until(lambda: conn.execute("SELECT coalesce(sum(rows_deleted), 0) FROM ttl.run_unit").fetchone()[0]
                   >= 400, timeout=15, what="some batches")
        t0 = time.monotonic()
        w.signal(signal.SIGTERM)
        assert w.proc.wait(10) == 0, w.text()
        assert time.monotonic() - t0 < 5
    finally:
        w.close()
    remaining_expired = conn.execute(
        "SELECT count(*) FROM big WHERE created_at < now() - interval '1 day'").fetchone()[0]
    assert 0 < remaining_expired < 20000
    (run,) = _runs(conn, "big")
    assert run["status"] == "partial" and run["finished_at"] is not None
    # Every deleted row is counted once, and nothing counted was not deleted.
    assert run["rows_deleted"] == 20000 - remaining_expired
    units = conn.execute("SELECT sum(rows_deleted) FROM ttl.run_unit WHERE run_id = %s", (run["run_id"],)).fetchone()
    assert units == (run["rows_deleted"],)
    assert conn.execute("SELECT count(*) FROM big WHERE created_at >= now() - interval '1 day'").fetchone() == (100,)
    # The round stays open: the next worker takes it up again with the same cutoff and finishes it.
    sched = conn.execute("SELECT last_status, finished_at IS NULL FROM ttl.worker_schedule").fetchone()
    assert sched == ("interrupted", True)
    conn.execute("SELECT ttl.set_option('big', 'delete_rate_limit', '0')")
    w = WorkerProcess("--dsn", dsn, *FAST)
    try:
        resumed = w.wait_for("run started", table="big")[0]
        assert resumed["role"] == "resume"
        w.wait_for("run finished", table="big")
        assert w.stop() == 0
    finally:
        w.close()
    first, second = _runs(conn, "big")
    assert first["cutoff"] == second["cutoff"] and second["status"] == "ok"
    assert first["rows_deleted"] + second["rows_deleted"] == 20000
    assert conn.execute("SELECT count(*) FROM big").fetchone() == (100,)
    assert conn.execute("SELECT last_status, finished_at IS NULL FROM ttl.worker_schedule").fetchone() == ("ok", False)


def test_sd_notify_messages_in_order(dsn: str, connect: Any, tmp_path: Path) -> None:
    conn = connect()
    _events_table(conn, "ev", expired=10, live=1)
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    w = WorkerProcess("--dsn", dsn, *FAST, env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"})
    messages: list[str] = []
    try:
        def got_watchdogs() -> bool:
            messages.append(sock.recv(4096).decode())
            return sum("WATCHDOG=1" in m for m in messages) >= 2 and any("tables" in m for m in messages)
        wait_until(got_watchdogs, timeout=15, interval=0, what="READY, STATUS and two WATCHDOG pings")
        w.signal(signal.SIGTERM)
        while not any("STOPPING=1" in m for m in messages):
            messages.append(sock.recv(4096).decode())
        assert w.proc.wait(10) == 0
    finally:
        w.close()
        sock.close()
    assert messages[0].startswith("READY=1")
    stopping = next(i for i, m in enumerate(messages) if "STOPPING=1" in m)
    watchdogs = [i for i, m in enumerate(messages) if m == "WATCHDOG=1"]
    statuses = [m for m in messages if m.startswith("STATUS=")]
    assert watchdogs and 0 < watchdogs[0] < stopping
    assert any("1 tables in 1 database(s)" in s for s in statuses), statuses
    assert all("READY=1" not in m for m in messages[1:])


def test_signals_at_any_moment_never_hang_the_worker(dsn: str) -> None:
    """Signal handlers run in the main thread between two bytecodes, maybe while it holds a
    lock; one that took a lock itself (threading.Event.set) hung the worker for good. A
    watchdog tick of 0.1 ms keeps the main loop busy, so the signals land all over it."""
    w = WorkerProcess("--dsn", dsn, *FAST, env={"WATCHDOG_USEC": "200"})
    try:
        w.wait_for("worker starting")
        for i in range(2000):
            w.signal(signal.SIGHUP)
            time.sleep(0.0002 + (i % 5) * 0.0002)
        w.wait_for("configuration reloaded", timeout=10)
        w.signal(signal.SIGTERM)
        try:
            assert w.proc.wait(10) == 0
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not stop:\n{w.text()[-3000:]}") from None
        assert w.find("worker stopped")
    finally:
        w.close()


def test_sighup_reloads_config_and_serves_several_databases(dsn: str, connect: Any, pg_local: Any,
                                                            tmp_path: Path) -> None:
    conn = connect()
    _events_table(conn, "ev", expired=3, live=1)
    second = f"{conn.info.dbname}_b"
    dsn2 = pg_local.create_database(second)
    try:
        install.upgrade(dsn2)
        with psycopg.connect(dsn2, autocommit=True) as c2:
            _events_table(c2, "other", expired=4, live=2)
        cfg = tmp_path / "worker.toml"
        # (a long poll: the next run's time must come from the run, not from a catalog poll)
        cfg.write_text(f"[worker]\npoll_interval = 60\nlog_format = 'kv'\n[[databases]]\nname = 'one'\n"
                       f"dsn = '{dsn}'\n")
        w = WorkerProcess("--config", str(cfg), "--metrics-addr", "127.0.0.1:0", json_logs=False)
        try:
            wait_until(lambda: 'msg="run finished" db=one table=ev' in w.text(), what="kv run line")
            port = int(re.search(r"metrics_port=(\d+)", w.text()).group(1))  # type: ignore[union-attr]
            last = 'pg_ttl_last_run_timestamp_seconds{database="one",table="ev"}'
            wait_until(lambda: last in scrape(port), what="last run scraped")
            m = scrape(port)
            # the next run is the next cron tick, after the run that just finished
            assert m['pg_ttl_next_run_timestamp_seconds{database="one",table="ev"}'] > m[last]
            cfg.write_text(f"[worker]\npoll_interval = 0.5\nlog_format = 'json'\n[[databases]]\nname = 'one'\n"
                           f"dsn = '{dsn}'\n[[databases]]\nname = 'two'\ndsn = '{dsn2}'\n")
            w.signal(signal.SIGHUP)
            w.wait_for("configuration reloaded", databases="one,two")
            done = w.wait_for("run finished", db="two", table="other")[0]
            assert done["rows"] == 4
            assert scrape(port)['pg_ttl_rows_deleted_total{database="two",table="other"}'] == 4
            # A database taken out of the config leaves no series behind (not "down", not lagging).
            cfg.write_text(f"[worker]\npoll_interval = 0.5\nlog_format = 'json'\n[[databases]]\nname = 'one'\n"
                           f"dsn = '{dsn}'\n")
            w.signal(signal.SIGHUP)
            w.wait_for("configuration reloaded", databases="one")
            left = [k for k in scrape(port) if 'database="two"' in k]
            assert left == []
            assert scrape(port)['pg_ttl_database_up{database="one"}'] == 1
            # A broken file is refused; the worker keeps going on the old config.
            cfg.write_text("[worker\n")
            w.signal(signal.SIGHUP)
            w.wait_for("reload failed, keeping the old configuration")
            assert w.stop() == 0
        finally:
            w.close()
        assert conn.execute("SELECT count(*) FROM ev").fetchone() == (1,)
    finally:
        with psycopg.connect(pg_local.dsn(), autocommit=True) as admin:
            admin.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(psycopg.sql.Identifier(second)))


def test_worker_errors_are_one_line(cli: Any, tmp_path: Path) -> None:
    res = cli("worker", "--config", str(tmp_path / "missing.toml"))
    assert res.returncode == 2 and "cannot read config file" in res.stderr and "Traceback" not in res.stderr
    res = cli("worker", "--dsn", "dbname=x", "--metrics-addr", "nonsense")
    assert res.returncode == 2 and "--metrics-addr must be host:port" in res.stderr


def test_column_only_table_is_scheduled_and_nulled_values_are_counted(dsn: str, connect: Any) -> None:
    conn = connect()
    conn.execute("CREATE TABLE pv (path text PRIMARY KEY, views int, note text)")
    conn.execute("SELECT ttl.enable_column('pv', 'views', '1 second', 'write')")
    conn.execute("INSERT INTO pv VALUES ('/a', 1, 'x'), ('/b', 2, 'y'), ('/c', 3, 'z')")
    time.sleep(1.1)  # the values' TTL
    w = WorkerProcess("--dsn", dsn, "--metrics-addr", "127.0.0.1:0", *FAST)
    try:
        port = w.metrics_port
        done = w.wait_for("run finished", table="pv")[0]
        assert done["values_nulled"] == 3
        assert conn.execute("SELECT path, views, note FROM pv ORDER BY path").fetchall() == [
            ("/a", None, "x"), ("/b", None, "y"), ("/c", None, "z")]
        nulled = conn.execute("SELECT sum(values_nulled) FROM ttl.run_unit").fetchone()[0]
        m = scrape(port)
        assert m[f'pg_ttl_rows_nulled_total{{database="{conn.info.dbname}",table="pv"}}'] == nulled == 3
        assert w.stop() == 0
    finally:
        w.close()


def test_a_loop_blocked_in_a_statement_shows_as_stalled(dsn: str, connect: Any) -> None:
    """pg_ttl_loop_stalled_seconds grows while a database's loop is blocked (here: its run waits
    for a lock the application holds) and is back near 0 once it goes on and sleeps."""
    conn = connect()
    _events_table(conn, "ev", expired=3, live=1)
    conn.execute("UPDATE ttl.settings SET value = '60s' WHERE name = 'lock_timeout'")
    holder = connect(autocommit=False)
    holder.execute("LOCK TABLE ev IN ACCESS EXCLUSIVE MODE")
    # (a long poll: asleep for seconds after its run, which is not a stall)
    w = WorkerProcess("--dsn", dsn, "--metrics-addr", "127.0.0.1:0", "--poll-interval", "30")
    try:
        port = w.metrics_port
        name = f'pg_ttl_loop_stalled_seconds{{database="{conn.info.dbname}"}}'
        wait_until(lambda: scrape(port).get(name, 0) >= 3, timeout=30, what="a stalled loop")
        assert w.find("run finished", table="ev") == []
        holder.rollback()  # the lock goes: the run goes on
        w.wait_for("run finished", table="ev")
        time.sleep(3)
        assert scrape(port)[name] < 1
        assert w.stop() == 0
    finally:
        holder.close()
        w.close()
    assert conn.execute("SELECT count(*) FROM ev").fetchone() == (1,)
