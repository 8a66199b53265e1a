"""The benchmark's rounds as a table (medians, spread, ratios to hvdkeras, scaling), its text and its charts."""
from __future__ import annotations

import os
import statistics


def summarize(runs: dict[str, dict[int, list[dict]]], nps: list[int]) -> dict:
    """Per variant and process count: median images/s (total and per rank), min-max, peak memory and ratios."""
    table = {}
    for variant, by_np in runs.items():
        table[variant] = {}
        for np_, rounds in by_np.items():
            rates = [r["images_per_sec"] for r in rounds]
            table[variant][np_] = {
                "images_per_sec": statistics.median(rates), "per_rank": statistics.median(rates) / np_,
                "min": min(rates), "max": max(rates), "rounds": rates,
                "peak_rss_mb_per_rank": max(r["peak_rss_mb"] for r in rounds),
            }
    for rows in table.values():
        for np_ in nps:
            row = rows[np_]
            base = table.get("hvdkeras", {}).get(np_)
            if base:
                row["hvdkeras_over_this"] = base["images_per_sec"] / row["images_per_sec"]
            one = rows.get(1)
            if one and np_ > 1:
                row["scaling_efficiency"] = row["images_per_sec"] / (np_ * one["images_per_sec"])
    return table


def print_table(table: dict, nps: list[int]) -> str:
    """Prints the table and returns its text."""
    lines = [(f"{'variant':15} {'np':>3} {'images/s':>9} {'per rank':>9} {'spread':>15} {'peak MB/rank':>12}"
              f" {'hvdkeras/x':>10} {'scaling':>8}")]
    for np_ in nps:
        for variant, rows in table.items():
            r = rows[np_]
            scaling = f"{r['scaling_efficiency']:.2f}" if "scaling_efficiency" in r else ""
            lines.append(f"{variant:15} {np_:>3} {r['images_per_sec']:9.2f} {r['per_rank']:9.2f}"
                         f" {r['min']:7.2f}-{r['max']:<7.2f} {r['peak_rss_mb_per_rank']:12.0f}"
                         f" {r.get('hvdkeras_over_this', float('nan')):10.3f} {scaling:>8}")
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def draw(table: dict, nps: list[int], out: str, title: str) -> list[str]:
    """``bench.png`` (bars at the largest process count) and, with several counts, ``scaling.png``; their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    np_ = nps[-1]
    variants = list(table)
    medians = [table[v][np_]["images_per_sec"] for v in variants]
    errors = [[m - table[v][np_]["min"] for v, m in zip(variants, medians)],
              [table[v][np_]["max"] - m for v, m in zip(variants, medians)]]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(variants, medians, yerr=errors, capsize=4, color=["#1f77b4", "#6baed6", "#ff7f0e", "#fdae6b", "#2ca02c"])
    ax.set_ylabel("images/s (all ranks, median of rounds)")
    ax.set_title(f"{title}, np={np_}")
    fig.tight_layout()
    paths.append(os.path.join(out, "bench.png"))
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    if len(nps) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        for v in variants:
            ax.plot(nps, [table[v][n]["images_per_sec"] for n in nps], marker="o", label=v)
        ax.set_xlabel("processes")
        ax.set_ylabel("images/s")
        ax.set_title(f"{title}: scaling")
        ax.legend()
        fig.tight_layout()
        paths.append(os.path.join(out, "scaling.png"))
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths
