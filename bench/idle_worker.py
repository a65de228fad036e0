"""Workload 6: what an idle ``pg-ttl worker`` costs when it watches 1,000 TTL tables.

The tables are empty and their schedule is ``@daily``: a fresh worker first
runs each table once (its last due tick, timed and reported as the first
pass), after which it has nothing to do and what it spends is pure overhead. Measured over a
window after a warm-up: statements it sends (pg_stat_statements, calls in its
database), CPU of the worker process (/proc), and CPU of the whole PostgreSQL
cluster (postmaster and all its children, exited ones included) against an
equal window before the worker started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import psycopg
from psycopg import sql

from bench.contenders import ROOT, _cli_env
from bench.runner import RUN_DB, Config, log
from bench.server import BenchServer, process_cpu_seconds, server_cpu_seconds, statement_calls


def worker_available() -> str | None:
    proc = subprocess.run([sys.executable, "-m", "pg_ttl", "worker", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=_cli_env())
    if proc.returncode != 0 or "--dsn" not in proc.stdout:
        return "`pg-ttl worker` is not available in this checkout yet"
    return None


def _statements(server: BenchServer, dbname: str) -> int:
    with server.admin() as conn:
        return statement_calls(conn, dbname)


def _create_policies(server: BenchServer, db: str, n: int) -> None:
    with psycopg.connect(server.dsn(db)) as conn:  # one transaction
        for i in range(1, n + 1):
            name = f"idle_{i:04d}"
            conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, created_at timestamptz NOT NULL)").format(
                sql.Identifier(name)))
            conn.execute("SELECT ttl.enable(%s::regclass, expire_after => '30 days', column_name => 'created_at', "
                         "job_cron => '@daily')", [name])


def _wait_for_first_pass(server: BenchServer, db: str, policies: int, proc: subprocess.Popen[Any],
                         limit_s: float) -> dict[str, Any]:
    """A fresh worker first runs every table once (a table that never ran is due at once); idle means after
    that pass. Waits for it, at most ``limit_s``, and says how far it got."""
    t0 = time.monotonic()
    done = 0
    while proc.poll() is None:
        with server.admin(db) as conn:
            row = conn.execute("SELECT count(DISTINCT relid) FILTER (WHERE finished_at IS NOT NULL), "
                               "count(*) FILTER (WHERE finished_at IS NULL) FROM ttl.run").fetchone()
        assert row is not None
        done = int(row[0])
        elapsed = time.monotonic() - t0
        if done >= policies and int(row[1]) == 0:
            return {"finished": True, "seconds": elapsed, "tables_done": done, "per_table_s": elapsed / policies}
        if elapsed > limit_s:
            break
        time.sleep(0.2)
    elapsed = time.monotonic() - t0
    return {"finished": False, "seconds": elapsed, "tables_done": done,
            "per_table_s": elapsed / done if done else None}


def _window(server: BenchServer, db: str, seconds: float, pid: int | None) -> dict[str, Any]:
    pm = server.postmaster_pid()
    q0, s0, w0 = _statements(server, db), server_cpu_seconds(pm), process_cpu_seconds(pid, True) if pid else 0.0
    t0 = time.monotonic()
    time.sleep(seconds)
    span = time.monotonic() - t0
    q1, s1, w1 = _statements(server, db), server_cpu_seconds(pm), process_cpu_seconds(pid, True) if pid else 0.0
    return {
        "window_s": span,
        "statements_per_s": (q1 - q0) / span,
        "server_cpu_pct": 100 * (s1 - s0) / span,
        "worker_cpu_pct": 100 * (w1 - w0) / span if pid else None,
    }


def run(server: BenchServer, cfg: Config, ttl_template: str | None, missing: str | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "description": f"idle `pg-ttl worker` with {cfg.idle_policies} TTL tables (@daily, empty)",
        "params": {"policies": cfg.idle_policies, "warmup_s": cfg.idle_warmup_s, "window_s": cfg.idle_window_s},
    }
    if missing or ttl_template is None:
        result.update(available=False, reason=missing or "pg_ttl template missing")
        return result
    with server.database(ttl_template, RUN_DB) as db:
        _create_policies(server, db, cfg.idle_policies)
        baseline = _window(server, db, min(cfg.idle_window_s / 2, 5.0), None)
        with tempfile.TemporaryFile("w+") as logf:
            # The benchmark server's only role is its superuser: allowed explicitly.
            proc = subprocess.Popen([sys.executable, "-m", "pg_ttl", "worker", "--dsn", server.dsn(db),
                                     "--allow-superuser"],
                                    stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT, env=_cli_env())
            try:
                first_pass = _wait_for_first_pass(server, db, cfg.idle_policies, proc, cfg.idle_first_pass_limit_s)
                time.sleep(cfg.idle_warmup_s)
                if proc.poll() is not None:
                    logf.seek(0)
                    raise RuntimeError(f"pg-ttl worker exited ({proc.returncode}): {logf.read()[-1500:]}")
                window = _window(server, db, cfg.idle_window_s, proc.pid)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
            logf.seek(0)
            tail = logf.read()[-600:]
    result.update(available=True, first_pass=first_pass, idle_reached=first_pass["finished"],
                  baseline_no_worker=baseline, idle=window, worker_exit_code=proc.returncode, worker_log_tail=tail)
    log(f"idle worker: first pass {'done' if first_pass['finished'] else 'NOT done'} "
        f"({first_pass['tables_done']} tables in {first_pass['seconds']:.1f} s); "
        f"{window['statements_per_s']:.2f} statements/s, worker CPU {window['worker_cpu_pct']:.2f}%, "
        f"server CPU {window['server_cpu_pct']:.2f}% (no worker: {baseline['server_cpu_pct']:.2f}%)")
    return result
