"""Targets, the results file, the plot and the README summary table."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

TXN_TARGET_S = 0.2
WAL_PER_PARTITION_TARGET = 1_000_000
P99_TARGET = 1.25
IDLE_SPEED_TARGET = 0.8  # the throttle on an idle server: at least this share of the unthrottled rows/s
IDLE_WORKER_TARGET = 0.1  # statements/s of an idle worker (#17: with 10,000 policies)
OVERHEAD_TARGET = 0.20


def _median(entry: dict[str, Any] | None, key: str) -> float | None:
    if not entry:
        return None
    value = ((entry.get("summary") or {}).get(key) or {}).get("median")
    return float(value) if value is not None else None


def _target(name: str, goal: str, measured: Any, met: bool | None, detail: str = "") -> dict[str, Any]:
    return {"name": name, "goal": goal, "measured": measured, "met": met, "detail": detail}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals, checked against this run's medians (None: not measured in this run)."""
    w = results.get("workloads", {})
    out: list[dict[str, Any]] = []
    for key in ("plain_indexed", "plain_noindex"):
        r = (w.get(key) or {}).get("ratios") or {}
        raw, loop = r.get("pg_ttl_rows_per_s_vs_raw_delete"), r.get("pg_ttl_rows_per_s_vs_batched_loop")
        out.append(_target(f"{key}: pg_ttl rows/s vs raw DELETE", ">= 0.5x", raw,
                           None if raw is None else raw >= 0.5))
        out.append(_target(f"{key}: pg_ttl rows/s vs batched loop", ">= 1.5x", loop,
                           None if loop is None else loop >= 1.5))
    longest: list[tuple[float, str]] = []
    for key in ("plain_indexed", "plain_noindex", "foreground"):
        for run in (((w.get(key) or {}).get("contenders") or {}).get("pg_ttl") or {}).get("runs", []):
            if run.get("longest_txn_s") is not None:
                longest.append((run["longest_txn_s"], key))
    for size in (w.get("partitioned") or {}).get("sizes", []):
        for run in (size["contenders"].get("pg_ttl") or {}).get("runs", []):
            if run.get("longest_txn_s") is not None:
                longest.append((run["longest_txn_s"], f"partitioned {size['params']['rows_per_partition']}/part"))
    worst = max(longest) if longest else None
    out.append(_target("longest pg_ttl transaction (any workload, any run)", f"<= {TXN_TARGET_S * 1000:.0f} ms",
                       worst[0] if worst else None, None if worst is None else worst[0] <= TXN_TARGET_S,
                       f"in {worst[1]}" if worst else ""))
    wal = []
    for size in (w.get("partitioned") or {}).get("sizes", []):
        v = _median(size["contenders"].get("pg_ttl"), "wal_bytes_per_partition")
        if v is not None:
            wal.append((v, size["params"]["rows_per_partition"]))
    worst_wal = max(wal) if wal else None
    out.append(_target("pg_ttl WAL per dropped partition (worst size)", "<= 1 MB",
                       worst_wal[0] if worst_wal else None,
                       None if worst_wal is None else worst_wal[0] <= WAL_PER_PARTITION_TARGET,
                       f"at {worst_wal[1]} rows/partition" if worst_wal else ""))
    fg_all = (w.get("foreground") or {}).get("contenders") or {}
    limit = ((w.get("foreground") or {}).get("params") or {}).get("pg_ttl_limited_delete_rate_limit")
    for name, label in (("pg_ttl", "pg_ttl (adaptive throttle, default)"),
                        ("pg_ttl_limited", f"pg_ttl with delete_rate_limit {limit or 0:,}")):
        p99 = (fg_all.get(name) or {}).get("p99_vs_baseline")
        out.append(_target(f"foreground p99 during {label} vs baseline", f"<= {P99_TARGET}x", p99,
                           None if p99 is None else p99 <= P99_TARGET))
        near = (fg_all.get(name) or {}).get("p99_vs_adjacent")
        out.append(_target(f"foreground p99 during {label} vs the load just before and after it",
                           f"<= {P99_TARGET}x", near, None if near is None else near <= P99_TARGET))
    idle = (((w.get("foreground") or {}).get("idle_server") or {}).get("throttle_on_vs_off") or {}).get("median")
    out.append(_target("idle server: pg_ttl rows/s, throttle on vs off", f">= {IDLE_SPEED_TARGET}x", idle,
                       None if idle is None else idle >= IDLE_SPEED_TARGET))
    trig = ((w.get("trigger") or {}).get("contenders") or {}).get("pg_ttl_row_ttl") or {}
    for key, label in (("single_insert_tps", "single-row INSERT"), ("bulk_insert_rows_per_s", "bulk INSERT")):
        ov = (trig.get("overhead_vs_no_ttl") or {}).get(key)
        out.append(_target(f"per-row TTL overhead, {label}", "<= 20%", ov,
                           None if ov is None else ov <= OVERHEAD_TARGET))
    iw = w.get("idle_worker") or {}
    qps = (iw.get("idle") or {}).get("statements_per_s")
    fp = iw.get("first_pass") or {}
    detail = "" if fp.get("finished", True) else (
        f"not idle: its first pass had done {fp.get('tables_done')} of {iw['params']['policies']} tables "
        f"after {fp.get('seconds', 0):.0f} s")
    out.append(_target(f"idle worker statements/s ({iw.get('params', {}).get('policies', 1000):,} policies)",
                       f"<= {IDLE_WORKER_TARGET}/s", qps,
                       None if qps is None else (qps <= IDLE_WORKER_TARGET and fp.get("finished", True)), detail))
    return out


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")


# -- plot ----------------------------------------------------------------------

def plot(results: dict[str, Any], path: Path) -> str | None:
    """One PNG with a panel per workload; None (and why) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'pg-ttl[bench]'): no plot"
    w = results.get("workloads", {})
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    fig.suptitle(f"pg_ttl bench {results.get('date', '')[:10]} — {results['machine'].get('nproc')} cores, "
                 f"{results['machine'].get('postgres', '')[:16]}; bars = median, whiskers = min..max", fontsize=11)
    _plain_panel(axes[0][0], w, "rows_per_s", "rows deleted per second", scale=1e-3, unit="k rows/s")
    _plain_panel(axes[0][1], w, "longest_txn_s", "longest transaction", scale=1e3, unit="ms", log=True,
                 hline=TXN_TARGET_S * 1e3)
    _partition_panel(axes[0][2], w)
    _foreground_panel(axes[1][0], w)
    _trigger_panel(axes[1][1], w)
    _partition_wall_panel(axes[1][2], w)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return None


def _bar_groups(ax: Any, groups: list[str], series: dict[str, list[tuple[float | None, float | None, float | None]]],
                unit: str, title: str, log: bool = False, hline: float | None = None) -> None:
    n = max(1, len(series))
    width = 0.8 / n
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        meds = [v[0] if v[0] is not None else 0.0 for v in values]
        lo = [max(0.0, (v[0] - v[1])) if v[0] is not None and v[1] is not None else 0.0 for v in values]
        hi = [max(0.0, (v[2] - v[0])) if v[0] is not None and v[2] is not None else 0.0 for v in values]
        ax.bar(xs, meds, width, yerr=[lo, hi], capsize=2, label=label)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title(title, fontsize=10)
    if log:
        ax.set_yscale("log")
    if hline is not None:
        ax.axhline(hline, color="red", linestyle="--", linewidth=1, label="target")
    ax.legend(fontsize=7)


def _stat(entry: dict[str, Any] | None, key: str, scale: float) -> tuple[float | None, float | None, float | None]:
    s = ((entry or {}).get("summary") or {}).get(key) or {}
    if s.get("median") is None:
        return (None, None, None)
    return (s["median"] * scale, s["min"] * scale, s["max"] * scale)


def _plain_panel(ax: Any, w: dict[str, Any], key: str, title: str, scale: float, unit: str, log: bool = False,
                 hline: float | None = None) -> None:
    groups = [g for g in ("plain_indexed", "plain_noindex") if g in w and "contenders" in w[g]]
    series: dict[str, list[Any]] = {}
    for contender in ("raw_delete", "batched_loop", "pg_ttl"):
        series[contender] = [_stat(w[g]["contenders"].get(contender), key, scale) for g in groups]
    if key == "rows_per_s":
        series["pg_ttl excl. process start"] = [
            _stat(w[g]["contenders"].get("pg_ttl"), "rows_per_s_excl_startup", scale) for g in groups]
    _bar_groups(ax, [g.replace("plain_", "") for g in groups], series, unit, f"plain table: {title}", log, hline)


def _partition_panel(ax: Any, w: dict[str, Any]) -> None:
    sizes = (w.get("partitioned") or {}).get("sizes", [])
    groups = [f"{s['params']['rows_per_partition']:,} rows/part" for s in sizes]
    series = {c: [_stat(s["contenders"].get(c), "wal_bytes_per_partition", 1e-3) for s in sizes]
              for c in ("pg_partman", "hand_drop", "pg_ttl")}
    _bar_groups(ax, groups, series, "kB", "partitioned: WAL per dropped partition", log=True,
                hline=WAL_PER_PARTITION_TARGET / 1e3)


def _partition_wall_panel(ax: Any, w: dict[str, Any]) -> None:
    sizes = (w.get("partitioned") or {}).get("sizes", [])
    groups = [f"{s['params']['rows_per_partition']:,} rows/part" for s in sizes]
    series = {c: [_stat(s["contenders"].get(c), "wall_s", 1.0) for s in sizes]
              for c in ("pg_partman", "hand_drop", "pg_ttl")}
    series["pg_ttl excl. process start"] = [_stat(s["contenders"].get("pg_ttl"), "wall_excl_startup_s", 1.0)
                                            for s in sizes]
    _bar_groups(ax, groups, series, "s", "partitioned: wall time to drop 10 days", log=True)


def _foreground_panel(ax: Any, w: dict[str, Any]) -> None:
    fg = (w.get("foreground") or {}).get("contenders") or {}
    names = [n for n in ("baseline", "raw_delete", "batched_loop", "pg_ttl", "pg_ttl_target_1_5", "pg_ttl_unthrottled",
                         "pg_ttl_limited")
             if (fg.get(n) or {}).get("available")]
    series = {
        "p50": [_stat(fg[n], "p50_ms", 1.0) for n in names],
        "p99": [_stat(fg[n], "p99_ms", 1.0) for n in names],
    }
    _bar_groups(ax, names, series, "ms", "foreground insert+select latency while expiring", log=True)


def _trigger_panel(ax: Any, w: dict[str, Any]) -> None:
    tr = (w.get("trigger") or {}).get("contenders") or {}
    names = [n for n in ("no_ttl", "hand_default", "pg_ttl_row_ttl") if (tr.get(n) or {}).get("available")]
    series = {
        "bulk INSERT (k rows/s)": [_stat(tr[n], "bulk_insert_rows_per_s", 1e-3) for n in names],
        "single-row INSERT (100 tps)": [_stat(tr[n], "single_insert_tps", 1e-2) for n in names],
    }
    _bar_groups(ax, names, series, "", "write throughput with per-row TTL")


# -- README summary --------------------------------------------------------------

def _fmt(v: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "—" if v is None else f"{v:{spec}}{suffix}"


def markdown(results: dict[str, Any], png_rel: str | None, json_rel: str, link_prefix: str = "") -> str:
    """The summary; ``link_prefix`` leads from the page it goes into to the repository root."""
    w = results.get("workloads", {})
    m = results["machine"]
    lines = [
        f"Latest run: {results['date'][:16].replace('T', ' ')} UTC, {m.get('nproc')} cores ({m.get('cpu_model')}), "
        f"{m.get('memory_mb', 0) // 1024} GB RAM, {m.get('postgres', '').split(' on ')[0]}; scale "
        f"{results['config']['scale']}, {results['config']['reps']} repetitions (median, min-max), load average "
        f"{results['load']['before']} before / {results['load']['after']} after. Raw numbers: [`{json_rel}`]"
        f"({link_prefix}{json_rel}); how to rerun: [`bench/README.md`]({link_prefix}bench/README.md).",
        "",
    ]
    for key in ("plain_indexed", "plain_noindex"):
        wl = w.get(key)
        if not wl or "contenders" not in wl:
            continue
        lines += [f"**{wl['description']}** ({wl['params']['rows']:,} rows, {wl['params']['expired']:,} expired)", "",
                  "| contender | wall s | rows/s | WAL MB | longest txn ms | dead tuples left |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, entry in wl["contenders"].items():
            if not entry.get("available"):
                lines.append(f"| {name} | not run: {_reason(entry)} | | | | |")
                continue
            lines.append(
                f"| {name} | {_range(entry, 'wall_s', 1, '.2f')} | {_range(entry, 'rows_per_s', 1e-3, '.0f')}k "
                f"| {_range(entry, 'wal_bytes', 1e-6, '.0f')} | {_range(entry, 'longest_txn_s', 1e3, '.0f')} "
                f"| {_fmt(_median(entry, 'dead_tuples'), ',.0f')} |")
        lines.append("")
    part = w.get("partitioned")
    if part and "sizes" in part:
        lines += ["**Partitioned by day** (drop the 10 expired of 25 daily partitions)", "",
                  "| rows/partition | contender | wall s | WAL per partition kB | longest txn ms |",
                  "|---:|---|---:|---:|---:|"]
        for size in part["sizes"]:
            for name, entry in size["contenders"].items():
                rpp = f"{size['params']['rows_per_partition']:,}"
                if not entry.get("available"):
                    lines.append(f"| {rpp} | {name} | not run: {_reason(entry)} | | |")
                    continue
                lines.append(f"| {rpp} | {name} | {_range(entry, 'wall_s', 1, '.3f')} "
                             f"| {_range(entry, 'wal_bytes_per_partition', 1e-3, '.0f')} "
                             f"| {_range(entry, 'longest_txn_s', 1e3, '.0f')} |")
        lines.append("")
    fg = w.get("foreground")
    if fg and "contenders" in fg:
        lines += [f"**Foreground load** ({fg['params']['rate_tps']} tps insert + point select, "
                  f"{fg['params']['clients']} connections) while expiring", "",
                  "| during | p50 ms | p99 ms | p99 vs baseline | p99 vs just before and after | throughput tps "
                  "| expiry rows/s |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name, entry in fg["contenders"].items():
            if not entry.get("available"):
                lines.append(f"| {name} | not run: {_reason(entry)} | | | | | |")
                continue
            pooled = entry["pooled"]
            rate = _median(entry, "expiry_rows_per_s")
            lines.append(f"| {name} | {_fmt(pooled['p50_ms'])} | {_fmt(pooled['p99_ms'])} "
                         f"| {_fmt(entry.get('p99_vs_baseline'), '.2f', 'x')} "
                         f"| {_fmt(entry.get('p99_vs_adjacent'), '.2f', 'x')} "
                         f"| {_fmt(_median(entry, 'throughput_tps'), '.0f')} "
                         f"| {'—' if rate is None else f'{rate / 1000:,.0f}k'} |")
        limit = fg["params"].get("pg_ttl_limited_delete_rate_limit")
        lines += ["", "`pg_ttl` is the default pass (adaptive throttle on); `pg_ttl_unthrottled` the same with "
                  "the `throttle` setting off"
                  + (f"; `pg_ttl_limited` has the throttle off and the policy's `delete_rate_limit = {limit:,}`."
                     if limit else ".")]
        idle_server = fg.get("idle_server") or {}
        on_off = idle_server.get("throttle_on_vs_off") or {}
        rates = idle_server.get("rows_per_s") or {}
        if on_off.get("median") is not None:
            lines += ["", f"Idle server (no load): the default pass ran at {on_off['median']:.2f}x "
                      f"({on_off['min']:.2f}-{on_off['max']:.2f}) the unthrottled one's rows/s "
                      f"({(rates.get('pg_ttl') or {}).get('median') or 0:,.0f} vs "
                      f"{(rates.get('pg_ttl_unthrottled') or {}).get('median') or 0:,.0f} rows/s, medians)."]
        lines.append("")
    tr = w.get("trigger")
    if tr and "contenders" in tr:
        lines += ["**Write cost of per-row TTL**", "",
                  "| table | bulk INSERT rows/s | single-row INSERT tps | bulk UPDATE rows/s | INSERT overhead |",
                  "|---|---:|---:|---:|---:|"]
        for name, entry in tr["contenders"].items():
            if not entry.get("available"):
                lines.append(f"| {name} | not run: {_reason(entry)} | | | |")
                continue
            ov = entry.get("overhead_vs_no_ttl") or {}
            lines.append(f"| {name} | {_fmt(_median(entry, 'bulk_insert_rows_per_s'), ',.0f')} "
                         f"| {_fmt(_median(entry, 'single_insert_tps'), ',.0f')} "
                         f"| {_fmt(_median(entry, 'bulk_update_rows_per_s'), ',.0f')} "
                         f"| bulk {_pct(ov.get('bulk_insert_rows_per_s'))}, "
                         f"single {_pct(ov.get('single_insert_tps'))} |")
        lines.append("")
    idle = w.get("idle_worker")
    if idle:
        if idle.get("available"):
            win, fp = idle["idle"], idle["first_pass"]
            lines += [f"**Worker first pass** over {idle['params']['policies']:,} empty tables (each never ran, so "
                      f"due at once): {fp['tables_done']:,} tables in {fp['seconds']:.1f} s"
                      + ("" if fp["finished"] else " (not finished: stopped waiting)")
                      + (f", {fp['per_table_s'] * 1000:.0f} ms per table." if fp.get("per_table_s") else "."), ""]
            lines += [f"**{'Idle worker' if fp['finished'] else 'Worker (still in its first pass)'}** with "
                      f"{idle['params']['policies']:,} policies: "
                      f"{win['statements_per_s']:.2f} statements/s, worker CPU {win['worker_cpu_pct']:.2f}%, "
                      f"server CPU {win['server_cpu_pct']:.2f}% "
                      f"(without worker {idle['baseline_no_worker']['server_cpu_pct']:.2f}%).", ""]
        else:
            lines += [f"**Idle worker**: not run: {_reason(idle)}", ""]
    lines += ["**Targets** (goals, not assertions)", "", "| target | goal | measured | met |", "|---|---|---:|---|"]
    for t in results.get("targets", []):
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['name']} | {t['goal']} | {_fmt_measured(t)} | {met} {t.get('detail', '')} |")
    if png_rel:
        lines += ["", f"![bench results]({link_prefix}{png_rel})"]
    return "\n".join(lines) + "\n"


def _reason(entry: dict[str, Any]) -> str:
    """First line of why a contender did not run, safe inside a table cell."""
    return str(entry.get("reason") or "").splitlines()[0].replace("|", "\\|")[:160] if entry.get("reason") else ""


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{v * 100:+.0f}%"


def _fmt_measured(t: dict[str, Any]) -> str:
    v = t["measured"]
    if v is None:
        return "—"
    name = t["name"]
    if "transaction" in name:
        return f"{v * 1000:.0f} ms"
    if "WAL" in name:
        return f"{v / 1e3:.0f} kB"
    if "overhead" in name:
        return f"{v * 100:.0f}%"
    if "statements" in name:
        return f"{v:.2f}/s"
    return f"{v:.2f}x"


def _range(entry: dict[str, Any], key: str, scale: float, spec: str) -> str:
    s = ((entry.get("summary") or {}).get(key) or {})
    if s.get("median") is None:
        status = ", ".join(sorted({r.get("status", "?") for r in entry.get("runs", [])}))
        return f"— ({status})" if status else "—"
    med, lo, hi = s["median"] * scale, s["min"] * scale, s["max"] * scale
    if s.get("n", 1) == 1:
        return f"{med:{spec}}"
    return f"{med:{spec}} ({lo:{spec}}-{hi:{spec}})"


SECTION = re.compile(r"(<!-- section:bench -->\n)(.*?)(<!-- /section:bench -->)", re.S)


def update_readme(readme: Path, body: str) -> None:
    text = readme.read_text()
    if not SECTION.search(text):
        raise RuntimeError(f"{readme} has no <!-- section:bench --> markers")
    readme.write_text(SECTION.sub(lambda m: m.group(1) + "## Benchmark\n\n" + body + m.group(3), text, count=1))
