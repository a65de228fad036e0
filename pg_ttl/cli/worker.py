"""worker / status / systemd-unit: the daemon and what it tells operators."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from pg_ttl.cli import common
from pg_ttl.cli.common import CliError, add_dsn, connect, require_installed

if TYPE_CHECKING:
    from pg_ttl.worker.status import TableStatus, TierBacklog

WORKER_EPILOG = """\
Settings: flags, else PGTTL_* environment variables, else the --config file
(TOML, see `pg-ttl systemd-unit --example-config`), else defaults.
Databases: --dsn (repeatable), else the config's [[databases]], else $PGTTL_DSN,
else libpq's PG* variables.

Signals: SIGTERM/SIGINT finish the current batch and exit 0; SIGHUP reloads the
config. Under systemd (Type=notify) it reports READY/STATUS/WATCHDOG.

Role: connect as a dedicated role (LOGIN NOSUPERUSER NOBYPASSRLS, a member of
each TTL table's owner role); as a superuser or BYPASSRLS role the worker
refuses to start (exit code 3) unless --allow-superuser is given. See docs/worker.md.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("worker", help="run the TTL daemon: runs each policy on its schedule until stopped",
                       description="Run every TTL policy on its job_cron schedule until stopped.",
                       epilog=WORKER_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", dest="dsns", action="append", default=None, metavar="DSN",
                   help="database to serve (repeat for several)")
    p.add_argument("--config", default=None, help="TOML config file (also $PGTTL_WORKER_CONFIG)")
    p.add_argument("--metrics-addr", default=None, metavar="HOST:PORT",
                   help="serve Prometheus metrics on http://HOST:PORT/metrics (port 0: any free port)")
    p.add_argument("--log-format", choices=("kv", "json"), default=None, help="log line format (default kv)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=None)
    # Numbers are read as text and checked with the config file's rules, so a bad value
    # gets the same one-line message wherever it comes from.
    p.add_argument("--poll-interval", default=None, metavar="SECONDS",
                   help="seconds between catalog reads when no NOTIFY arrives (> 0; default 30)")
    p.add_argument("--max-backoff", default=None, metavar="SECONDS",
                   help="longest wait between reconnect attempts (> 0; default 60)")
    p.add_argument("--shutdown-timeout", default=None, metavar="SECONDS",
                   help="on SIGTERM, how long the current batch may take to finish (> 0; default 30)")
    p.add_argument("--name", default=None, help="worker name in the run history (default host:pid)")
    p.add_argument("--allow-superuser", action="store_true", default=None,
                   help="run even when connected as a superuser or BYPASSRLS role (refused by default; "
                        "see docs/worker.md for a dedicated role)")
    p.add_argument("--once", action="store_true",
                   help="run what is due now in every database, then exit (for cron-style deployments); "
                        "exit code 0: every run succeeded, 1: some table's run failed, 2: a database "
                        "could not be served")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser("status", help="per TTL table: last run, next run, backlog, lag; and the workers",
                       description="Per TTL table: its last run (when, what it did, how it ended), its next run "
                                   "by job_cron, the backlog (rows expired and not yet removed, estimated), the "
                                   "lag (how long the oldest of them has been expired), the throttle's pace, a "
                                   "queue's backlog per shard, an orphan policy's sweep and a tier's archive "
                                   "backlog; then every worker with its heartbeat and current run. Reads only.")
    add_dsn(p)
    p.add_argument("table", nargs="?", default=None, help="only this table")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-estimates", action="store_true",
                   help="skip backlog, lag and archive backlog (they read each table's TTL index, planner "
                        "statistics, or the rows of a table with tiers)")
    p.add_argument("--lost-after", type=float, default=300.0, metavar="SECONDS",
                   help="show a worker as lost when its heartbeat is older than this and it is not in a run "
                        "(default 300)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("systemd-unit", help="print the systemd unit of the worker (Type=notify, watchdog)")
    p.add_argument("--exec", dest="exec_path", default=None,
                   help="pg-ttl executable for ExecStart (default: the one on PATH)")
    p.add_argument("--config", default="/etc/pg-ttl/worker.toml", help="config file the service reads")
    p.add_argument("--user", default="pg-ttl", help="unprivileged user (and group) the service runs as")
    p.add_argument("--example-config", action="store_true", help="print the example config file instead")
    p.set_defaults(func=cmd_systemd_unit)


def cmd_worker(args: argparse.Namespace) -> int:
    from pg_ttl.worker import config as config_mod

    overrides = {
        "dsns": args.dsns, "config": args.config, "metrics_addr": args.metrics_addr, "log_format": args.log_format,
        "log_level": args.log_level, "poll_interval": args.poll_interval, "max_backoff": args.max_backoff,
        "shutdown_timeout": args.shutdown_timeout, "name": args.name, "allow_superuser": args.allow_superuser,
    }
    try:
        cfg = config_mod.load(overrides)
    except config_mod.ConfigError as exc:
        raise CliError(str(exc), exit_code=2) from None
    try:
        from pg_ttl.worker.daemon import RoleRefused, Worker

        worker = Worker(cfg, cli_overrides=overrides, once=args.once)
    except ImportError as exc:
        raise CliError(f"the expiration engine is not available: {exc}") from None
    worker.install_signal_handlers()
    try:
        return worker.run()
    except config_mod.ConfigError as exc:
        raise CliError(str(exc), exit_code=2) from None
    except RoleRefused as exc:
        raise CliError(str(exc), exit_code=3) from None


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d{hours}h"
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _fmt_archive_backlog(tiers: list[TierBacklog]) -> str:
    """Rows due to move to each storage tier: 'local 30, cold ~1,200' (~: estimated)."""
    return ", ".join(f"{b.storage} " + ("?" if b.rows is None else f"{'' if b.exact else '~'}{b.rows:,}")
                     for b in tiers)


def _fmt_backlog(t: TableStatus) -> str:
    """'12' (counted), '~12 (estimate)', or for a table with an expiration queue its shards'
    counts: '12 (shards 5, 0, 7)', with '>=' where a shard's count stopped at its limit."""
    if t.backlog is None:
        return ""
    if t.queue_backlog:
        shards = ", ".join(f"{'' if b.exact else '>='}{b.rows:,}" for b in t.queue_backlog)
        return f"{'' if t.backlog_exact else '>='}{t.backlog:,} (shards {shards})"
    return str(t.backlog) if t.backlog_exact else f"~{t.backlog} (estimate)"


def cmd_status(args: argparse.Namespace) -> int:
    from rich.table import Table

    from pg_ttl.worker.status import collect

    with connect(args) as conn:
        require_installed(conn)
        if conn.execute("SELECT pg_catalog.to_regclass('ttl.worker_schedule')").fetchone() == (None,):
            raise CliError("the installed pg_ttl schema predates the worker (run: pg-ttl upgrade)")
        status = collect(conn, args.table, estimates=not args.no_estimates, lost_after=args.lost_after)
    if args.json:
        print(json.dumps(status.to_json(), indent=2))
        return 0
    if not status.tables:
        common.console.print("No TTL policies.")
    else:
        table = Table(title="TTL status")
        tiered = any(t.archive_backlog for t in status.tables)
        for col in ("table", "schedule", "last run", "rows deleted", "took", "next run (UTC)", "backlog", "lag",
                    *(("to archive",) if tiered else ())):
            table.add_column(col)
        for t in status.tables:
            last = t.last_run
            state = "[cyan]running[/]" if t.running else (
                f"{last.status} {last.started_at:%Y-%m-%d %H:%M}" if last else "never")
            table.add_row(
                t.table, t.job_cron + (" (paused)" if t.paused else ""), state,
                str(last.rows_deleted) if last else "", _fmt_duration(last.duration) if last else "",
                ("[yellow]skipped[/] by " + ", ".join(w["worker"] for w in t.skipped_by) if t.skipped_by
                 else f"{t.next_run:%Y-%m-%d %H:%M:%S}" if t.next_run else (t.schedule_error or "never")),
                _fmt_backlog(t),
                "" if t.lag_seconds is None else _fmt_duration(t.lag_seconds),
                *((_fmt_archive_backlog(t.archive_backlog),) if tiered else ()))
        common.console.print(table)
        for t in status.tables:
            if t.row_sweep is not None:
                sweep = t.row_sweep
                common.console.print(f"{t.table}: rows swept in shared ranges, "
                                     f"{sweep['done']}/{sweep['ranges']} ranges done"
                                     + (f", {sweep['running']} being worked on" if sweep["running"] else "")
                                     + (" (unfinished: the next run takes it up)" if not sweep["running"] else ""),
                                     markup=False, highlight=False)
            if t.orphans is not None:
                common.console.print(f"{t.table}: orphans {_fmt_orphans(t.orphans)}", markup=False, highlight=False)
            for skip in t.skipped_by:
                common.console.print(f"{t.table}: worker {skip['worker']} skips it: {skip['reason']}", markup=False,
                                     highlight=False)
        if any(t.backlog is not None and not t.backlog_exact for t in status.tables):
            common.console.print("backlog ~N: the planner's estimate from the last ANALYZE; "
                                 "`pg-ttl plan TABLE` shows what a pass would delete.")
        if any(b.rows is not None and not b.exact for t in status.tables for b in t.archive_backlog):
            common.console.print("to archive ~N: estimated from a sample of the table's pages; "
                                 "`pg-ttl plan TABLE` counts what each tier would move.")
    if status.workers:
        workers = Table(title="Workers")
        for col in ("name", "host", "pid", "state", "tables", "last heartbeat", "pace (latest run)"):
            workers.add_column(col)
        for w in status.workers:
            state = f"[red]lost[/] (last said {w['state']})" if w["lost"] else w["state"]
            workers.add_row(w["name"], w["host"], str(w["pid"]), state, str(w["tables"]),
                            f"{_fmt_duration(w['heartbeat_age'])} ago", w["pace"] or "-")
        common.console.print(workers)
    return 0


def _fmt_orphans(o: Any) -> str:
    """One line: the sweep's ranges, the last runs' orphans, what holds it back."""
    parts = [f"sweep {o.done}/{o.ranges} ranges done" if o.ranges else "no sweep yet",
             f"{o.last_deleted:,} deleted by the last run"]
    if o.given_up:
        parts.append(f"{o.given_up} range(s) given up")
    if o.failing:
        parts.append(f"{o.failing} range(s) failing")
    line = ", ".join(parts)
    if o.waiting:
        line += f"; {o.waiting}"
    if o.errors:
        line += f"; last error: {o.errors[0]}"
    return line + " (pg-ttl orphans status: per partition)"


def deploy_file(name: str) -> str:
    from importlib import resources

    return (resources.files("pg_ttl") / "deploy" / name).read_text()


def render_unit(exec_path: str | None = None, config: str = "/etc/pg-ttl/worker.toml", user: str = "pg-ttl") -> str:
    """The shipped unit with this machine's pg-ttl, config path and user filled in."""
    import shutil

    exe = exec_path or shutil.which("pg-ttl") or f"{sys.executable} -m pg_ttl"
    out = []
    for line in deploy_file("pg-ttl-worker.service").splitlines():
        if line.startswith("ExecStart="):
            line = f"ExecStart={exe} worker --config {config}"
        elif line.startswith("User="):
            line = f"User={user}"
        elif line.startswith("Group="):
            line = f"Group={user}"
        out.append(line)
    return "\n".join(out) + "\n"


def cmd_systemd_unit(args: argparse.Namespace) -> int:
    if args.example_config:
        sys.stdout.write(deploy_file("worker.toml"))
        return 0
    for value, what in ((args.config, "--config"), (args.user, "--user"), (args.exec_path or "", "--exec")):
        if any(c in value for c in "\n\r"):
            raise CliError(f"{what} must be one line")
    sys.stdout.write(render_unit(args.exec_path, args.config, args.user))
    return 0
