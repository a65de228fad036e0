"""Plots of cost against size for the scaling benchmarks' ``--plot`` (matplotlib:
``pip install 'pg-ttl[bench]'``): one PNG, a panel per measure, a line per contender,
the goal as a dotted line."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path


def add_options(parser: argparse.ArgumentParser, plotted: str) -> None:
    """``--plot PNG`` (what ``plotted`` says) and ``--from-json FILE``, as every scaling
    benchmark takes them."""
    parser.add_argument("--plot", type=Path, metavar="PNG",
                        help=f"also plot {plotted} (needs matplotlib: pip install 'pg-ttl[bench]')")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="measure nothing: print (and --plot) the results a --json run wrote")


@dataclass
class Panel:
    """One chart: ``series`` maps a contender to its (sizes, values); ``goal`` is (value, label)."""

    xlabel: str
    ylabel: str
    series: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    goal: tuple[float, str] | None = None
    title: str | None = None
    logx: bool = False

    def add(self, name: str, size: float, value: float) -> None:
        xs, ys = self.series.setdefault(name, ([], []))
        xs.append(size)
        ys.append(value)


def save(path: Path, title: str, panels: list[Panel]) -> None:
    """Write ``panels`` to ``path``, three to a row; exits with a message without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("--plot needs matplotlib: pip install 'pg-ttl[bench]'")
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    fig.suptitle(title)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        for (name, (xs, ys)), marker in zip(panel.series.items(), "os^vDx*+", strict=False):
            ax.plot(xs, ys, marker + "-", label=name)
        if panel.goal is not None:
            ax.axhline(panel.goal[0], color="grey", linestyle=":", label=panel.goal[1])
        if panel.logx:
            ax.set_xscale("log")
        top = max([y for _, ys in panel.series.values() for y in ys] + [panel.goal[0] if panel.goal else 0])
        ax.set(xlabel=panel.xlabel, ylabel=panel.ylabel, ylim=(0, top * 1.15 or 1), title=panel.title or "")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
