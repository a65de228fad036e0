"""``python -m bench``: run every workload end to end on a throwaway server and write the results."""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import contenders, data, foreground, idle_worker, partitioned, plain, report, trigger
from bench.runner import Config, log
from bench.server import BenchServer, git_commit, git_dirty, loadavg, machine_description

ROOT = Path(__file__).resolve().parent.parent
ALL = Config().workloads


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="pg_ttl against what users would do instead, side by side, on a throwaway PostgreSQL "
                    "(127.0.0.1 only). The default run takes about 10 minutes on 2 cores.")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiplies every size (1.0: 2M-row table, 10k and 100k rows per partition, 1,000 "
                         "idle policies); 0.01 is a quick check")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of every measurement (default 3)")
    ap.add_argument("--idle-policies", type=int, metavar="N",
                    help="TTL tables the idle worker watches (default 1,000 x --scale)")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma-separated workloads (default all: {','.join(ALL)})")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results",
                    help="directory for <date>.json and <date>.png (default bench/results)")
    ap.add_argument("--no-plot", action="store_true", help="skip the PNG")
    ap.add_argument("--update-readme", action="store_true",
                    help="rewrite the benchmark section of docs/benchmarks.md from this run's results")
    args = ap.parse_args(argv)
    unknown = set(args.only.split(",")) - set(ALL)
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {', '.join(ALL)}")
    if args.scale <= 0 or args.reps < 1:
        ap.error("--scale must be > 0 and --reps >= 1")
    if args.idle_policies is not None and args.idle_policies < 1:
        ap.error("--idle-policies must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = Config.scaled(args.scale, args.reps)
    if args.idle_policies is not None:
        cfg.idle_policies = args.idle_policies
        # its first pass (~5 ms a table) must end before the idle window is measured
        cfg.idle_first_pass_limit_s = max(cfg.idle_first_pass_limit_s, args.idle_policies * 0.03)
    cfg.workloads = tuple(w for w in ALL if w in args.only.split(","))
    started = datetime.now(UTC)
    results: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "git_commit": git_commit(ROOT),
        "git_uncommitted_files": git_dirty(ROOT),
        "config": {k: v for k, v in vars(cfg).items()},
        "load": {"before": loadavg()},
        "workloads": {},
        "errors": [],
    }
    t_start = time.monotonic()
    shared_buffers = int(min(1024, max(128, 1024 * args.scale * 1.5)))
    server = BenchServer(shared_buffers)
    log(f"starting a throwaway PostgreSQL (shared_buffers {shared_buffers}MB)")
    server.start()
    try:
        results["machine"] = machine_description(server)
        results["server_settings"] = server.effective_settings()
        _run_all(server, cfg, results)
    finally:
        server.cleanup()
    results["load"]["after"] = loadavg()
    results["duration_s"] = time.monotonic() - t_start
    results["targets"] = report.targets(results)
    stem = started.strftime("%Y-%m-%d")
    json_path = args.out / f"{stem}.json"
    png_path = args.out / f"{stem}.png"
    if not args.no_plot:
        why = report.plot(results, png_path)
        results["plot"] = None if why else png_path.name
        if why:
            log(why)
    report.write_json(results, json_path)
    log(f"results: {json_path} ({results['duration_s']:.0f} s)")
    # The summary lives in docs/benchmarks.md, one directory below the repository root.
    md = report.markdown(results, _rel(png_path) if results.get("plot") else None, _rel(json_path), "../")
    print(md)
    if args.update_readme:
        report.update_readme(ROOT / "docs" / "benchmarks.md", md)
        log("docs/benchmarks.md benchmark section updated")
    return 1 if results["errors"] else 0


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def _run_all(server: BenchServer, cfg: Config, results: dict[str, Any]) -> None:
    w = results["workloads"]
    entry, how = contenders.pgttl_entry_point()
    pgttl_missing = None if entry else how
    cfg.pgttl_entry = entry or "none"
    if entry:
        cfg.pgttl_startup_s = contenders.pgttl_startup_s(entry, reps=3 if cfg.scale >= 0.1 else 1)
        log(f"pg_ttl runs as: {how}; process start-up {cfg.pgttl_startup_s:.2f} s")
    results["pg_ttl_entry_point"] = how
    results["pg_ttl_startup_s"] = cfg.pgttl_startup_s
    partman_missing = contenders.partman_available(server.dsn())
    results["availability"] = {"pg_ttl_engine": how,
                               "pg_partman": partman_missing or "available"}

    def guarded(name: str, fn: Any, *args: Any) -> None:
        if name not in cfg.workloads:
            return
        log(f"workload {name}")
        t0 = time.monotonic()
        try:
            w[name] = fn(*args)
            w[name]["duration_s"] = time.monotonic() - t0
        except Exception as exc:
            results["errors"].append({"workload": name, "error": str(exc), "traceback": traceback.format_exc()})
            w[name] = {"error": str(exc)}
            log(f"workload {name} FAILED: {exc}")

    needs_plain = {"plain_indexed", "plain_noindex", "foreground"} & set(cfg.workloads)
    if needs_plain:
        log(f"building the plain table: {cfg.plain_rows:,} rows")
        pd = data.build_plain(server, cfg.plain_rows)
        ttl_plain = None if pgttl_missing else data.add_pg_ttl(
            server, pd.template, "tpl_plain_ttl", [(data.PLAIN_TABLE, data.PLAIN_EXPIRE_AFTER, "created_at")])
        if ttl_plain:
            results["pg_ttl_policies"] = {data.PLAIN_TABLE: data.describe_policy(server, ttl_plain, data.PLAIN_TABLE)}
        guarded("plain_indexed", plain.run, server, cfg, pd, ttl_plain, True, pgttl_missing)
        guarded("plain_noindex", plain.run, server, cfg, pd, ttl_plain, False, pgttl_missing)
        guarded("foreground", foreground.run, server, cfg, pd, ttl_plain, pgttl_missing)
    if "partitioned" in cfg.workloads:
        sizes = []
        for i, rows in enumerate(cfg.part_sizes):
            log(f"building the partitioned table: {rows:,} rows per partition")
            part = data.build_partitioned(server, rows, f"tpl_part_{i}")
            ttl_part = None if pgttl_missing else data.add_pg_ttl(
                server, part.template, f"tpl_part_{i}_ttl", [(data.PART_TABLE, data.PART_EXPIRE_AFTER, "created_at")])
            sizes.append((part, ttl_part))
            if ttl_part:
                results.setdefault("pg_ttl_policies", {})[data.PART_TABLE] = data.describe_policy(
                    server, ttl_part, data.PART_TABLE)
        guarded("partitioned", partitioned.run, server, cfg, sizes, pgttl_missing, partman_missing)
    if {"trigger", "idle_worker"} & set(cfg.workloads):
        server.create_database("tpl_empty_ttl")
        server.install_pg_ttl("tpl_empty_ttl")
        row_missing = trigger.row_ttl_available(server, "tpl_empty_ttl")
        worker_missing = idle_worker.worker_available()
        results["availability"].update(per_row_ttl=row_missing or "available",
                                       worker=worker_missing or "available")
        guarded("trigger", trigger.run, server, cfg, "tpl_empty_ttl", row_missing)
        guarded("idle_worker", idle_worker.run, server, cfg, "tpl_empty_ttl", worker_missing)


if __name__ == "__main__":
    sys.exit(main())
