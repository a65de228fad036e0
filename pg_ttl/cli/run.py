"""run / plan: one expiration pass in the foreground, or a dry run of it."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from types import FrameType
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from pg_ttl.cli.common import CliError, add_dsn, connect, console, require_installed, resolve_dsn
from pg_ttl.expire import EngineError, TableResult, UnitResult, expire, plan


def register(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="run one expiration pass now, with progress bars",
        description="Delete expired rows and remove expired partitions of TABLE(s) (default: every TTL table) "
        "in one pass, now, whatever the schedule. Ctrl-C or SIGTERM finishes the current batch and stops; "
        "the next run resumes from there. Exit status 1 if a table failed.",
    )
    add_dsn(p)
    p.add_argument("tables", nargs="*", metavar="TABLE", help="tables to expire (default: all with a TTL)")
    p.add_argument("--once", action="store_true",
                   help="one pass and exit (what run always does; the scheduler is `pg-ttl worker`)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
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
    """One progress bar per unit (partition or table)."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[tuple[str, str], Any] = {}

    def unit_started(self, table: str, unit: str, action: str, estimate: int | None) -> None:
        label = unit if unit == table else f"{table} > {unit}"
        rows = action in ("delete", "orphans", "queue", "archive")
        if action == "orphans":
            label += " (orphans)"
        elif action == "queue":
            label += " (expiration queue)"
        elif action == "archive":
            label += " (to storage)"
        elif not rows:
            label += f" ({action} partition)"
        self.tasks[(table, unit)] = self.progress.add_task(label, total=estimate if rows else 1)

    def batch_done(self, table: str, unit: str, selected: int, deleted: int) -> None:
        task = self.tasks.get((table, unit))
        if task is not None:
            current = self.progress.tasks[task]
            if current.total is not None and current.completed + deleted > current.total:
                self.progress.update(task, total=current.completed + deleted)
            self.progress.advance(task, deleted)

    def unit_finished(self, result: UnitResult) -> None:
        task = self.tasks.get((result.table, result.unit))
        if task is None:
            return
        if result.status == "ok":
            done = self.progress.tasks[task].completed
            rows = result.action in ("delete", "orphans", "queue", "archive")
            # Rows: the bar ends at what was done ("0/0 rows" when nothing was due); a partition: 1/1.
            self.progress.update(task, total=done if rows else 1, completed=done if rows else 1)
        else:
            self.progress.update(task, description=self.progress.tasks[task].description + f" [{result.status}]")


def _stop_on_signals(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def cmd_run(args: argparse.Namespace) -> int:
    with connect(args) as conn:
        require_installed(conn)
    stop = threading.Event()
    _stop_on_signals(stop)
    dsn = resolve_dsn(args)
    try:
        if args.quiet or args.json:
            results = expire(dsn, args.tables or None, stop=stop, worker="pg-ttl run")
        else:
            columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("rows"), TimeElapsedColumn())
            with Progress(*columns, console=console, transient=False) as progress:
                results = expire(dsn, args.tables or None, stop=stop, progress=BarProgress(progress),
                                 worker="pg-ttl run")
    except EngineError as exc:
        raise CliError(str(exc)) from exc
    if args.json:
        print(json.dumps([_result_json(r) for r in results], indent=2))
    else:
        _summary(results)
        if stop.is_set():
            console.print("Stopped after the current batch; the next run resumes from there.")
    return 1 if any(r.status == "failed" for r in results) else 0


def _result_json(r: TableResult) -> dict[str, Any]:
    return {"table": r.table, "run_id": r.run_id, "status": r.status, "rows_selected": r.rows_selected,
            "rows_deleted": r.rows_deleted, "orphans_deleted": r.orphans_deleted,
            "partitions_dropped": r.partitions_dropped,
            "partitions_detached": r.partitions_detached, "duration": round(r.duration, 3), "error": r.error,
            "units": [{"unit": u.unit, "action": u.action, "strategy": u.strategy, "status": u.status,
                       "rows_selected": u.rows_selected, "rows_deleted": u.rows_deleted, "error": u.error,
                       "duration": round(u.duration, 3)} for u in r.units]}


STATUS_STYLE = {"ok": "green", "partial": "yellow", "busy": "yellow", "paused": "yellow", "failed": "red"}


def _summary(results: list[TableResult]) -> None:
    if not results:
        console.print("No TTL policies to run.")
        return
    table = Table(title="expiration run")
    for col in ("table", "status", "rows deleted", "partitions dropped", "partitions detached", "time", "note"):
        table.add_column(col, justify="right" if col.startswith(("rows", "partitions", "time")) else "left")
    for r in results:
        notes = [r.error] if r.error else []
        notes += [f"{u.unit}: {u.status} ({u.error})" for u in r.units if u.status not in ("ok",) and u.error]
        style = STATUS_STYLE.get(r.status, "")
        table.add_row(r.table, f"[{style}]{r.status}[/]", f"{r.rows_deleted:,}", str(r.partitions_dropped),
                      str(r.partitions_detached), f"{r.duration:.2f}s", "; ".join(dict.fromkeys(notes)))
    console.print(table)


def cmd_plan(args: argparse.Namespace) -> int:
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
                           **({"target": p.target} if p.target else {})} for p in plans], indent=2))
        return 0
    if not plans:
        console.print("No TTL policies.")
        return 0
    table = Table(title="expiration plan (dry run: nothing was changed)")
    for col in ("table", "partition", "action", "rows that would go", "rows now", "oldest expiry", "reclaimed ~"):
        table.add_column(col, justify="right" if col.startswith(("rows", "reclaimed")) else "left")
    for p in plans:
        action = {"delete": "delete rows", "drop": "drop partition", "detach": "detach partition",
                  "orphans": "delete orphans", "queue": "drain queue shard",
                  "archive": f"move to {p.target}"}[p.action]
        if p.paused:
            action += " (paused)"
        table.add_row(p.table, p.unit if p.unit != p.table else "—", action, f"{p.rows:,}", f"{p.total_rows:,}",
                      p.oldest_expiry.strftime("%Y-%m-%d %H:%M:%S%z") if p.oldest_expiry else "—",
                      _bytes(p.bytes_reclaimed if p.rows else 0))
    console.print(table)
    return 0


def _bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
