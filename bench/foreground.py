"""Workload 4: what an application feels while each contender expires the plain table.

A load generator process (bench.loadgen) inserts events and reads live rows by
id at a fixed rate. Per repetition: a baseline window with no expiry, then
each contender on a fresh clone with the same load running. Latency and
throughput are taken over the transactions that started while the contender
ran, and compared with the baseline of the same repetition, and with the load of the
same copy just before and just after the contender's window (``fg_adjacent_s`` each,
under the same transaction sampler): a baseline taken next to it. Then, with no
load, pg_ttl's default pass against its unthrottled one: what the adaptive
throttle costs on an idle server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import contenders as c
from bench.data import PLAIN_EXPIRE_AFTER, PLAIN_TABLE, PlainData
from bench.runner import ROOT_FOR_SUBPROCESS, Config, fresh, log, measured_run, rotated
from bench.server import LOAD_APP, BenchServer
from bench.stats import percentile, ratio, summarize

# pg_ttl: the default pass (the adaptive throttle on, throttle_target 1.25); pg_ttl_target_1_5:
# the same with the default before 2026-11-28; pg_ttl_unthrottled: the throttle setting off
# (full speed); pg_ttl_limited: throttle off and the policy's delete_rate_limit set
# (Config.fg_rate_limit rows/s), the fixed knob an operator must guess.
CONTENDERS = ("raw_delete", "batched_loop", "pg_ttl", "pg_ttl_target_1_5", "pg_ttl_unthrottled", "pg_ttl_limited")
PGTTL = ("pg_ttl", "pg_ttl_target_1_5", "pg_ttl_unthrottled", "pg_ttl_limited")
# Without load, per repetition: the default pass against the unthrottled one (the throttle's
# cost on an idle server), no transaction sampler (it would be a session at work).
IDLE = ("pg_ttl", "pg_ttl_unthrottled")


class LoadGen:
    """The load generator subprocess around one measured window."""

    def __init__(self, server: BenchServer, db: str, cfg: Config, data: PlainData) -> None:
        self.out = Path(tempfile.mkstemp(prefix="bench-load-", suffix=".csv")[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT_FOR_SUBPROCESS, os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.loadgen", "--dsn", server.dsn(db, LOAD_APP), "--rate", str(cfg.fg_rate),
             "--clients", str(cfg.fg_clients), "--lo", str(data.expired + 1), "--hi", str(data.rows),
             "--out", str(self.out)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"load generator did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")

    def stop(self) -> list[tuple[float, float, float]]:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=60)
        try:
            if self.proc.returncode != 0:
                raise RuntimeError(f"load generator failed: {err.strip()}")
            rows = []
            for line in self.out.read_text().splitlines():
                a, b, d = line.split(",")
                rows.append((float(a), float(b), float(d)))
            return rows
        finally:
            self.out.unlink(missing_ok=True)


def window_stats(rows: list[tuple[float, float, float]], start: float, end: float) -> dict[str, Any]:
    """Latency percentiles and throughput of the transactions that started in [start, end]."""
    inside = [r for r in rows if start <= r[0] <= end]
    service = sorted(r[1] for r in inside)
    total = sorted(r[1] + r[2] for r in inside)
    span = max(end - start, 1e-9)
    return {
        "window_s": span,
        "txns": len(inside),
        "throughput_tps": len(inside) / span,
        "p50_ms": percentile(service, 50),
        "p99_ms": percentile(service, 99),
        "max_ms": service[-1] if service else None,
        "p99_incl_queueing_ms": percentile(total, 99),
    }


def run(server: BenchServer, cfg: Config, data: PlainData, ttl_template: str | None,
        pgttl_missing: str | None) -> dict[str, Any]:
    runners: dict[str, Callable[[str], c.Outcome]] = {
        "raw_delete": lambda dsn: c.raw_delete(dsn, PLAIN_TABLE, "created_at", PLAIN_EXPIRE_AFTER, cfg.limit_s),
        "batched_loop": lambda dsn: c.batched_loop(dsn, PLAIN_TABLE, "created_at", PLAIN_EXPIRE_AFTER, cfg.limit_s),
        "pg_ttl": lambda dsn: c.pgttl_run(dsn, [PLAIN_TABLE], cfg.limit_s, cfg.pgttl_entry),
        "pg_ttl_target_1_5": lambda dsn: c.pgttl_run(dsn, [PLAIN_TABLE], cfg.limit_s, cfg.pgttl_entry),
        "pg_ttl_unthrottled": lambda dsn: c.pgttl_run(dsn, [PLAIN_TABLE], cfg.limit_s, cfg.pgttl_entry),
        "pg_ttl_limited": lambda dsn: c.pgttl_run(dsn, [PLAIN_TABLE], cfg.limit_s, cfg.pgttl_entry),
    }

    def unthrottled(db: str) -> None:
        server.execute(db, "UPDATE ttl.settings SET value = 'off' WHERE name = 'throttle'")

    def target_1_5(db: str) -> None:
        server.execute(db, "UPDATE ttl.settings SET value = '1.5' WHERE name = 'throttle_target'")

    def rate_limited(db: str) -> None:
        unthrottled(db)
        server.execute(db, "SELECT ttl.set_option(%s, 'delete_rate_limit', %s)", [PLAIN_TABLE, str(cfg.fg_rate_limit)])

    def resting(seconds: float) -> Callable[[str], c.Outcome]:
        """A window of the load alone, ``seconds`` long."""
        def window(dsn: str) -> c.Outcome:
            time.sleep(seconds)
            return c.Outcome()
        return window

    idle_window = resting(cfg.fg_baseline_s)

    def load_alone(db: str) -> tuple[float, float]:
        """The load alone on ``db`` for fg_adjacent_s, under the transaction sampler: its span."""
        _, near = measured_run(server, db, resting(cfg.fg_adjacent_s))
        assert near is not None
        return near.started_epoch, near.ended_epoch

    setups: dict[str, Callable[[str], None]] = {"pg_ttl_unthrottled": unthrottled, "pg_ttl_limited": rate_limited,
                                                "pg_ttl_target_1_5": target_1_5}
    idle: dict[str, list[float]] = {k: [] for k in IDLE}

    windows: dict[str, list[dict[str, Any]]] = {k: [] for k in ("baseline", *CONTENDERS)}
    pooled: dict[str, list[tuple[float, float, float]]] = {k: [] for k in windows}
    adjacent: dict[str, list[tuple[float, float, float]]] = {k: [] for k in windows}
    for rep in range(cfg.reps):
        for contender in ["baseline", *rotated(list(CONTENDERS), rep)]:
            if contender in PGTTL and (pgttl_missing or ttl_template is None):
                continue
            template = ttl_template if contender in PGTTL else data.template
            assert template is not None
            with fresh(server, template, setups.get(contender)) as db:
                load = LoadGen(server, db, cfg, data)
                try:
                    time.sleep(cfg.fg_warmup_s)
                    # The baseline is measured as the contenders are (the same transaction
                    # sampler polling the server), so that its cost is on both sides; so are
                    # the windows of load just before and just after a contender's.
                    around = [load_alone(db)] if contender != "baseline" else []
                    record, m = measured_run(server, db, runners.get(contender, idle_window))
                    assert m is not None
                    start, end = m.started_epoch, m.ended_epoch
                    if contender != "baseline":
                        record["expiry_rows_per_s"] = data.expired / m.wall_s
                    if contender in PGTTL and record["status"] == "ok":
                        # The expiry window is the pass, as its history has it: `pg-ttl run`'s
                        # process start-up before it (~0.25 s of Python importing, which a
                        # worker under systemd does once) is not expiry.
                        [(start, end)] = server.execute(
                            db, "SELECT extract(epoch FROM min(started_at))::float8,"
                                " extract(epoch FROM max(finished_at))::float8 FROM ttl.run")
                        record["process_start_up_s"] = start - m.started_epoch
                    if contender != "baseline":
                        around.append(load_alone(db))
                    time.sleep(0.5)
                finally:
                    rows = load.stop()
            record.update(window_stats(rows, start, end), rep=rep)
            next_to = [r for r in rows if any(a <= r[0] <= b for a, b in around)]
            if next_to:
                service = sorted(r[1] for r in next_to)
                record.update(adjacent_txns=len(next_to), adjacent_p99_ms=percentile(service, 99),
                              p99_vs_adjacent=ratio(record["p99_ms"], percentile(service, 99)))
            windows[contender].append(record)
            pooled[contender].extend(r for r in rows if start <= r[0] <= end)
            adjacent[contender].extend(next_to)
            log(f"foreground rep {rep} {contender}: {record['status']} window={record['window_s']:.2f}s "
                f"txns={record['txns']} p50={record['p50_ms'] or 0:.2f}ms p99={record['p99_ms'] or 0:.2f}ms "
                f"tps={record['throughput_tps']:.0f}")
        for contender in rotated(list(IDLE), rep) if not (pgttl_missing or ttl_template is None) else []:
            with fresh(server, ttl_template, setups.get(contender)) as db:
                record, m = measured_run(server, db, runners[contender], sample_txns=False)
            if m is not None and record["status"] == "ok":
                idle[contender].append(data.expired / m.wall_s)
                log(f"foreground rep {rep} idle {contender}: {data.expired / m.wall_s:,.0f} rows/s")
    result: dict[str, Any] = {
        "description": "insert + point-select load at a fixed rate while each contender expires the plain table",
        "params": {"rows": data.rows, "rate_tps": cfg.fg_rate, "clients": cfg.fg_clients,
                   "pg_ttl_limited_delete_rate_limit": cfg.fg_rate_limit,
                   "baseline_window_s": cfg.fg_baseline_s, "adjacent_window_s": cfg.fg_adjacent_s,
                   "reps": cfg.reps,
                   "cores": ("2 cores shared by everything: the load generator process (4 threads, one connection "
                             "each), its 4 server backends, the contender's backend and the bench's sampler; "
                             "no pinning")},
        "contenders": {},
    }
    base_p99 = None
    for contender, recs in windows.items():
        if contender in PGTTL and pgttl_missing:
            result["contenders"][contender] = {"available": False, "reason": pgttl_missing, "runs": []}
            continue
        pool = pooled[contender]
        service = sorted(r[1] for r in pool)
        entry: dict[str, Any] = {
            "available": True,
            "runs": recs,
            "pooled": {"txns": len(pool), "p50_ms": percentile(service, 50), "p99_ms": percentile(service, 99)},
            "summary": {k: summarize([r[k] for r in recs if r.get(k) is not None])
                        for k in ("p50_ms", "p99_ms", "throughput_tps", "window_s", "expiry_rows_per_s")},
        }
        if adjacent[contender]:
            # the p99 of the load just before and after each of its windows, pooled likewise
            near = sorted(r[1] for r in adjacent[contender])
            entry["adjacent"] = {"txns": len(near), "p99_ms": percentile(near, 99)}
            entry["p99_vs_adjacent"] = ratio(entry["pooled"]["p99_ms"], entry["adjacent"]["p99_ms"])
            entry["summary"]["p99_vs_adjacent"] = summarize([r["p99_vs_adjacent"] for r in recs
                                                             if r.get("p99_vs_adjacent") is not None])
        if contender == "baseline":
            base_p99 = entry["pooled"]["p99_ms"]
        result["contenders"][contender] = entry
    for entry in result["contenders"].values():
        if entry.get("available"):
            entry["p99_vs_baseline"] = ratio(entry["pooled"]["p99_ms"], base_p99)
    paired = [a / b for a, b in zip(idle["pg_ttl"], idle["pg_ttl_unthrottled"], strict=False) if b]
    result["idle_server"] = {
        "description": "no load: rows/s of the default pass (throttle on) and of the unthrottled one, "
                       "paired per repetition",
        "rows_per_s": {k: summarize(v) for k, v in idle.items()},
        "throttle_on_vs_off": summarize(paired) if paired else None,
    }
    return result
