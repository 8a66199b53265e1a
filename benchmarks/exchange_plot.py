"""The exchange scaling sweeps drawn: time per exchange against the host count, beside the ring model.

    python -m benchmarks.exchange_plot runs/a/exchange_scaling.json runs/b/exchange_scaling.json \\
        --out docs/exchange_scaling.png

One panel per sweep (``exchange_scaling.json`` of :mod:`benchmarks.exchange_scaling`, i.e. one model at one
link rate): the measured median per exchange at each host count with its min-max over the rounds, and the
ring model ``2 (N - 1) / N x bytes x 8 / rate`` as a line from 2 to the largest count.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from benchmarks.exchange_scaling import ring_seconds
from lab import shaper


def panel(sweep: dict) -> dict:
    """What one panel draws from a sweep: its title, the measured points and the model's line."""
    rows = sorted(sweep["table"], key=lambda r: r["hosts"])
    rate = sweep["link_bps"]
    top = max(r["hosts"] for r in rows)
    line_n = list(range(2, top + 1))
    return {"title": f"{sweep['model'].split('.')[-1]}, {rows[0]['gradient_bytes'] / 1e6:.0f} MB, "
                     f"{shaper.format_rate(rate)}",
            "hosts": [r["hosts"] for r in rows], "median_s": [r["median_s"] for r in rows],
            "min_s": [r["min_s"] for r in rows], "max_s": [r["max_s"] for r in rows],
            "model_hosts": line_n if rate else [],
            "model_s": [ring_seconds(rows[0]["gradient_bytes"], n, rate) for n in line_n] if rate else []}


def draw(sweeps: Sequence[dict], path: str) -> str:
    """One panel per sweep, side by side, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sweeps), figsize=(4.2 * len(sweeps), 3.8), squeeze=False)
    for ax, sweep in zip(axes[0], sweeps):
        p = panel(sweep)
        ax.errorbar(p["hosts"], p["median_s"],
                    yerr=[[m - lo for m, lo in zip(p["median_s"], p["min_s"])],
                          [hi - m for m, hi in zip(p["median_s"], p["max_s"])]],
                    marker="o", capsize=3, label="measured (median, min-max)")
        if p["model_s"]:
            ax.plot(p["model_hosts"], p["model_s"], color="grey", ls="--", label="ring model 2(N-1)/N x bytes / rate")
        ax.set_xticks(p["hosts"])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("hosts (one rank each)")
        ax.set_ylabel("seconds per exchange")
        ax.set_title(p["title"], fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exchange_plot", description=__doc__.split("\n")[0])
    parser.add_argument("sweeps", nargs="+", help="exchange_scaling.json files, one panel each")
    parser.add_argument("--out", default="docs/exchange_scaling.png")
    args = parser.parse_args(argv)
    sweeps = []
    for path in args.sweeps:
        try:
            with open(path) as f:
                sweeps.append(json.load(f))
        except (OSError, ValueError) as err:
            parser.error(f"{path} is not an exchange_scaling.json ({err}): give the files "
                         "python -m benchmarks.exchange_scaling wrote")
    print(f"wrote {draw(sweeps, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
