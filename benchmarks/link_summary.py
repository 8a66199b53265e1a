"""The link sweep as a table (medians with their spread, efficiency, the step's split), the paired ratios of
rows at equal settings (:mod:`benchmarks.pairs`), their text and the charts."""
from __future__ import annotations

import os
import statistics

from benchmarks import efficiency, pairs

CEILING = "ceiling"


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}


def summarize_sweep(sweep: dict, global_batch: int) -> dict:
    """``table[variant][rate]``: images/s, efficiency (each round against that round's ceiling) and step split."""
    runs = sweep["runs"]
    table: dict = {}
    for variant, by_rate in runs.items():
        table[variant] = {}
        for rate, results in by_rate.items():
            row = {"images_per_sec": _spread([r["images_per_sec"] for r in results])}
            for key in ("cpu_cores_per_rank", "stolen_cores"):  # what the ranks got, what the hypervisor took
                if all(key in r for r in results):
                    row[key] = _spread([r[key] for r in results])
            ceilings = {r["round"]: r["images_per_sec"] for r in runs.get(CEILING, {}).get(rate, [])}
            paired = [(r["images_per_sec"], ceilings[r["round"]]) for r in results if r["round"] in ceilings]
            if paired:
                row["efficiency"] = _spread([efficiency.scaling_efficiency(a, c) for a, c in paired])
                split = efficiency.split_step(row["images_per_sec"]["median"],
                                              statistics.median(c for _, c in paired), global_batch)
                row["step_s"], row["compute_s"], row["exposed_comm_s"] = (split.step_s, split.compute_s,
                                                                         split.exposed_comm_s)
            table[variant][rate] = row
    return table


def compare_sweep(sweep: dict) -> dict:
    """``{rate: [pair comparison, ...]}``: :func:`benchmarks.pairs.compare` of the rows at each rate."""
    runs = sweep["runs"]
    return {rate: pairs.compare({v: by_rate[rate] for v, by_rate in runs.items()}) for rate in sweep["rates"]}


def table_text(table: dict, rates: list[str], compared: dict | None = None) -> str:
    """One line per rate and variant: images/s (spread), efficiency (spread), step = compute + exposed comm,
    and the CPU cores each rank used in the measured epoch (median); then the paired ratios per rate."""
    lines = [f"{'link':>10} {'variant':30} {'images/s':>8} {'(min-max)':>13} {'efficiency':>10} {'(min-max)':>11}"
             f" {'step s':>7} {'compute':>7} {'exposed':>7} {'cpu/rank':>8}"]
    for rate in rates:
        for variant, rows in table.items():
            r = rows[rate]
            ips, eff = r["images_per_sec"], r.get("efficiency")
            eff_text = (f"{eff['median']:10.3f} {eff['min']:5.2f}-{eff['max']:<5.2f}" if eff else f"{'':10} {'':11}")
            split = (f" {r['step_s']:7.3f} {r['compute_s']:7.3f} {r['exposed_comm_s']:7.3f}" if "step_s" in r
                     else f" {'':7} {'':7} {'':7}")
            cpu = f" {r['cpu_cores_per_rank']['median']:8.2f}" if "cpu_cores_per_rank" in r else ""
            lines.append(f"{rate:>10} {variant:30} {ips['median']:8.2f} {ips['min']:6.2f}-{ips['max']:<6.2f}"
                         f" {eff_text}{split}{cpu}")
    if compared and any(compared.values()):
        lines.append(pairs.HEADER)
        for rate in rates:
            lines.extend(pairs.compare_text(compared.get(rate, []), rate))
    return "\n".join(lines)


def _x(rates_bps: list, rates: list[str]) -> tuple[list[float], list[str]]:
    """Positions on a log axis; the unlimited link is drawn one decade right of the fastest rate."""
    finite = [r for r in rates_bps if r is not None]
    top = max(finite) * 10 if finite else 1e10
    return [top if r is None else r for r in rates_bps], rates


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(8, 4.5))


def _save(fig, path: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def draw_efficiency(table: dict, rates_bps: list, rates: list[str], path: str, title: str) -> str:
    """A line chart of efficiency (against the ceiling) over link rate, one line per variant."""
    xs, labels = _x(rates_bps, rates)
    fig, ax = _figure()
    for variant, rows in table.items():
        if variant == CEILING or "efficiency" not in rows[rates[0]]:
            continue
        med = [rows[r]["efficiency"]["median"] for r in rates]
        lo = [m - rows[r]["efficiency"]["min"] for m, r in zip(med, rates)]
        hi = [rows[r]["efficiency"]["max"] - m for m, r in zip(med, rates)]
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=variant)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xticks(xs)
    ax.set_xticklabels(labels)
    ax.minorticks_off()
    ax.set_xlabel("link rate per host (each direction)")
    ax.set_ylabel("scaling efficiency (throughput / ceiling)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return _save(fig, path)


def projection_table(calibration: dict, workers=(8, 16, 32, 64, 128, 256), cluster_rates=(25e9, 100e9, 400e9),
                     comm_factors: dict | None = None, **model) -> list[dict]:
    """The projection of :mod:`benchmarks.efficiency` from the lab's compute and bytes per step.

    The lab's step at its GPU-equivalent rate has the communication-to-compute ratio of a
    DGX ResNet-50 step at 25 Gbit/s, so a cluster rate ``R`` maps to ``R * gpu_rate / 25 Gbit/s``.
    ``comm_factors`` (``{hosts: measured / model}`` of an exchange scaling sweep) multiply the ring model's time
    (:func:`benchmarks.efficiency.comm_factor`); without them it is the ring model's.
    """
    scale = efficiency.DGX_LINK_BPS / calibration["gpu_equivalent_bps"]
    return efficiency.projection(calibration["compute_s"], calibration["gradient_bytes"], workers, cluster_rates,
                                 scale=scale, comm_factors=comm_factors, **model)


def lab_check(table: dict, calibration: dict, rates_bps: list, rates: list[str], variant: str = "hvdkeras",
              **model) -> list[dict]:
    """The projection's 2-worker prediction next to the lab's measured efficiency, per rate."""
    rows = []
    for bps, name in zip(rates_bps, rates):
        if bps is None or "efficiency" not in table.get(variant, {}).get(name, {}):
            continue
        predicted = {f"predicted_{'overlap' if o else 'no_overlap'}": efficiency.projected_efficiency(
            calibration["compute_s"], calibration["gradient_bytes"], 2, bps, o, **model) for o in (False, True)}
        rows.append({"rate": name, "measured": table[variant][name]["efficiency"]["median"], **predicted})
    return rows


def draw_projection(rows: list[dict], path: str, title: str) -> str:
    """Projected efficiency over workers, one line per cluster rate, with and without overlap."""
    fig, ax = _figure()
    for rate in sorted({r["rate_bps"] for r in rows}):
        for overlap, style in ((True, "-"), (False, "--")):
            pts = [r for r in rows if r["rate_bps"] == rate and r["overlap"] == overlap]
            ax.plot([p["workers"] for p in pts], [p["efficiency"] for p in pts], style, marker="o",
                    label=f"{rate / 1e9:g} Gbit/s, {'overlap' if overlap else 'no overlap'}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("workers")
    ax.set_ylabel("projected scaling efficiency")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _save(fig, path)


def write_all(sweep: dict, args, out: str, log=print) -> dict:
    """Table text, ``lab.json``, ``lab_efficiency.png`` and ``projection.png`` in ``out``; returns the JSON."""
    import json

    table = summarize_sweep(sweep, args.batch * args.hosts)
    compared = compare_sweep(sweep)
    text = table_text(table, sweep["rates"], compared)
    log(text)
    title = f"{args.model} {args.image_size}px, batch {args.batch}/host, {args.hosts} emulated hosts"
    factors = getattr(args, "comm_factors", None)
    projection = projection_table(sweep["calibration"], comm_factors=factors)
    # the projection counts fp32 bytes: hvdkeras's fp32 row where it ran
    fp32 = next((v for v in ("hvdkeras-fp32", "hvdkeras") if v in table), "hvdkeras")
    check = lab_check(table, sweep["calibration"], sweep["rates_bps"], sweep["rates"], variant=fp32)
    result = {"model": args.model, "batch_per_process": args.batch, "image_size": args.image_size,
              "steps": args.steps, "rounds": args.rounds, "calibration": sweep["calibration"],
              "rates": sweep["rates"], "rates_bps": sweep["rates_bps"], "table": table, "pairs": compared, "text": text,
              "projection": projection, "projection_comm_factors": factors, "projection_check": check,
              "runs": sweep["runs"]}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "lab.json"), "w") as f:
        json.dump(result, f, indent=1)
    paths = [os.path.join(out, "lab.json"),
             draw_efficiency(table, sweep["rates_bps"], sweep["rates"], os.path.join(out, "lab_efficiency.png"),
                             title),
             draw_projection(projection, os.path.join(out, "projection.png"),
                             "Projection (a model, not a measurement): ring allreduce"
                             + (" x the measured factor" if factors else "") + ", from the lab's step")]
    for path in paths:
        log(f"wrote {path}")
    return result
