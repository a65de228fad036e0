"""Row expiry against one raw DELETE, from 1M to 10M rows (python -m bench.row_expiry).

A plain table of ROWS rows (~100 B each) in insertion order (``created_at`` grows with
``id``, as an event log's does), the oldest SHARE of them expired, with and without a
btree on the TTL column: each shape built once as a template. With ``--tied`` the
expired rows all share one ``created_at`` (45 days old: a bulk load stamped with one
``now()``), which pg_ttl deletes through that key's ctid windows. With ``--shuffled`` the
rows are in random physical order (``created_at`` no longer follows ``id`` on disk): a
table whose expired rows are spread over every block, swept in block ranges. Contenders, each on a fresh
prewarmed copy (CREATE DATABASE ... TEMPLATE, then a CHECKPOINT), in turn, rotated from
repetition to repetition, in one run on one server:

- pg_ttl: one pass through the Python API (``pg_ttl.expire.expire``; its session's
  start included, Python's start-up not);
- ``CALL ttl.run()``: the same pass by the procedure in the database;
- one ``DELETE ... WHERE created_at < now() - interval '30 days'``;
- the same pg_ttl pass and DELETE from a session opened beforehand (not timed), as the
  worker keeps one: the engine's through a pass over another (ten-row) table first, so
  that what a new session pays once (PostgreSQL compiling pg_ttl's functions and
  planning their statements, reading the catalogs: ~20 ms) is paid before;
- the same again from sessions that have been through this table before, as the
  worker's is at its next hourly pass and a hand-written job's at its next run: the
  engine's through a pass over this table with a cutoff 1,000 days back, the DELETE's
  through the same DELETE 1,000 days further back (neither deletes a row).

With ``--hand-windows`` (not with ``--tied``), also the expired rows deleted by hand in key
windows from an open session, each its own ``BEGIN; DELETE; COMMIT``, of the rows pg_ttl's
windows grow through (1,000, 4,000, 16,000, 64,000, then 100,000 at most), their keys
read beforehand (not timed): what short transactions alone cost beside one DELETE, with
none of pg_ttl's bookkeeping.

With a share of 0 (``--shares 0``) nothing has expired: each contender's time is what a
pass costs whatever it deletes (pg_ttl's run and unit recorded, its strategy chosen, a
session's start), reported apart with the most that cost leaves pg_ttl of a DELETE's
rate at the other shares of the same run.

Reported per shape: seconds (median of ``--reps``, min-max), pg_ttl over the DELETE as
rows per second (paired per repetition; the same for the open sessions and for those
that passed the table before), ``CALL
ttl.run()`` over pg_ttl, pg_ttl's strategy and its longest transaction (from
``pg_stat_activity``, sampled every 5 ms), and a check that exactly the expired rows
went. ``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import plots
from bench.orphans import LongestTransaction
from bench.plots import Panel
from bench.runner import rotated
from bench.server import copy_database, loadavg_text, prewarm
from bench.stats import paired, ratio_text
from pg_ttl import install
from pg_ttl.expire import expire
from pg_ttl.expire.engine import Engine
from pg_ttl.localserver import LocalServer

SCHEMA = "CREATE TABLE events (id bigint PRIMARY KEY, created_at timestamptz NOT NULL, body text NOT NULL)"
# Rows 1..expired are 31-60 days old (all 45 days: tied), the others 0-29 days: a day apart
# from the cutoff.
FILL = """
INSERT INTO events
SELECT g, CASE WHEN g <= %(expired)s AND %(tied)s THEN now() - interval '45 days'
               WHEN g <= %(expired)s
               THEN now() - interval '60 days' + (g::float8 / %(expired)s) * interval '29 days'
               ELSE now() - interval '29 days' + ((g - %(expired)s)::float8 / (%(rows)s - %(expired)s + 1))
                          * interval '29 days' END,
       rpad(md5(g::text), 100, 'x')
  FROM generate_series(1, %(rows)s) g
"""
SHUFFLED = " ORDER BY random()"
INDEX = "CREATE INDEX events_created_at_idx ON events (created_at)"
EXPIRED = "created_at < now() - interval '30 days'"
APP = "pg-ttl engine"


def pg_ttl(dsn: str) -> dict[str, Any]:
    [res] = expire(dsn, ["events"])
    assert res.status == "ok", res
    return {"deleted": res.rows_deleted, "strategy": sorted({u.strategy or "" for u in res.units})}


def pg_ttl_forced(strategy: str) -> Any:
    def run(dsn: str) -> dict[str, Any]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE ttl.settings SET value = %s WHERE name = 'row_strategy'", (strategy,))
        return pg_ttl(dsn)
    return run


def call_run(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, application_name=APP) as conn:
        conn.execute("CALL ttl.run()")
        row = conn.execute("SELECT coalesce(sum(rows_deleted), 0), pg_catalog.max(status) FROM ttl.run").fetchone()
    assert row is not None and row[1] == "ok", row
    return {"deleted": int(row[0])}


def one_delete(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True, application_name=APP) as conn:
        return {"deleted": conn.execute(f"DELETE FROM events WHERE {EXPIRED}").rowcount}


class OpenEngine:
    """An engine session as the worker keeps one, through a pass over another table first."""

    def __init__(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE warmup (id int PRIMARY KEY, created_at timestamptz NOT NULL)")
            conn.execute("CREATE INDEX ON warmup (created_at)")
            conn.execute("INSERT INTO warmup SELECT g, now() - interval '40 days' FROM generate_series(1, 10) g")
            conn.execute("SELECT ttl.enable('warmup', expire_after => '30 days', column_name => 'created_at')")
            conn.execute("ANALYZE warmup")
        self.engine = Engine(dsn)
        [res] = self.engine.expire(["warmup"])
        assert res.status == "ok" and res.rows_deleted == 10, res

    def run(self) -> dict[str, Any]:
        [res] = self.engine.expire(["events"])
        assert res.status == "ok", res
        return {"deleted": res.rows_deleted, "strategy": sorted({u.strategy or "" for u in res.units})}

    def close(self) -> None:
        self.engine.close()


class PassedBefore(OpenEngine):
    """The worker's session at its next pass over a table (it keeps one session and passes
    each table every hour or so): an engine session that has passed this very table
    before, with a cutoff 1,000 days back (nothing deleted), so its statements for the
    table are planned and its policy read."""

    def __init__(self, dsn: str) -> None:
        self.engine = Engine(dsn)
        row = self.engine.conn.execute("SELECT now() - interval '1000 days'").fetchone()
        assert row is not None
        [res] = self.engine.expire(["events"], cutoff=row[0])
        assert res.status == "ok" and res.rows_deleted == 0, res


class OpenConnection:
    """A session opened (and used once) beforehand, for the DELETE."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, application_name=APP)
        self.conn.execute("SELECT 1")

    def run(self) -> dict[str, Any]:
        return {"deleted": self.conn.execute(f"DELETE FROM events WHERE {EXPIRED}").rowcount}

    def close(self) -> None:
        self.conn.close()


class RunBefore(OpenConnection):
    """A hand-written job's session at its next run: the DELETE run in it before, 1,000 days
    further back (nothing deleted)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        before = EXPIRED.replace("30 days", "1030 days")
        assert self.conn.execute(f"DELETE FROM events WHERE {before}").rowcount == 0


# The rows of the windows deleted by hand (--hand-windows): pg_ttl's first windows, then at most this many.
HAND_WINDOWS = (1000, 4000, 16000, 64000)
HAND_WINDOW_MAX = 100_000


class HandWindows:
    """Key windows by hand from a session opened beforehand: the expired rows' keys at
    each window's end read first (one scan, not timed), then each window its own
    transaction."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True, application_name=APP)
        expired = self.conn.execute(f"SELECT count(*) FROM events WHERE {EXPIRED}").fetchone()
        assert expired is not None
        ends, at = [], 0
        for size in [*HAND_WINDOWS, *[HAND_WINDOW_MAX] * (int(expired[0]) // HAND_WINDOW_MAX + 1)]:
            at += size
            if at >= int(expired[0]):
                break
            ends.append(at)
        # (the key at each window's end; a window takes the keys below it, the last one every key from the one before)
        self.bounds = [r[0] for r in self.conn.execute(
            f"SELECT created_at FROM (SELECT created_at, row_number() OVER (ORDER BY created_at) AS n"
            f" FROM events WHERE {EXPIRED}) s WHERE n - 1 = ANY(%s) ORDER BY n", (ends,)).fetchall()]

    def run(self) -> dict[str, Any]:
        deleted, low = 0, None
        for high in [*self.bounds, None]:
            # (each statement planned with its own keys, as a hand-written loop's would be)
            where = (EXPIRED + (" AND created_at >= %(low)s" if low else "")
                     + (" AND created_at < %(high)s" if high else ""))
            with self.conn.transaction():
                deleted += self.conn.execute(f"DELETE FROM events WHERE {where}", {"low": low, "high": high},
                                             prepare=False).rowcount
            low = high
        return {"deleted": deleted, "windows": len(self.bounds) + 1}

    def close(self) -> None:
        self.conn.close()


CONTENDERS: dict[str, Any] = {"pg_ttl": pg_ttl, "CALL ttl.run()": call_run, "one DELETE": one_delete,
                              "pg_ttl, open session": OpenEngine, "one DELETE, open session": OpenConnection,
                              "pg_ttl, passed before": PassedBefore, "one DELETE, run before": RunBefore}
OPEN = {"pg_ttl, open session", "one DELETE, open session", "key windows by hand, open session",
        "pg_ttl, passed before", "one DELETE, run before"}
WITHOUT_PG_TTL = {"one DELETE", "one DELETE, open session", "key windows by hand, open session",
                  "one DELETE, run before"}
HAND = {"key windows by hand, open session": HandWindows}
# With --strategies: pg_ttl with each row_strategy forced too (the crossovers in rows.py).
FORCED = {"pg_ttl, row_strategy index": pg_ttl_forced("index"), "pg_ttl, row_strategy ctid": pg_ttl_forced("ctid")}


def _template(server: LocalServer, rows: int, share: float, indexed: bool,
              tied: bool = False, shuffled: bool = False) -> tuple[str, int, str]:
    name = (f"rows_{rows}_{round(share * 1000)}_{'ix' if indexed else 'noix'}{'_tied' if tied else ''}"
            f"{'_shuffled' if shuffled else ''}")
    dsn = server.create_database(name)
    expired = round(rows * share)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
        conn.execute(FILL + (SHUFFLED if shuffled else ""), {"rows": rows, "expired": expired, "tied": tied})
        if indexed:
            conn.execute(INDEX)
        conn.execute("VACUUM (FREEZE, ANALYZE) events")
        # A second VACUUM sets the visibility map PostgreSQL 15 leaves unset right after the
        # load, as autovacuum would on a table at rest (bench/orphans.py too).
        conn.execute("VACUUM events")
        size = conn.execute("SELECT pg_size_pretty(pg_table_size('events'))").fetchone()
    return name, expired, str(size[0]) if size else ""


def measure(server: LocalServer, rows: int, share: float, indexed: bool, reps: int,
            strategies: bool = False, tied: bool = False, hand: bool = False,
            shuffled: bool = False) -> dict[str, Any]:
    template, expired, size = _template(server, rows, share, indexed, tied, shuffled)
    contenders = {**CONTENDERS, **(FORCED if strategies and indexed else {}), **(HAND if hand else {})}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    names = list(contenders)
    for rep in range(reps):
        for name in rotated(names, rep):  # the order rotates
            copy = f"{template}_{rep}_{names.index(name)}"
            dsn = copy_database(server, template, copy)
            if name not in WITHOUT_PG_TTL:
                install.upgrade(dsn)
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute("SELECT ttl.enable('events', expire_after => '30 days', column_name => 'created_at')")
            opened = contenders[name](dsn) if name in OPEN else None
            prewarm(dsn)
            load = loadavg_text()
            try:
                with LongestTransaction(dsn, APP) as longest:
                    started = time.perf_counter()
                    out = opened.run() if opened is not None else contenders[name](dsn)
                    wall = time.perf_counter() - started
            finally:
                if opened is not None:
                    opened.close()
            with psycopg.connect(dsn, autocommit=True) as conn:
                left = conn.execute(f"SELECT count(*), count(*) FILTER (WHERE {EXPIRED}) FROM events").fetchone()
            assert left == (rows - expired, 0) and out["deleted"] == expired, (name, left, out)
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(copy)))
            runs[name].append({"seconds": wall, "rows_per_second": expired / wall, "load_before": load,
                               "longest_transaction_s": longest.longest, **out})
            print(f"  {rows:,} rows, {share:.0%} expired{' (one key)' if tied else ''}"
                  f"{', random order' if shuffled else ''}, "
                  f"{'index' if indexed else 'no index'}, rep {rep + 1}: "
                  f"{name}: {wall:.3f} s", flush=True)
    ours, raw, proc = runs["pg_ttl"], runs["one DELETE"], runs["CALL ttl.run()"]
    return {"rows": rows, "expired": expired, "share": share, "indexed": indexed, "tied": tied, "shuffled": shuffled,
            "table_size": size,
            "contenders": {name: {"seconds": statistics.median(r["seconds"] for r in done),
                                  "seconds_min": min(r["seconds"] for r in done),
                                  "seconds_max": max(r["seconds"] for r in done), "runs": done}
                           for name, done in runs.items()},
            "pg_ttl_vs_delete": paired(ours, raw),
            "open_sessions_pg_ttl_vs_delete": paired(runs["pg_ttl, open session"], runs["one DELETE, open session"]),
            "passed_before_pg_ttl_vs_delete": paired(runs["pg_ttl, passed before"], runs["one DELETE, run before"]),
            "call_run_vs_pg_ttl": paired(proc, ours),
            **({"open_sessions_hand_windows_vs_delete": paired(runs["key windows by hand, open session"],
                                                                runs["one DELETE, open session"])} if hand else {}),
            "pg_ttl_strategy": ours[0].get("strategy"),
            "pg_ttl_longest_transaction_s": max(r["longest_transaction_s"] for r in ours)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000], help="table sizes")
    parser.add_argument("--shares", type=float, nargs="+", default=[0.5, 0.01],
                        help="shares of rows expired (0: nothing expired, what a pass costs whatever it deletes)")
    parser.add_argument("--index", choices=["both", "yes", "no"], default="both",
                        help="with a btree on the TTL column, without, or both")
    parser.add_argument("--reps", type=int, default=3, help="runs of each contender, in turn")
    parser.add_argument("--strategies", action="store_true",
                        help="with an index, also pg_ttl with row_strategy forced to index and to ctid")
    parser.add_argument("--tied", action="store_true",
                        help="the expired rows share one created_at (a bulk load stamped with one now())")
    parser.add_argument("--shuffled", action="store_true",
                        help="the rows in random physical order (created_at no longer follows the table's order)")
    parser.add_argument("--hand-windows", action="store_true",
                        help="also delete the rows by hand in key windows of pg_ttl's sizes, each its own transaction"
                             " (what short transactions alone cost; not with --tied)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    plots.add_options(parser, "seconds per million expired rows and pg_ttl's rate over one DELETE's against"
                              " the table's rows")
    args = parser.parse_args()
    if args.from_json is not None:
        _report(json.loads(args.from_json.read_text()), args.plot)
        return
    if args.hand_windows and args.tied:
        parser.error("--hand-windows needs distinct keys: not with --tied")
    server = LocalServer(settings={"fsync": "off", "synchronous_commit": "off", "shared_buffers": "2GB",
                                   "max_wal_size": "16GB", "autovacuum": "off"})
    server.start()
    results: list[dict[str, Any]] = []
    try:
        for rows in args.rows:
            for share in args.shares:
                for indexed in {"both": (False, True), "yes": (True,), "no": (False,)}[args.index]:
                    results.append(measure(server, rows, share, indexed, args.reps, args.strategies, args.tied,
                                           args.hand_windows, args.shuffled))
    finally:
        server.cleanup()
    saved = {"server": server.version, "load_average": loadavg_text().split(), "results": results}
    if args.json:
        args.json.write_text(json.dumps(saved, indent=2, default=str))
    _report(saved, args.plot)


def _report(saved: dict[str, Any], plot: Path | None) -> None:
    """The tables of a run's results (as --json writes them), and its plot."""
    fixed = [r for r in saved["results"] if not r["expired"]]
    results = [r for r in saved["results"] if r["expired"]]
    first = (results or fixed or [{}])[0]
    reps = len(first["contenders"]["pg_ttl"]["runs"]) if first else 0
    print(f"\n{saved['server']}; rows {'in random order' if first.get('shuffled') else 'in insertion order'}, the"
          f" oldest expired{' (all at one created_at)' if first.get('tied') else ''}; median of {reps}; load average"
          f" {' '.join(saved['load_average'])}\n")
    print("| rows | expired | index | pg_ttl s | CALL ttl.run() s | one DELETE s | pg_ttl vs DELETE (rows/s) "
          "| open sessions: pg_ttl s | DELETE s | pg_ttl vs DELETE "
          "| CALL vs pg_ttl | strategy | longest pg_ttl transaction |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        c, v, p = r["contenders"], r["pg_ttl_vs_delete"], r["call_run_vs_pg_ttl"]
        o = r.get("open_sessions_pg_ttl_vs_delete")  # (not in results written before 2026-11-29)
        opened = (f"{c['pg_ttl, open session']['seconds']:.3f} | {c['one DELETE, open session']['seconds']:.3f} | "
                  f"{ratio_text(o)}" if o else "- | - | -")
        print(f"| {r['rows']:,} | {r['share']:.0%} | {'yes' if r['indexed'] else 'no'} | "
              f"{c['pg_ttl']['seconds']:.3f} | {c['CALL ttl.run()']['seconds']:.3f} | "
              f"{c['one DELETE']['seconds']:.3f} | {ratio_text(v)} | "
              f"{opened} | "
              f"{ratio_text(p)} | "
              f"{','.join(r['pg_ttl_strategy'] or [])} | {r['pg_ttl_longest_transaction_s'] * 1000:.0f} ms |")
    before = [r for r in results if "passed_before_pg_ttl_vs_delete" in r]  # (since 2026-11-29)
    if before:
        print("\nSessions that passed the table before (the worker's next pass; a job's next DELETE)\n")
        print("| rows | expired | index | pg_ttl s | one DELETE s | pg_ttl vs DELETE (rows/s) |")
        print("|---|---|---|---|---|---|")
        for r in before:
            c, b = r["contenders"], r["passed_before_pg_ttl_vs_delete"]
            print(f"| {r['rows']:,} | {r['share']:.0%} | {'yes' if r['indexed'] else 'no'} | "
                  f"{c['pg_ttl, passed before']['seconds']:.3f} | {c['one DELETE, run before']['seconds']:.3f} | "
                  f"{ratio_text(b)} |")
    for r in results:
        for name, c in r["contenders"].items():
            if name in HAND:
                h = r["open_sessions_hand_windows_vs_delete"]
                print(f"{r['rows']:,} rows, {r['share']:.0%} expired, {'index' if r['indexed'] else 'no index'}: "
                      f"{name}: {c['seconds']:.3f} s, the DELETE's rows/s times {ratio_text(h)}")
            if name in FORCED:
                print(f"{r['rows']:,} rows, {r['share']:.0%} expired, index: {name}: {c['seconds']:.3f} s")
    if fixed:
        _report_fixed(fixed, results)
    if plot is not None:
        _plot(results, fixed, plot)


def _report_fixed(fixed: list[dict[str, Any]], results: list[dict[str, Any]]) -> None:
    """What a pass costs with nothing to delete, beside one DELETE that deletes nothing; and
    the most pg_ttl's rate can be of the DELETE's at each other shape of the same table
    (rows, index), that cost added to the DELETE's time."""
    print("\nNothing expired: what a pass costs whatever it deletes (median)\n")
    print("| rows | index | pg_ttl ms | CALL ttl.run() ms | one DELETE ms | open sessions: pg_ttl ms | DELETE ms "
          "| passed before: pg_ttl ms | DELETE ms | at most, by share expired (pg_ttl vs DELETE, rows/s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for f in fixed:
        c = f["contenders"]
        extra = c["pg_ttl"]["seconds"] - c["one DELETE"]["seconds"]
        bounds = ", ".join(f"{r['share']:.0%}: {_at_most(r['contenders']['one DELETE']['seconds'], extra):.2f}x"
                           for r in results if (r["rows"], r["indexed"]) == (f["rows"], f["indexed"]))
        print(f"| {f['rows']:,} | {'yes' if f['indexed'] else 'no'} | {c['pg_ttl']['seconds'] * 1000:.1f} | "
              f"{c['CALL ttl.run()']['seconds'] * 1000:.1f} | {c['one DELETE']['seconds'] * 1000:.1f} | "
              f"{c['pg_ttl, open session']['seconds'] * 1000:.1f} | "
              f"{c['one DELETE, open session']['seconds'] * 1000:.1f} | {_ms(c, 'pg_ttl, passed before')} | "
              f"{_ms(c, 'one DELETE, run before')} | {bounds or '-'} |")


def _ms(contenders: dict[str, Any], name: str) -> str:
    return f"{contenders[name]['seconds'] * 1000:.1f}" if name in contenders else "-"


def _at_most(delete_seconds: float, extra: float) -> float:
    """pg_ttl's rate over a DELETE's that takes ``delete_seconds``, were pg_ttl's windows as
    fast as the DELETE and the rest of it the ``extra`` seconds a pass costs anyway."""
    return delete_seconds / (delete_seconds + max(extra, 0.0))


def _plot(results: list[dict[str, Any]], fixed: list[dict[str, Any]], path: Path) -> None:
    """Per share expired and index or not: seconds per million expired rows against the
    table's rows, for pg_ttl, CALL ttl.run() and one DELETE; and pg_ttl's rows/s over
    one DELETE's (paired median) for each, against the goal (0.9x). With nothing expired
    in some shapes, what a pass costs then, against the table's rows."""
    panels: dict[tuple[float, bool], Panel] = {}
    ratio = Panel("rows in the table", "pg_ttl rows/s over one DELETE's", goal=(0.9, "goal (0.9x)"),
                  title="pg_ttl vs one DELETE (paired median)", logx=True)
    for r in sorted(results, key=lambda r: (r["share"], r["indexed"], r["rows"])):
        what = f"{r['share']:.0%} expired, {'index' if r['indexed'] else 'no index'}"
        panel = panels.setdefault((r["share"], r["indexed"]), Panel(
            "rows in the table", "seconds per million expired rows", title=what, logx=True))
        for name in ("pg_ttl", "CALL ttl.run()", "one DELETE"):
            panel.add(name, r["rows"], r["contenders"][name]["seconds"] / r["expired"] * 1e6)
        ratio.add(what, r["rows"], r["pg_ttl_vs_delete"]["median"])
        if "passed_before_pg_ttl_vs_delete" in r:
            ratio.add(f"{what}, passed before", r["rows"], r["passed_before_pg_ttl_vs_delete"]["median"])
    cost = Panel("rows in the table", "milliseconds", title="nothing expired: a pass's cost", logx=True)
    for f in sorted(fixed, key=lambda r: (r["indexed"], r["rows"])):
        for name in ("pg_ttl", "pg_ttl, open session", "pg_ttl, passed before", "one DELETE"):
            if name in f["contenders"]:
                cost.add(f"{name}, {'index' if f['indexed'] else 'no index'}", f["rows"],
                         f["contenders"][name]["seconds"] * 1000)
    shape = ", all at one created_at" if (results or fixed)[0].get("tied") else ""
    plots.save(path, f"Row expiry: the oldest rows expired{shape}",
               [*panels.values(), *([ratio] if results else []), *([cost] if fixed else [])])


if __name__ == "__main__":
    main()
