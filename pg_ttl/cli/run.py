"""run / plan: one expiration pass in the foreground, or a dry run of it."""

from __future__ import annotations

import argparse
import json
import signal
from types import FrameType
from typing import TYPE_CHECKING, Any

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, require_installed, resolve_dsn
from pg_ttl.wakeup import StopFlag

# Heavy modules (psycopg, rich, the engine) are imported by the commands that use them:
# every `pg-ttl` start, --help included, imports this module.
if TYPE_CHECKING:
    from rich.progress import Progress

    from pg_ttl.expire import TableResult, UnitResult


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run one expiration pass now, with a progress bar per table on a terminal",
        description="Delete expired rows and remove expired partitions of TABLE(s) (default: every TTL table) "
        "in one pass, now, whatever the schedule. Ctrl-C or SIGTERM finishes the current batch and stops; "
        "the next run resumes from there. Exit status 1 if a table failed.",
    )
    add_dsn(p)
    p.add_argument("tables", nargs="*", metavar="TABLE", help="tables to expire (default: all with a TTL)")
    p.add_argument("--once", action="store_true",
                   help="one pass and exit (what run always does; the scheduler is `pg-ttl worker`)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars (there are none either when the output is not a terminal)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "plan",
        help="dry run: what a run now would remove, per partition",
        description="For each unit of work (leaf partition, or the table): the action (delete rows, drop or "
        "detach the partition), how many rows would go, the oldest expiry among them and the bytes that would "
        "be reclaimed (an estimate). Reads only; changes nothing.",
    )
    add_dsn(p)
    p.add_argument("table", nargs="?", metavar="TABLE", help="one table (default: all with a TTL)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_plan)


class BarProgress:
    """One progress bar per table, its units (partitions, shards, ...) adding up: drawing stays
    cheap with thousands of partitions (a bar per unit made every refresh redraw them all)."""

    ROWS = ("delete", "orphans", "queue", "archive")

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}
        self.units: dict[str, list[int]] = {}  # table -> [units finished, units started]
        self.removed: dict[str, int] = {}  # table -> partitions dropped or detached
        self.problems: dict[str, list[str]] = {}  # table -> statuses of units that did not end ok

    def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
        task = self.tasks.get(table)
        if task is None:
            task = self.tasks[table] = self.progress.add_task(table, total=0)
        self.units.setdefault(table, [0, 0])[1] += 1
        if action in self.ROWS and estimate:
            self.progress.update(task, total=(self.progress.tasks[task].total or 0) + estimate)
        self._describe(table)

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        task = self.tasks.get(table)
        if task is not None:
            current = self.progress.tasks[task]
            if current.total is not None and current.completed + deleted > current.total:
                self.progress.update(task, total=current.completed + deleted)
            self.progress.advance(task, deleted)

    def unit_finished(self, result: UnitResult) -> None:
        table = result.table
        task = self.tasks.get(table)
        if task is None:
            return
        counts = self.units[table]
        counts[0] += 1
        if result.action in ("drop", "detach") and result.status == "ok":
            self.removed[table] = self.removed.get(table, 0) + 1
        if result.status not in ("ok", "skipped"):
            self.problems.setdefault(table, []).append(result.status)
        if counts[0] == counts[1]:
            # all its units so far are done: the bar ends at what was done ("0/0 rows" when nothing was due)
            done = self.progress.tasks[task].completed
            self.progress.update(task, total=done, completed=done)
        self._describe(table)

    def _describe(self, table: str) -> None:
        done, started = self.units[table]
        text = table if started <= 1 else f"{table} ({done}/{started} units)"
        if self.removed.get(table):
            text += f", {self.removed[table]} partitions removed"
        if self.problems.get(table):
            text += " [" + ", ".join(dict.fromkeys(self.problems[table])) + "]"
        self.progress.update(self.tasks[table], description=text)


def _stop_on_signals(stop: StopFlag) -> None:
    # StopFlag, not threading.Event: Event.set() in a handler could wait for the lock the
    # engine holds in this same thread, inside stop.wait(), and hang (pg_ttl/wakeup.py).
    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from pg_ttl.expire import EngineError, expire

    with connect(args) as conn:
        require_installed(conn)
    stop = StopFlag()
    _stop_on_signals(stop)
    dsn = resolve_dsn(args)
    try:
        # Bars only on a terminal: in a log they would be redrawn line after line.
        if args.quiet or args.json or not common.console.is_terminal:
            results = expire(dsn, args.tables or None, stop=stop, worker="pg-ttl run")
        else:
            columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("rows"), TimeElapsedColumn())
            with Progress(*columns, console=common.console, transient=False) as progress:
                results = expire(dsn, args.tables or None, stop=stop, progress=BarProgress(progress),
                                 worker="pg-ttl run")
    except EngineError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print(json.dumps([_result_json(r) for r in results], indent=2))
    else:
        _summary(results)
        if stop.is_set():
            common.console.print("Stopped after the current batch; the next run resumes from there.")
    return 1 if any(r.status == "failed" for r in results) else 0


def _result_json(r: TableResult) -> dict[str, Any]:
    return {"table": r.table, "run_id": r.run_id, "status": r.status, "rows_selected": r.rows_selected,
            "rows_deleted": r.rows_deleted, "orphans_deleted": r.orphans_deleted,
            "partitions_dropped": r.partitions_dropped,
            "partitions_detached": r.partitions_detached, "duration": round(r.duration, 3), "error": r.error,
            "pace": None if r.pace is None else {"duty": r.pace.duty, "reason": r.pace.reason,
                                                 "slowdown": r.pace.slowdown, "text": r.pace.describe()},
            "units": [{"unit": u.unit, "action": u.action, "strategy": u.strategy, "status": u.status,
                       "rows_selected": u.rows_selected, "rows_deleted": u.rows_deleted, "error": u.error,
                       "duration": round(u.duration, 3)} for u in r.units]}


STATUS_STYLE = {"ok": "green", "partial": "yellow", "busy": "yellow", "paused": "yellow", "failed": "red"}


# At most this many tables get a row in the summary of a run; the others (that did nothing)
# are counted in one line.
SUMMARY_ROWS = 50


def _summary(results: list[TableResult]) -> None:
    from rich.table import Table

    if not results:
        common.console.print("No TTL policies to run.")
        return
    table = Table(title="expiration run")
    for col in ("table", "status", "rows deleted", "partitions dropped", "partitions detached", "time", "note"):
        table.add_column(col, justify="right" if col.startswith(("rows", "partitions", "time")) else "left")
    # The tables that did something or did not end ok; then the rest while there is room.
    busy = {id(r) for r in results if r.status != "ok" or r.rows_deleted or r.partitions_dropped
            or r.partitions_detached or r.values_nulled}
    room = max(0, SUMMARY_ROWS - len(busy))
    shown = busy | {id(r) for r in [r for r in results if id(r) not in busy][:room]}
    for r in results:
        if id(r) not in shown:
            continue
        notes = [r.error] if r.error else []
        notes += [f"{u.unit}: {u.status} ({u.error})" for u in r.units if u.status not in ("ok",) and u.error]
        if r.pace is not None and (r.pace.duty < 1 or r.pace.reason == "blind"):  # the throttle had a say
            notes.append(f"pace {r.pace.describe()}")
        style = STATUS_STYLE.get(r.status, "")
        table.add_row(r.table, f"[{style}]{r.status}[/]", f"{r.rows_deleted:,}", str(r.partitions_dropped),
                      str(r.partitions_detached), f"{r.duration:.2f}s", "; ".join(dict.fromkeys(notes)))
    if len(results) > 1:
        table.add_section()
        table.add_row(f"{len(results)} runs", "", f"{sum(r.rows_deleted for r in results):,}",
                      str(sum(r.partitions_dropped for r in results)),
                      str(sum(r.partitions_detached for r in results)), f"{sum(r.duration for r in results):.2f}s",
                      "total")
    common.console.print(table)
    if len(shown) < len(results):
        common.console.print(f"{len(results) - len(shown):,} more runs (ok, nothing to do) not listed.")


def cmd_plan(args: argparse.Namespace) -> int:
    from rich.table import Table

    from pg_ttl.expire import EngineError, plan

    with connect(args) as conn:
        require_installed(conn)
        try:
            plans = plan(conn, args.table)
        except EngineError as exc:
            raise CliError(str(exc)) from exc
    if args.json:
        print(json.dumps([{"table": p.table, "unit": p.unit, "action": p.action, "rows": p.rows,
                           "total_rows": p.total_rows,
                           "oldest_expiry": p.oldest_expiry.isoformat() if p.oldest_expiry else None,
                           "bytes_reclaimed": p.bytes_reclaimed, "paused": p.paused,
                           **({"target": p.target} if p.target else {}),
                           **({"then": p.then} if p.then else {})} for p in plans], indent=2))
        return 0
    if not plans:
        common.console.print("No TTL policies.")
        return 0
    table = Table(title="expiration plan (dry run: nothing was changed)")
    for col in ("table", "partition", "action", "rows that would go", "rows now", "oldest expiry", "reclaimed ~"):
        table.add_column(col, justify="right" if col.startswith(("rows", "reclaimed")) else "left")
    for p in plans:
        action = {"delete": "delete rows", "drop": "drop partition", "detach": "detach partition",
                  "orphans": "delete orphans", "queue": "drain queue shard",
                  "archive": f"move to {p.target}",
                  "export": f"export whole to {p.target}, then {p.then}"}[p.action]
        if p.paused:
            action += " (paused)"
        estimated = " ~" if p.action == "orphans" else ""  # from a few blocks of each range
        table.add_row(p.table, p.unit if p.unit != p.table else "—", action, f"{p.rows:,}{estimated}",
                      f"{p.total_rows:,}{estimated}",
                      p.oldest_expiry.strftime("%Y-%m-%d %H:%M:%S%z") if p.oldest_expiry else "—",
                      _bytes(p.bytes_reclaimed if p.rows else 0))
    common.console.print(table)
    if any(p.action == "orphans" for p in plans):
        common.console.print("~: orphans estimated from a few blocks of each range "
                             "(pg-ttl orphans plan TABLE: per range).")
    return 0


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
