"""Worker pieces without a database: schedule, config, logs, sd_notify, metrics, unit file, compose file."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pg_ttl.cli import build_parser
from pg_ttl.cli.worker import deploy_file, render_unit
from pg_ttl.expire import TableResult
from pg_ttl.worker import config as config_mod
from pg_ttl.worker.logs import JsonFormatter, KeyValueFormatter
from pg_ttl.worker.metrics import WorkerMetrics
from pg_ttl.worker.schedule import Entry, Scheduler, due_tick, latest_tick, next_due
from pg_ttl.worker.sdnotify import SystemdNotifier, watchdog_interval
from pg_ttl.worker.session import backoff_delay

ROOT = Path(__file__).resolve().parent.parent
T = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
M15 = timedelta(minutes=15)


# -- schedule -------------------------------------------------------------------------------
def test_never_run_is_due_at_once_for_the_latest_tick() -> None:
    now = T + timedelta(minutes=34, seconds=5)
    assert due_tick("@hourly", None, now, M15, False) == T
    assert due_tick("*/5 * * * *", None, now, M15, True) == T + timedelta(minutes=30)


def test_latest_tick_includes_an_exact_tick() -> None:
    assert latest_tick("@hourly", T) == T
    assert latest_tick("@hourly", T - timedelta(microseconds=1)) == T - timedelta(hours=1)


def test_not_due_again_until_the_next_tick() -> None:
    assert due_tick("@hourly", T, T + timedelta(minutes=59, seconds=59), M15, False) is None
    assert due_tick("@hourly", T, T + timedelta(hours=1), M15, False) == T + timedelta(hours=1)


def test_missed_ticks_collapse_into_one_run() -> None:
    # Worker down for 5 hours: one run for the latest tick, then back on the grid.
    now = T + timedelta(hours=5, minutes=10)
    tick = due_tick("@hourly", T, now, M15, False)
    assert tick == T + timedelta(hours=5)
    assert due_tick("@hourly", tick, now, M15, False) is None
    assert next_due("@hourly", tick, M15, False) == T + timedelta(hours=6)


def test_min_job_interval_holds_unless_overridden() -> None:
    # Every minute, but at least 15 minutes apart: the first tick at or after last + 15 min.
    assert next_due("* * * * *", T, M15, False) == T + M15
    assert due_tick("* * * * *", T, T + timedelta(minutes=14, seconds=59), M15, False) is None
    assert due_tick("* * * * *", T, T + timedelta(minutes=15), M15, False) == T + M15
    # On a coarser grid the run stays on the grid.
    assert next_due("*/10 * * * *", T, M15, False) == T + timedelta(minutes=20)
    # job_cron_override lifts the minimum.
    assert next_due("* * * * *", T, M15, True) == T + timedelta(minutes=1)


def test_scheduler_skips_running_and_bad_cron_and_orders_by_tick() -> None:
    s = Scheduler(min_interval=M15)
    s.sync([Entry(1, "a", cron="@hourly", last_due=T - timedelta(hours=2)),
            Entry(2, "b", cron="@daily", last_due=None),
            Entry(3, "c", cron="61 * * * *"),
            Entry(4, "d", cron="@hourly", last_due=T)])
    now = T + timedelta(minutes=5)
    due = s.due(now)
    assert [(e.table, tick) for e, tick in due] == [("b", T.replace(hour=0)), ("a", T)]
    assert s.entries[3].error and "61 * * * *" in s.entries[3].error
    s.entries[1].running = True
    assert [e.table for e, _ in s.due(now)] == ["b"]
    assert s.next_wake(now) == now  # b is due
    s.entries[2].skipped_due = T.replace(hour=0)
    assert s.next_wake(now) == T + timedelta(hours=1)


def test_scheduler_sync_keeps_local_state_and_only_moves_ticks_forward() -> None:
    s = Scheduler()
    s.sync([Entry(1, "a", last_due=T)])
    s.entries[1].skipped_due = T + timedelta(hours=1)
    added, removed = s.sync([Entry(1, "a_renamed", cron="@daily", last_due=T - timedelta(hours=3)),
                             Entry(2, "b")])
    assert [e.relid for e in added] == [2] and removed == []
    e = s.entries[1]
    assert (e.table, e.cron, e.last_due, e.skipped_due) == ("a_renamed", "@daily", T, T + timedelta(hours=1))
    _, removed = s.sync([Entry(2, "b")])
    assert [e.relid for e in removed] == [1] and list(s.entries) == [2]


def test_a_pass_over_many_tables_reads_each_schedule_once_per_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The due list is computed once per pass and each cron expression's tick once per tick: a pass
    over 3,000 tables costs a handful of croniter calls, not one per table and run (quadratic)."""
    from pg_ttl.worker import schedule

    calls: list[str] = []
    real = schedule.latest_tick

    def counted(expr: str, now: datetime) -> datetime:
        calls.append(expr)
        return real(expr, now)

    monkeypatch.setattr(schedule, "latest_tick", counted)
    sched = Scheduler(min_interval=M15)
    sched.sync([Entry(relid=i, table=f"t{i}", cron="@daily" if i % 2 else "@hourly") for i in range(3000)])
    now = T + timedelta(minutes=7)
    due = sched.due(now)
    assert len(due) == 3000
    for entry, tick in due:  # what the loop does: run each in turn, re-checking it is still due
        assert sched.still_due(entry, tick, now)
        entry.skipped_due = entry.last_due = tick
        assert not sched.still_due(entry, tick, now)
    assert sorted(set(calls)) == ["@daily", "@hourly"] and len(calls) == 2
    assert sched.due(now) == []
    # the next hourly tick is read once more (the daily tables are not due: their next run is cached)
    later = sched.due(T + timedelta(hours=1, minutes=1))
    assert {e.cron for e, _ in later} == {"@hourly"} and len(later) == 1500 and len(calls) == 3


def test_backoff() -> None:
    delays = [backoff_delay(n, 1.0, 8.0) for n in range(1, 8)]
    assert all(0.5 <= d <= 1.0 for d in delays[:1])
    assert all(d <= 8.0 for d in delays) and min(delays[4:]) >= 4.0  # capped, never below half the cap


# -- config ---------------------------------------------------------------------------------
def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "worker.toml"
    path.write_text(text)
    return str(path)


def test_config_file_env_and_flags_precedence(tmp_path: Path) -> None:
    path = _write(tmp_path, """
[worker]
poll_interval = 7
log_format = "json"
metrics_addr = "127.0.0.1:9999"
[[databases]]
dsn = "postgresql://u@h1/app"
[[databases]]
name = "billing"
dsn = "host=h2 dbname=bill user=u password=secret"
""")
    cfg = config_mod.load({"config": path}, environ={})
    assert cfg.poll_interval == 7 and cfg.log_format == "json" and cfg.metrics_host_port == ("127.0.0.1", 9999)
    assert [(d.name, d.dsn) for d in cfg.databases] == [("app", "postgresql://u@h1/app"),
                                                       ("billing", "host=h2 dbname=bill user=u password=secret")]
    cfg = config_mod.load({"config": path}, environ={"PGTTL_POLL_INTERVAL": "3", "PGTTL_LOG_FORMAT": "kv"})
    assert cfg.poll_interval == 3 and cfg.log_format == "kv"
    cfg = config_mod.load({"config": path, "poll_interval": 0.5, "dsns": ["dbname=x", "host=o dbname=x"]},
                          environ={"PGTTL_POLL_INTERVAL": "3"})
    assert cfg.poll_interval == 0.5
    assert [d.name for d in cfg.databases] == ["x#1", "x#2"]
    assert "secret" not in config_mod.redact("host=h2 dbname=bill user=u password=secret")
    # The config path may come from the environment; without databases, $PGTTL_DSN.
    path2 = _write(tmp_path, "[worker]\nname = 'w1'\n")
    cfg = config_mod.load({}, environ={"PGTTL_WORKER_CONFIG": path2, "PGTTL_DSN": "dbname=envdb"})
    assert cfg.name == "w1" and [(d.name, d.dsn) for d in cfg.databases] == [("envdb", "dbname=envdb")]


@pytest.mark.parametrize(("text", "message"), [
    ("[worker]\npoll_intervl = 3\n", "unknown [worker] key(s) poll_intervl"),
    ("[worker]\npoll_interval = -1\n", "[worker] poll_interval must be a number of seconds greater than 0"),
    ("[worker]\nlog_format = 'xml'\n", "log_format must be one of kv, json"),
    ("[worker]\nmetrics_addr = 'localhost'\n", "metrics_addr must be host:port"),
    ("[[databases]]\nname = 'a'\n", "databases entry 1 needs dsn"),
    ("[[databases]]\ndsn = 'dbname=a'\n[[databases]]\ndsn = 'dbname=a'\n", "database names must be unique"),
    ("[[databases]]\ndsn = 'host=a port'\n", "invalid DSN of database"),
    ("[wrker]\n", "unknown section(s) wrker"),
    ("[worker\n", "not valid TOML"),
])
def test_config_errors_name_the_setting(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(config_mod.ConfigError) as info:
        config_mod.load({"config": _write(tmp_path, text)}, environ={})
    assert message in str(info.value)


@pytest.mark.parametrize("dsn", [
    "host=db password:s3cret",  # libpq: missing "=" after "password:s3cret"
    "postgresql://u:s3cret@[::1/db",  # libpq quotes the whole URI
    "postgresql://u:s3cr%zzet@h/db",  # libpq quotes the bad token
    "host=db password='s3cret",  # unterminated quote
])
def test_an_invalid_dsn_is_reported_without_its_password(tmp_path: Path, dsn: str) -> None:
    text = "[[databases]]\nname = 'main'\ndsn = '''" + dsn + "'''\n"
    with pytest.raises(config_mod.ConfigError) as info:
        config_mod.load({"config": _write(tmp_path, text)}, environ={})
    assert "invalid DSN of database 'main'" in str(info.value)
    assert "s3cr" not in str(info.value)


def test_config_missing_file() -> None:
    with pytest.raises(config_mod.ConfigError, match=r"cannot read config file /nonexistent\.toml"):
        config_mod.load({"config": "/nonexistent.toml"}, environ={})


def test_shipped_example_config_loads() -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".toml") as f:
        f.write(deploy_file("worker.toml"))
        f.flush()
        cfg = config_mod.load({"config": f.name}, environ={})
    assert cfg.databases[0].name == "app" and cfg.metrics_addr == "127.0.0.1:9187"


# -- logs -----------------------------------------------------------------------------------
def _record(msg: str, **fields: object) -> logging.LogRecord:
    rec = logging.LogRecord("pg_ttl.worker", logging.INFO, __file__, 1, msg, None, None)
    rec.fields = fields
    return rec


def test_log_formats() -> None:
    rec = _record("run finished", table="public.events", partition='odd "name"', rows=10, duration=0.12345)
    line = KeyValueFormatter().format(rec)
    assert line.startswith("ts=") and ' level=info msg="run finished" table=public.events' in line
    assert 'partition="odd \\"name\\"" rows=10 duration=0.123' in line
    doc = json.loads(JsonFormatter().format(rec))
    assert doc["msg"] == "run finished" and doc["rows"] == 10 and doc["partition"] == 'odd "name"'
    assert doc["level"] == "info" and doc["ts"].endswith("Z")


# -- sd_notify ------------------------------------------------------------------------------
def _bind(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(2)
    return sock


def test_sd_notify_path_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    with _bind(path) as sock:
        n = SystemdNotifier(path)
        assert n.ready("starting") and n.status("idle\nnow") and n.watchdog() and n.stopping()
        got = [sock.recv(4096).decode() for _ in range(4)]
    assert got == ["READY=1\nSTATUS=starting", "STATUS=idle now", "WATCHDOG=1", "STOPPING=1"]


def test_sd_notify_abstract_socket() -> None:
    name = f"pg-ttl-test-{os.getpid()}"
    with _bind("\0" + name) as sock:
        assert SystemdNotifier("@" + name).ready()
        assert sock.recv(4096) == b"READY=1"


def test_sd_notify_without_systemd_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert SystemdNotifier().ready() is False
    assert SystemdNotifier("/nonexistent/socket").ready() is False  # errors are kept, never raised


def test_watchdog_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHDOG_USEC", "2000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert watchdog_interval() == 1.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert watchdog_interval() is None
    monkeypatch.delenv("WATCHDOG_USEC")
    assert watchdog_interval() is None


# -- metrics --------------------------------------------------------------------------------
def test_metrics_served_and_counted() -> None:
    m = WorkerMetrics("w1")
    port = m.serve("127.0.0.1", 0)
    try:
        result = TableResult("ev", 1, "ok", rows_selected=7, rows_deleted=5, partitions_dropped=2,
                             partitions_detached=0, duration=0.25)
        m.record_run("app", "ev", result)
        m.record_run("app", "ev", dataclasses.replace(result, status="failed", rows_deleted=1))
        m.lag.set("app", "ev", datetime.now(UTC) - timedelta(seconds=100))
        m.lag.set("app", "quiet", None)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        m.shutdown()
    assert 'pg_ttl_rows_deleted_total{database="app",table="ev"} 6.0' in body
    assert 'pg_ttl_rows_selected_total{database="app",table="ev"} 14.0' in body
    assert 'pg_ttl_partitions_dropped_total{database="app",table="ev"} 4.0' in body
    assert 'pg_ttl_run_failures_total{database="app",table="ev"} 1.0' in body
    assert 'pg_ttl_runs_total{database="app",status="ok",table="ev"} 1.0' in body
    assert 'pg_ttl_run_duration_seconds_count{database="app"} 2.0' in body
    assert 'pg_ttl_expiration_lag_seconds{database="app",table="quiet"} 0.0' in body
    prefix = 'pg_ttl_expiration_lag_seconds{database="app",table="ev"}'
    lag = next(line for line in body.splitlines() if line.startswith(prefix))
    assert 100 <= float(lag.split()[-1]) < 110
    m.forget_table("app", "ev")
    assert m.registry.get_sample_value("pg_ttl_rows_deleted_total", {"database": "app", "table": "ev"}) is None


# -- CLI, systemd unit, compose ---------------------------------------------------------------
def test_cli_registers_worker_commands() -> None:
    parser = build_parser()
    args = parser.parse_args(["worker", "--dsn", "dbname=a", "--dsn", "dbname=b", "--metrics-addr", ":9187",
                              "--log-format", "json", "--once"])
    assert args.dsns == ["dbname=a", "dbname=b"] and args.once and args.log_format == "json"
    assert parser.parse_args(["status", "--json"]).json
    assert parser.parse_args(["systemd-unit"]).user == "pg-ttl"


def test_unit_file_contents() -> None:
    unit = deploy_file("pg-ttl-worker.service")
    for line in ("Type=notify", "Restart=on-failure", "User=pg-ttl", "EnvironmentFile=-/etc/pg-ttl/worker.env",
                 "ExecStart=/usr/local/bin/pg-ttl worker --config /etc/pg-ttl/worker.toml", "WatchdogSec=60",
                 "ExecReload=/bin/kill -HUP $MAINPID"):
        assert line in unit.splitlines()
    # The repository's deploy/ and the wheel's pg_ttl/deploy/ are the same files.
    assert (ROOT / "deploy" / "pg-ttl-worker.service").read_text() == unit
    rendered = render_unit("/opt/x/pg-ttl", "/srv/w.toml", "ttl")
    assert "ExecStart=/opt/x/pg-ttl worker --config /srv/w.toml" in rendered.splitlines()
    assert "User=ttl" in rendered.splitlines() and "Group=ttl" in rendered.splitlines()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pg_ttl", "systemd-unit"], capture_output=True, text=True,
                         check=True).stdout
    unit = tmp_path / "pg-ttl-worker.service"
    unit.write_text(out)
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr.strip() == "" and proc.stdout.strip() == "", proc.stderr
    # The shipped file too, with ExecStart pointed at an executable that exists here.
    shipped = deploy_file("pg-ttl-worker.service").replace("/usr/local/bin/pg-ttl", sys.executable)
    unit.write_text(shipped)
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr
    # And it does reject a broken unit (so the checks above mean something).
    unit.write_text(shipped.replace("Type=notify", "Type=notifyy"))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert "Failed to parse service type" in proc.stderr


def test_docker_compose_parses_and_names_real_commands() -> None:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = doc["services"]
    assert {"postgres", "worker"} <= set(services)
    assert "healthcheck" in services["postgres"] and "healthcheck" in services["worker"]
    assert services["worker"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert (ROOT / services["install"]["build"]["dockerfile"]).is_file()
    parser = build_parser()
    ran = {}
    for name, svc in services.items():
        if svc.get("entrypoint") == ["pg-ttl"]:
            args = parser.parse_args(svc["command"])  # SystemExit on an unknown subcommand or flag
            ran[name] = args.command
    assert ran == {"install": "install", "worker": "worker"}
    probe = services["worker"]["healthcheck"]["test"]
    assert probe[:3] == ["CMD", "python", "-c"]
    compile(probe[3], "healthcheck", "exec")
    assert "pg_ttl_database_up" in probe[3]
