"""What the throttle's sampler alone costs an application (python -m bench.sampler_cost).

The foreground load of ``python -m bench --only foreground`` (bench.loadgen, its own
process: an INSERT and a SELECT by id per transaction, ``--rate`` transactions per
second from ``--clients`` connections) on a table of ``--rows`` rows. Windows of
``--window`` seconds, in turn, rotated per repetition: nothing else (the baseline), or
one session running the throttle's sampler query (``pg_ttl.expire.pace.SAMPLE``) every
INTERVAL seconds, as the sampler does while a unit of expiry is paced
(``pace.SAMPLE_SECONDS``), for each of ``--intervals``. No row is expired.

Reported per interval: the p99 of the transactions' service time against the
baseline's, paired per repetition (median, min-max), and the samples taken per second.
``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.runner import ROOT_FOR_SUBPROCESS, rotated
from bench.server import loadavg_text, server_settings
from bench.stats import percentile, ratio_text
from pg_ttl.expire.pace import SAMPLE, SAMPLE_SECONDS
from pg_ttl.localserver import LocalServer

SCHEMA = "CREATE TABLE events (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, payload text)"
FILL = """
INSERT INTO events (created_at, payload)
SELECT now() - g * interval '1 s', repeat('x', 100) FROM generate_series(1, %(rows)s) g
"""
WARMUP_SECONDS = 2.0  # the load runs this long before a window opens


class Sampling:
    """The sampler's query every ``every`` seconds on a session of its own, from start
    until ``stop()``."""

    def __init__(self, dsn: str, every: float) -> None:
        self.taken = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(dsn, every), daemon=True)
        self._thread.start()

    def _run(self, dsn: str, every: float) -> None:
        with psycopg.connect(dsn, autocommit=True, application_name="pg-ttl sampler cost") as conn:
            pid = conn.info.backend_pid  # (the sampler leaves out the engine's session: here its own)
            while not self._stop.wait(every):
                conn.execute(SAMPLE, (pid,)).fetchone()
                self.taken += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def window(dsn: str, every: float | None, args: argparse.Namespace) -> dict[str, Any]:
    """One window of load, with the sampler's query every ``every`` seconds (None: without)."""
    fd, out = tempfile.mkstemp(prefix="bench-sampler-", suffix=".csv")
    os.close(fd)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT_FOR_SUBPROCESS, os.environ.get("PYTHONPATH", "")])}
    load = subprocess.Popen(
        [sys.executable, "-m", "bench.loadgen", "--dsn", dsn, "--rate", str(args.rate), "--clients",
         str(args.clients), "--lo", "1", "--hi", str(args.rows), "--out", out],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert load.stdout is not None
        if load.stdout.readline().strip() != "ready":
            raise RuntimeError(f"load generator did not start: {load.stderr.read() if load.stderr else ''}")
        time.sleep(WARMUP_SECONDS)
        sampling = Sampling(dsn, every) if every is not None else None
        start = time.time()
        time.sleep(args.window)
        end = time.time()
        if sampling is not None:
            sampling.stop()
    finally:
        load.terminate()
        load.communicate(timeout=60)
    rows = [tuple(map(float, line.split(","))) for line in Path(out).read_text().splitlines() if line.strip()]
    Path(out).unlink()
    service = sorted(r[1] for r in rows if start <= r[0] <= end)
    return {"interval_s": every, "txns": len(service), "p50_ms": percentile(service, 50),
            "p99_ms": percentile(service, 99), "samples_per_s": (sampling.taken if sampling else 0) / (end - start)}


def measure(server: LocalServer, args: argparse.Namespace) -> dict[str, Any]:
    dsn = server.dsn()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL, {"rows": args.rows})
        conn.execute("VACUUM ANALYZE events")
    modes: list[float | None] = [None, *args.intervals]
    windows: list[dict[str, Any]] = []
    for rep in range(args.reps):
        load_before = loadavg_text()
        for every in rotated(modes, rep):
            w = window(dsn, every, args)
            w.update(rep=rep, load_before=load_before)
            windows.append(w)
            label = "baseline" if every is None else f"every {every:g} s"
            print(f"  rep {rep + 1}, {label}: p99 {w['p99_ms']:.3f} ms, p50 {w['p50_ms']:.3f} ms,"
                  f" {w['txns']} transactions, {w['samples_per_s']:.0f} samples/s", flush=True)
    base = {w["rep"]: w["p99_ms"] for w in windows if w["interval_s"] is None}
    ratios: dict[str, dict[str, float]] = {}
    for every in args.intervals:
        r = [w["p99_ms"] / base[w["rep"]] for w in windows if w["interval_s"] == every and base.get(w["rep"])]
        ratios[f"{every:g}"] = {"median": statistics.median(r), "min": min(r), "max": max(r), "n": len(r)}
    return {"params": {"rows": args.rows, "rate_tps": args.rate, "clients": args.clients, "window_s": args.window,
                       "reps": args.reps, "intervals_s": args.intervals, "sampler_interval_s": SAMPLE_SECONDS},
            "windows": windows, "p99_vs_baseline": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows in the table the load reads")
    parser.add_argument("--rate", type=int, default=400, help="transactions per second, all clients together")
    parser.add_argument("--clients", type=int, default=4, help="the load's connections")
    parser.add_argument("--window", type=float, default=15.0, help="seconds a window lasts")
    parser.add_argument("--intervals", type=float, nargs="+", default=[SAMPLE_SECONDS, 0.05, 0.1],
                        help="seconds between the sampler's queries, one window each")
    parser.add_argument("--reps", type=int, default=6, help="repetitions of the windows, rotated")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    server = LocalServer(settings=server_settings(2048))
    server.start()
    try:
        result = measure(server, args)
        result["server"] = server.version
        result["load_average"] = loadavg_text()
    finally:
        server.cleanup()
    print(f"\n{result['server']}; {args.rate} tps from {args.clients} clients on {args.rows:,} rows;"
          f" windows of {args.window:g} s, {args.reps} repetitions\n")
    print("| sampler query every | p99 vs baseline (paired: median, min-max) |")
    print("|---|---|")
    for every, r in result["p99_vs_baseline"].items():
        print(f"| {every} s | {ratio_text(r)} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
