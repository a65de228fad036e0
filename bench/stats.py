"""Median and spread of repeated measurements, and percentiles of latency samples."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """median, min, max, n and the spread (max-min)/median of repeated runs."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return {"n": 0, "median": None, "min": None, "max": None, "spread": None}
    med = statistics.median(vals)
    return {
        "n": len(vals),
        "median": med,
        "min": min(vals),
        "max": max(vals),
        "spread": (max(vals) - min(vals)) / med if med else 0.0,
    }


def paired(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``ours``' speed over ``theirs``' (their seconds over ours), paired per repetition:
    median, min, max and the ratios in order."""
    ratios = [b["seconds"] / a["seconds"] for a, b in zip(ours, theirs, strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "paired": ratios}


def ratio_text(r: dict[str, Any]) -> str:
    """A paired ratio's median and range, as the reports print it: 0.93x (0.90-0.97)."""
    return f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})"


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of already sorted values (p in 0..100)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def summarize_runs(runs: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    """Summaries of the given numeric keys over the successful runs (dotted keys reach into dicts)."""
    ok = [r for r in runs if r.get("status") == "ok"]
    out: dict[str, Any] = {"runs_ok": len(ok), "runs_total": len(runs)}
    for key in keys:
        vals: list[float] = []
        for r in ok:
            v: Any = r
            for part in key.split("."):
                v = v.get(part) if isinstance(v, dict) else None
            if isinstance(v, int | float):
                vals.append(float(v))
        out[key] = summarize(vals)
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b
