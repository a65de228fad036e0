"""A tiny-scale run of the whole bench harness (``python -m bench``), end to end.

It starts its own throwaway server like the full run does; the assertions
check that the results are real, structured measurements that agree with each
other (rows deleted = rows that were expired, WAL written, transactions seen),
not the numbers themselves.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run_bench(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "bench", "--scale", "0.002", "--reps", "1", "--out", str(out),
                           *extra], capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)
    files = sorted(out.glob("*.json"))
    assert files, f"no results file; stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    return proc, json.loads(files[-1].read_text())


def _ok_runs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    assert entry["available"] is True, entry.get("reason")
    runs = entry["runs"]
    assert runs, "no runs recorded"
    assert all(r["status"] == "ok" for r in runs), [r.get("error") or r["status"] for r in runs]
    return list(runs)


@pytest.mark.slow
def test_bench_runs_end_to_end_and_reports_real_measurements(tmp_path: Path) -> None:
    with_plot = importlib.util.find_spec("matplotlib") is not None
    proc, res = _run_bench(tmp_path, *([] if with_plot else ["--no-plot"]))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert res["errors"] == []

    # Where, when, on what.
    datetime.fromisoformat(res["date"])
    m = res["machine"]
    assert m["nproc"] >= 1 and m["memory_mb"] > 0 and m["postgres"].startswith("PostgreSQL")
    assert res["server_settings"]["full_page_writes"] == "on"
    assert res["server_settings"]["track_commit_timestamp"] == "on"
    assert len(res["load"]["before"]) == 3 and len(res["load"]["after"]) == 3

    # Plain table, both index variants: every contender removed exactly the expired half.
    for key in ("plain_indexed", "plain_noindex"):
        wl = res["workloads"][key]
        expired, rows = wl["params"]["expired"], wl["params"]["rows"]
        assert 0 < expired < rows
        contenders = ["raw_delete", "batched_loop"] + (["pg_ttl"] if wl["contenders"]["pg_ttl"]["available"] else [])
        for name in contenders:
            for run in _ok_runs(wl["contenders"][name]):
                assert run["correct"] and run["rows_deleted"] == expired and run["rows_left"] == rows - expired
                assert run["expired_left"] == 0
                assert run["wall_s"] > 0 and abs(run["rows_per_s"] - expired / run["wall_s"]) < 1e-6 * expired
                # Deleting rows writes WAL: at least one record per deleted row (> 40 bytes each).
                assert run["wal_bytes"] > 40 * expired
                assert 0 <= run["longest_txn_s"] <= run["wall_s"] + 0.05
                # At this scale most transactions are shorter than a sample, so none may be seen (that the
                # sampler sees one is test_transaction_sampler_measures_a_transaction): what was seen is consistent.
                assert 0 <= run["txns_exact"] <= run["txns_sampled"]
                assert run["txns_sampled"] > 0 or run["longest_txn_s"] == 0
            summary = wl["contenders"][name]["summary"]
            assert summary["wall_s"]["n"] == 1 and summary["wall_s"]["median"] > 0
        raw = wl["contenders"]["raw_delete"]["runs"][0]
        assert raw["dead_tuples"] == expired  # autovacuum is off: every deleted row is still dead
        assert raw["transactions"] == 1
        loop = wl["contenders"]["batched_loop"]["runs"][0]
        assert loop["transactions"] == -(-expired // 10000) + 1  # full batches + the empty one that ends the loop
        assert wl["ratios"]["batched_loop_rows_per_s_vs_raw_delete"] > 0

    # Partitioned: the expired days are gone, WAL is counted per dropped partition, at two sizes.
    part = res["workloads"]["partitioned"]
    assert len(part["sizes"]) == 2
    assert part["sizes"][0]["params"]["rows_per_partition"] < part["sizes"][1]["params"]["rows_per_partition"]
    for size in part["sizes"]:
        n = size["params"]["expired_partitions"]
        for name, entry in size["contenders"].items():
            if not entry["available"]:
                assert entry["reason"] and name != "hand_drop"
                continue
            for run in _ok_runs(entry):
                assert run["partitions_dropped"] == n and run["expired_left"] == 0
                assert run["wal_bytes_per_partition"] == run["wal_bytes"] / n > 0
    assert "hand_drop" in part["growth"]

    # Foreground: latencies from real transactions, in every window.
    fg = res["workloads"]["foreground"]["contenders"]
    rate = res["workloads"]["foreground"]["params"]["rate_tps"]
    for name in ("baseline", "raw_delete", "batched_loop", "pg_ttl", "pg_ttl_limited"):
        for run in _ok_runs(fg[name]):
            # at this scale a raw DELETE lasts ~2 ms: shorter than the load's 2.5 ms between transactions
            if run["window_s"] * rate >= 5:
                assert run["txns"] > 0
            if run["txns"]:
                assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["max_ms"]
            if name != "baseline":
                assert run["expiry_rows_per_s"] > 0
    assert _ok_runs(fg["baseline"])[0]["txns"] > 0 and fg["baseline"]["p99_vs_baseline"] == 1.0
    # beside each contender's window, the load just before and after it on the same copy
    adjacent_s = res["workloads"]["foreground"]["params"]["adjacent_window_s"]
    for name in ("raw_delete", "pg_ttl"):
        [run] = _ok_runs(fg[name])
        assert run["adjacent_txns"] >= 2 * adjacent_s * rate * 0.5
        assert run["txns"] == 0 or run["p99_vs_adjacent"] == run["p99_ms"] / run["adjacent_p99_ms"]
    assert fg["pg_ttl"]["p99_vs_adjacent"] == fg["pg_ttl"]["pooled"]["p99_ms"] / fg["pg_ttl"]["adjacent"]["p99_ms"]
    assert "adjacent" not in fg["baseline"]
    # the rate limit holds: no faster than the policy's delete_rate_limit (plus one transaction's slack)
    limit = res["workloads"]["foreground"]["params"]["pg_ttl_limited_delete_rate_limit"]
    limited = _ok_runs(fg["pg_ttl_limited"])[0]
    assert limited["expiry_rows_per_s"] <= limit * 1.5

    # Write cost: measured throughputs, overhead relative to the same run's plain table.
    tr = res["workloads"]["trigger"]["contenders"]
    for run in _ok_runs(tr["no_ttl"]):
        assert run["bulk_insert_rows_per_s"] > 0 and run["single_insert_tps"] > 0
    assert tr["no_ttl"]["overhead_vs_no_ttl"]["single_insert_tps"] == 0.0

    # Idle worker: the checkout has `pg-ttl worker`, so the workload ran, after the first pass over every table.
    idle = res["workloads"]["idle_worker"]
    assert idle["available"] is True, idle.get("reason")
    assert idle["idle_reached"] is True and idle["first_pass"]["tables_done"] == idle["params"]["policies"]
    assert idle["idle"]["window_s"] >= idle["params"]["window_s"]
    # rates from counter differences over the window (an idle worker may send nothing in 2 s): measured, not negative
    assert idle["idle"]["statements_per_s"] >= 0 and idle["idle"]["worker_cpu_pct"] >= 0
    assert idle["worker_exit_code"] == 0  # stopped cleanly by SIGTERM

    names = {t["name"] for t in res["targets"]}
    assert any("raw DELETE" in n for n in names) and any("WAL per dropped partition" in n for n in names)
    assert all(t["met"] in (True, False, None) for t in res["targets"])
    assert "| raw_delete |" in proc.stdout
    if with_plot:
        assert res["plot"] and (tmp_path / res["plot"]).stat().st_size > 10_000


def test_bench_refuses_unknown_workload(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench", "--only", "nope", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2 and "unknown workload" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_transaction_sampler_measures_a_transaction(dsn: str) -> None:
    """The sampler behind "longest transaction" sees a 0.2 s transaction and gets its length."""
    code = f"""
import json, psycopg
from bench.measure import measuring
with measuring({dsn!r}) as m:
    with psycopg.connect({dsn!r}) as app:
        app.execute("SELECT pg_sleep(0.2)")
        app.commit()
print(json.dumps({{"wall_s": m.wall_s, **m.txn}}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    txn = json.loads(proc.stdout)
    assert txn["txns_sampled"] == 1 and txn["samples"] > 10
    assert 0.15 <= txn["longest_txn_s"] <= txn["wall_s"]


@pytest.mark.parametrize("module,args,key", [
    ("bench.many_tables", ["--tables", "30"], "results"),
    ("bench.many_partitions", ["--partitions", "20", "--reps", "1"], "results"),
    ("bench.row_expiry", ["--rows", "20000", "--shares", "0", "0.01", "--reps", "1", "--strategies"], "results"),
    ("bench.column_nulling", ["--rows", "20000", "--reps", "1"], "results"),
    # (two workers share a table's sweep from two ranges of row_range_bytes, 32 MB, on)
    pytest.param("bench.shared_table", ["--rows", "400000", "600000", "--reps", "1"], "results",
                 marks=pytest.mark.slow),
])
def test_scaling_benches_run_and_check_their_results(tmp_path: Path, module: str, args: list[str], key: str) -> None:
    """The scaling benchmarks at a tiny scale: they run, their own check of the rows left
    passes, what they count is what happened (runs, partitions dropped, values nulled), and
    they plot cost against size, at once or later from the results they wrote."""
    out, png, again = tmp_path / "out.json", tmp_path / "out.png", tmp_path / "again.png"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", module, *args, "--json", str(out), "--plot", str(png)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    reread = subprocess.run([sys.executable, "-m", module, "--from-json", str(out), "--plot", str(again)],
                            capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert reread.returncode == 0, reread.stderr[-3000:]
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table and [line for line in reread.stdout.splitlines() if line.startswith("|")] == table
    assert again.stat().st_size > 10_000
    results = json.loads(out.read_text())[key]
    if module == "bench.many_tables":
        [r] = results
        assert r["worker"]["correct"] and r["hand_loop"]["correct"]
        assert r["worker"]["runs"] == 30 and r["worker"]["rows_deleted"] == 30 * 5
        assert r["worker"]["statements"] > 30 and 0 < r["worker"]["pass_seconds"] < r["worker"]["process_seconds"]
    elif module == "bench.row_expiry":
        # (the bench asserts that each contender deleted exactly the expired rows)
        # nothing expired (what a pass costs whatever it deletes): each contender deleted no row
        fixed = [r for r in results if r["share"] == 0]
        assert {r["indexed"] for r in fixed} == {False, True} and all(r["expired"] == 0 for r in fixed)
        assert all(run["deleted"] == 0 for r in fixed for c in r["contenders"].values() for run in c["runs"])
        assert "Nothing expired: what a pass costs" in proc.stdout
        by_index = {r["indexed"]: r for r in results if r["share"] > 0}
        assert set(by_index) == {False, True} and all(r["expired"] == 200 for r in by_index.values())
        assert by_index[True]["pg_ttl_strategy"] == ["index"] and by_index[False]["pg_ttl_strategy"] == ["ctid"]
        assert set(by_index[True]["contenders"]) == {"pg_ttl", "CALL ttl.run()", "one DELETE",
                                                     "pg_ttl, open session", "one DELETE, open session",
                                                     "pg_ttl, passed before", "one DELETE, run before",
                                                     "pg_ttl, row_strategy index", "pg_ttl, row_strategy ctid"}
        assert "Sessions that passed the table before" in proc.stdout
        assert all(c["seconds"] > 0 for r in results for c in r["contenders"].values())
    elif module == "bench.many_partitions":
        [r] = results["20"]
        assert r["correct"] and r["dropped"] >= 9 and r["statements"] >= r["dropped"]
    elif module == "bench.shared_table":
        # (the bench asserts that exactly the expired rows went, every range once)
        assert [r["rows"] for r in results] == [400000, 600000]
        for r in results:
            [two] = r["contenders"]["pg_ttl, two workers"]["runs"]
            assert len(two["ranges_per_run"]) == 2 and sum(two["ranges_per_run"]) == two["ranges"] >= 2
            assert r["two_over_one"]["median"] > 0
    else:
        # (the bench asserts that exactly the due values were nulled)
        by = results["20000"]
        assert set(by) == {"pg_ttl", "one UPDATE … SET payload = NULL"}
        assert all(9_000 <= r["due"] <= 11_000 and r["seconds"] > 0 for r in by.values())


def _row_expiry(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """bench.row_expiry run with ``args``: its process and the results it wrote."""
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "bench.row_expiry", *args, "--json", str(out)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(out.read_text())["results"]


def test_row_expiry_bench_with_the_expired_rows_at_one_key(tmp_path: Path) -> None:
    """bench.row_expiry --tied at a tiny scale: the expired rows share one created_at, and
    pg_ttl goes through that key's ctid windows (key windows over the index)."""
    proc, [r] = _row_expiry(tmp_path, "--rows", "20000", "--shares", "0.5", "--index", "yes", "--reps", "1", "--tied")
    # (the bench asserts that each contender deleted exactly the expired rows)
    assert r["tied"] and r["indexed"] and r["expired"] == 10_000 and r["pg_ttl_strategy"] == ["index"]
    assert "(one key)" in proc.stdout
    # in random order: every block holds expired rows, swept in block ranges
    _, [r] = _row_expiry(tmp_path, "--rows", "20000", "--shares", "0.5", "--index", "yes", "--reps", "1", "--tied",
                         "--shuffled")
    assert r["tied"] and r["shuffled"] and r["pg_ttl_strategy"] == ["ctid"]


def test_row_expiry_bench_deletes_by_hand_in_key_windows(tmp_path: Path) -> None:
    """bench.row_expiry --hand-windows at a tiny scale: the expired rows deleted by hand in
    key windows of pg_ttl's first sizes, each its own transaction, beside the others."""
    _, [r] = _row_expiry(tmp_path, "--rows", "40000", "--shares", "0.5", "--index", "yes", "--reps", "1",
                         "--hand-windows")
    # (the bench asserts that each contender deleted exactly the expired rows)
    [hand] = r["contenders"]["key windows by hand, open session"]["runs"]
    assert hand["deleted"] == 20_000 and hand["windows"] == 3  # 1,000, 4,000 and the 15,000 left
    assert r["open_sessions_hand_windows_vs_delete"]["median"] > 0
    refused = subprocess.run([sys.executable, "-m", "bench.row_expiry", "--tied", "--hand-windows"],
                             capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             timeout=60)
    assert refused.returncode == 2 and "not with --tied" in refused.stderr


def test_sampler_cost_bench_runs_the_sampler_beside_the_load(tmp_path: Path) -> None:
    """The sampler-cost benchmark at a tiny scale: each window carries the load, and the
    sampler's query runs in its windows only, at about its interval."""
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "bench.sampler_cost", "--rows", "10000", "--window", "1",
                           "--reps", "1", "--intervals", "0.02", "--json", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    windows = {w["interval_s"]: w for w in result["windows"]}
    assert set(windows) == {None, 0.02}
    assert all(w["txns"] > 100 and w["p99_ms"] > 0 for w in windows.values())
    assert windows[None]["samples_per_s"] == 0 and 10 < windows[0.02]["samples_per_s"] <= 50
    assert result["p99_vs_baseline"]["0.02"]["n"] == 1
