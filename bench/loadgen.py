"""Foreground load generator: an application inserting events and reading them back by id.

Runs as its own process (``python -m bench.loadgen``) so it never shares a
Python interpreter (GIL) with the contender or the bench's sampler. Each of
``--clients`` threads has its own connection and runs an open-loop schedule
(``--rate`` transactions per second in total): transaction k of a client is
due at t0 + k / per-client-rate, whether or not the previous one was slow, so
stalls show up as latency instead of silently lowering the request rate.

One transaction = INSERT one new event + SELECT one existing row by primary
key, then COMMIT. On SIGTERM (or when stdin closes) it stops and writes one
line per transaction to ``--out``: start epoch, service time (ms), and the
delay from the scheduled start (ms).
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import threading
import time
from typing import Any

import psycopg

from pg_ttl.wakeup import StopFlag

INSERT = "INSERT INTO events (created_at, payload) VALUES (now(), %s)"
SELECT = "SELECT id, created_at, payload FROM events WHERE id = %s"


def client(dsn: str, rate: float, lo: int, hi: int, stop: StopFlag, out: list[tuple[float, float, float]],
           seed: int) -> None:
    rnd = random.Random(seed)
    payload = "x" * 100
    with psycopg.connect(dsn, autocommit=False, prepare_threshold=0) as conn:
        period = 1.0 / rate
        t0 = time.perf_counter() + rnd.random() * period  # spread the clients' phases
        epoch0 = time.time() - time.perf_counter()
        k = 0
        while not stop.is_set():
            due = t0 + k * period
            now = time.perf_counter()
            if due > now:
                stop.wait(due - now)
                if stop.is_set():
                    break
            start = time.perf_counter()
            conn.execute(INSERT, [payload])
            conn.execute(SELECT, [rnd.randint(lo, hi)]).fetchall()
            conn.commit()
            end = time.perf_counter()
            out.append((epoch0 + start, (end - start) * 1000, max(0.0, start - due) * 1000))
            k += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--rate", type=float, required=True, help="transactions per second, all clients together")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--lo", type=int, required=True, help="lowest id to read")
    ap.add_argument("--hi", type=int, required=True, help="highest id to read")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    stop = StopFlag()  # set by a signal handler: threading.Event.set() there can hang (pg_ttl/wakeup.py)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    results: list[list[tuple[float, float, float]]] = [[] for _ in range(args.clients)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            client(args.dsn, args.rate / args.clients, args.lo, args.hi, stop, results[i], i)
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(args.clients)]
    for t in threads:
        t.start()
    print("ready", flush=True)

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not stop.is_set():
        stop.wait(0.2)
    for t in threads:
        t.join(timeout=30)
    rows: list[Any] = sorted(r for rs in results for r in rs)
    with open(args.out, "w") as fh:
        for epoch, service_ms, lag_ms in rows:
            fh.write(f"{epoch:.6f},{service_ms:.3f},{lag_ms:.3f}\n")
    if errors:
        print(f"load generator error: {errors[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
