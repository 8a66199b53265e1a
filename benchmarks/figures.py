"""The plots of docs/performance.md, drawn from the figures of record in docs/records/figures.json.

    python -m benchmarks.figures --out docs

redraws ``lab_efficiency.png`` (the lab's rows as a fraction of the ceiling, per setting of record),
``bench.png`` (one host's images/s per row) and ``projection.png`` (the projected efficiency at 8-256 workers,
on the ring model and with the exchange's factor measured over it) into ``--out``. ``exchange_scaling.png`` is
drawn from the sweeps themselves by :mod:`benchmarks.exchange_plot` (``make lab-scaling``).

The data file holds numbers copied from the tables of docs/records/performance-details.md, each entry naming
its section there; nothing here measures or computes a figure. A new run of record changes the table in the
record and its row in the data file, then this command.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "records", "figures.json")
SIZE = (8, 4.5)  # inches at DPI: 800 x 450 pixels
DPI = 100
COLOURS = {"hvdkeras": "tab:blue", "horovod": "tab:orange", "mwms": "tab:green"}
RATE_COLOURS = {25: "tab:red", 100: "tab:purple", 400: "tab:gray"}


def load(path: str = DATA) -> dict:
    """The figures of record."""
    with open(path) as f:
        return json.load(f)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def lab_efficiency(data: dict, path: str) -> str:
    """Grouped bars: each setting of record, hvdkeras / Horovod's recipe / MWMS as a fraction of the ceiling, with
    the rounds' min-max."""
    lab = data["lab_efficiency"]
    settings, rows = lab["settings"], lab["rows"]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=SIZE)
    width = 0.26
    for k, (key, name) in enumerate(rows.items()):
        xs, medians, low, high = [], [], [], []
        for i, setting in enumerate(settings):
            if key not in setting:
                continue
            median, lo, hi = setting[key]
            xs.append(i + (k - 1) * width)
            medians.append(median)
            low.append(median - lo)
            high.append(hi - median)
        ax.bar(xs, medians, width, yerr=[low, high], capsize=2, color=COLOURS[key], label=name)
        for x, median in zip(xs, medians):
            ax.text(x, 0.03, f"{median:.2f}", ha="center", va="bottom", fontsize=6.5, rotation=90, color="white")
    ax.axhline(1, color="black", lw=0.8, ls="--")
    ax.text(len(settings) - 0.5, 0.99, "ceiling", ha="right", va="top", fontsize=7)
    ax.set_xticks(range(len(settings)))
    ax.set_xticklabels([s["label"] for s in settings], fontsize=7)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("efficiency (of the ceiling)")
    ax.set_title("The lab: each row over the communication-free ceiling of its round (median, min-max)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper left", ncol=3)
    return _save(fig, plt, path)


def bench(data: dict, path: str) -> str:
    """Horizontal bars: one host's images/s per row, with the rounds' min-max and the ceiling's median."""
    table = data["bench"]
    rows = table["rows"]
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=SIZE)
    ys = list(range(len(rows)))[::-1]
    colours = ["tab:gray" if name.startswith("ceiling") else "tab:blue" if name.startswith("hvdkeras")
               else "tab:green" if name.startswith("Multi") else "tab:orange" for name, *_ in rows]
    medians = [r[1] for r in rows]
    ax.barh(ys, medians, xerr=[[r[1] - r[2] for r in rows], [r[3] - r[1] for r in rows]], capsize=3,
            color=colours)
    for y, median in zip(ys, medians):
        ax.text(0.6, y, f"{median:.1f}", va="center", fontsize=8, color="white")
    ax.axvline(rows[-1][1], color="black", lw=0.8, ls="--")
    ax.set_yticks(ys)
    ax.set_yticklabels([r[0] for r in rows], fontsize=8)
    ax.set_xlim(0, max(r[3] for r in rows) * 1.08)
    ax.set_xlabel("images/s over both ranks (median, min-max of 3 rounds)")
    ax.text(rows[-1][1], len(rows) - 0.45, "ceiling ", ha="right", va="center", fontsize=7)
    ax.set_title("One host (make bench): two ranks on two cores, MobileNetV2 224 px, batch 16 a rank", fontsize=9)
    return _save(fig, plt, path)


def projection(data: dict, path: str) -> str:
    """Projected efficiency against the workers, one panel with overlap and one without: each link rate on the
    ring model (dashed) and with the measured factor (solid)."""
    table = data["projection"]
    columns = table["columns"]
    rows = [dict(zip(columns, r)) for r in table["rows"]]
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=SIZE)
    for ax, (kind, title) in zip(axes, (("overlap", "with overlap"), ("no_overlap", "no overlap"))):
        for rate in sorted({r["link_gbit_s"] for r in rows}):
            points = sorted((r for r in rows if r["link_gbit_s"] == rate), key=lambda r: r["workers"])
            workers = [r["workers"] for r in points]
            colour = RATE_COLOURS.get(rate)
            ax.plot(workers, [r[f"{kind}_ring_model"] for r in points], ls="--", marker=".", color=colour,
                    label=f"{rate} Gbit/s, ring model")
            ax.plot(workers, [r[f"{kind}_measured_factor"] for r in points], ls="-", marker="o", ms=3,
                    color=colour, label=f"{rate} Gbit/s, x{points[0]['factor']:.2f} measured")
        ax.set_xscale("log", base=2)
        ticks = sorted({r["workers"] for r in rows})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.set_ylim(0.5, 1.02)
        ax.set_xlabel("workers (one per link)")
        ax.set_title(f"{title}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("projected efficiency")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle("A projection, not a measurement: the DGX ResNet-50 step on a ring allreduce, "
                 "with the lab's measured factor", fontsize=9)
    return _save(fig, plt, path)


def _save(fig, plt, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


FIGURES = {"lab_efficiency.png": lab_efficiency, "bench.png": bench, "projection.png": projection}


def draw_all(data: dict, out: str) -> list[str]:
    """Every figure of :data:`FIGURES` into ``out``; their paths."""
    os.makedirs(out, exist_ok=True)
    return [draw(data, os.path.join(out, name)) for name, draw in FIGURES.items()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.figures", description=__doc__.split("\n")[0])
    parser.add_argument("--data", default=DATA, help="the figures of record (default: docs/records/figures.json)")
    parser.add_argument("--out", default="docs", help="the folder the PNG files go to")
    args = parser.parse_args(argv)
    try:
        data = load(args.data)
    except (OSError, ValueError) as err:
        parser.error(f"{args.data} is not the figures' data file ({err})")
    for path in draw_all(data, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
