"""How one gradient exchange's time grows with the hosts: 2 to 8 emulated hosts against the ring model.

    python -m benchmarks.exchange_scaling --hosts 2,3,4,6,8 --model applications.MobileNetV2 \\
        --link 200mbit --rounds 3 --out runs/exchange_scaling        (as root; or make lab-scaling)

The lab (:mod:`lab.hosts`) comes up once with the largest count of ``--hosts``, and every link is shaped
to ``--link`` (:mod:`lab.shaper`) for the whole sweep. Then, round after round, the exchange-only recipe
(``benchmarks/recipes/exchange_cost.py``: one step's gradients, fused as in training, no compute; the
runner's :func:`~benchmarks.runner.run_exchange`) runs once at each host count ``N``, one rank on each
of the first ``N`` hosts, the counts' order rotating by one each round so that no count always runs
first. A round's value for ``N`` is the slowest rank's median wall time per exchange.

Every ``N`` runs on the first ``N`` hosts of the same lab, so their cores are those of the largest
lab (:func:`lab.hosts.host_cpus`): on a machine with no more cores than the smallest count (two here),
host ``i`` has core ``i % cores`` whatever the lab's size, as an ``N``-host lab would give it.

The table compares each ``N``'s median with the ring allreduce's time on links of that rate,
``2 (N - 1) / N x bytes x 8 / rate`` (:func:`ring_seconds`); the rate counts every byte on the wire
(``tc``'s token bucket), so TCP/IP's headers alone put a perfect ring about 3-5 % above the model.

Whatever happens (an error, Ctrl-C, SIGTERM), the shaper is removed and the hosts are taken down
(:func:`benchmarks.link_sweep.lab`). Writes ``exchange_scaling.json`` (every job's results, every
exchange's wall time) and ``exchange_scaling.txt`` (the table) to ``--out``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence

from benchmarks.link_sweep import lab
from benchmarks.runner import on_hosts, run_exchange
from lab import hosts, shaper

TABLE_HEADER = (f"{'hosts':>5} {'MB':>6} {'model s':>8} {'median s':>9} {'min-max s':>13} {'meas/model':>10} "
                f"{'cpu s':>6} {'rounds':>6}")


def parse_hosts(text: str) -> list[int]:
    """``--hosts``: distinct host counts from 2 to 8, e.g. ``"2,3,4,6,8"``, in the order given."""
    try:
        counts = [int(p) for p in str(text).split(",") if p.strip()]
    except ValueError:
        counts = []
    if not counts or len(set(counts)) != len(counts) or \
            not all(hosts.MIN_HOSTS <= n <= hosts.MAX_HOSTS for n in counts):
        raise ValueError(f"--hosts is distinct host counts from {hosts.MIN_HOSTS} to {hosts.MAX_HOSTS}, "
                         f"comma-separated, e.g. 2,3,4,6,8. Received: {text!r}")
    return counts


def ring_seconds(gradient_bytes: float, n: int, rate_bps: float) -> float:
    """The ring allreduce's time on links of ``rate_bps``: each rank sends and receives 2 (n - 1) / n of the bytes."""
    return 2 * (n - 1) / n * gradient_bytes * 8 / rate_bps


def round_orders(counts: Sequence[int], rounds: int) -> list[list[int]]:
    """The host counts' order in each round: rotated by one each round."""
    counts = list(counts)
    return [counts[r % len(counts):] + counts[:r % len(counts)] for r in range(rounds)]


def exchange_seconds(job: dict) -> float:
    """A job's wall time per exchange: the slowest rank's median (the exchange is done when every rank has it)."""
    return max(r["exchange_s"] for r in job["ranks"])


def summarize(runs: dict[int, list[dict]], rate_bps: int | None) -> list[dict]:
    """One row per host count: median and range over the rounds of the seconds per exchange, against the ring model."""
    rows = []
    for n, jobs in runs.items():
        if not jobs:
            continue
        seconds = [exchange_seconds(j) for j in jobs]
        grad_bytes = jobs[0]["gradient_bytes"]
        model = ring_seconds(grad_bytes, n, rate_bps) if rate_bps else None
        median = statistics.median(seconds)
        rows.append({"hosts": n, "gradient_bytes": grad_bytes, "model_s": model, "median_s": median,
                     "min_s": min(seconds), "max_s": max(seconds),
                     "measured_over_model": median / model if model else None,
                     "cpu_s": statistics.median(max(r["exchange_cpu_s"] for r in j["ranks"]) for j in jobs),
                     "rounds": len(jobs)})
    return rows


def format_table(rows: Sequence[dict], title: str) -> str:
    """The rows as text under ``title``: seconds per exchange, the ring model and their ratio."""
    lines = [title, TABLE_HEADER]
    for r in rows:
        model = f"{r['model_s']:8.3f}" if r["model_s"] else f"{'-':>8}"
        ratio = f"{r['measured_over_model']:10.2f}" if r["measured_over_model"] else f"{'-':>10}"
        lines.append(f"{r['hosts']:>5} {r['gradient_bytes'] / 1e6:6.1f} {model} {r['median_s']:9.3f} "
                     f"{r['min_s']:6.3f}-{r['max_s']:6.3f} {ratio} {r['cpu_s']:6.3f} {r['rounds']:>6}")
    return "\n".join(lines)


def run_scaling(counts: Sequence[int], rate_bps: int | None, args, log=print) -> dict[int, list[dict]]:
    """``args.rounds`` rounds of one exchange job at each host count, on one lab of ``max(counts)`` hosts whose links
    are shaped to ``rate_bps`` (None: unshaped); returns each count's jobs, in round order, each with its round."""
    runs: dict[int, list[dict]] = {n: [] for n in counts}
    tic = time.time()
    with lab(max(counts)) as info:
        with shaper.shaped(hosts.link_ends(len(info.hosts)), rate_bps):
            for round_, order in enumerate(round_orders(counts, args.rounds)):
                for n in order:
                    job = dict(run_exchange(args, n, on_hosts(dataclasses.replace(info, hosts=info.hosts[:n]))),
                               round=round_)
                    runs[n].append(job)
                    log(f"round {round_ + 1}/{args.rounds} hosts {n}: {exchange_seconds(job):.3f} s per exchange, "
                        f"machine busy {job['machine_busy_cores']:.2f} cores ({time.time() - tic:.0f}s)")
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exchange_scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="2,3,4,6,8", help="host counts, 2 to 8, comma-separated")
    parser.add_argument("--model", default="applications.MobileNetV2", help="applications.<Name> of keras.applications")
    parser.add_argument("--image_size", type=int, default=224,
                        help="the model's input size (pooled before the classifier: the gradients' bytes do not "
                             "depend on it)")
    parser.add_argument("--link", default="200mbit", help="every link's rate, tc units (e.g. 200mbit), or unlimited")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="measured exchanges per job (after two warm-up ones)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one job may take")
    parser.add_argument("--out", default="runs/exchange_scaling")
    args = parser.parse_args(argv)
    try:
        counts = parse_hosts(args.hosts)
        rate = shaper.parse_rate(args.link)
    except ValueError as err:
        parser.error(str(err))
    if args.rounds < 1 or args.steps < 1:
        parser.error(f"--rounds and --steps are at least 1. Received: --rounds {args.rounds} --steps {args.steps}")
    if hosts.any_up():
        parser.error("the lab's hosts are up already (another job's, which building them again would tear down): "
                     "wait for it, or run python -m lab.hosts down if they are stale")
    runs = run_scaling(counts, rate, args)
    rows = summarize(runs, rate)
    text = format_table(rows, f"{args.model}: wall time per exchange, link {shaper.format_rate(rate)}, "
                              f"{args.rounds} rounds of {args.steps} exchanges")
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "exchange_scaling.json"), "w") as f:
        json.dump({"model": args.model, "image_size": args.image_size, "link_bps": rate, "rounds": args.rounds,
                   "steps": args.steps, "hosts": counts, "table": rows, "runs": {str(n): j for n, j in runs.items()},
                   "argv": list(sys.argv[1:] if argv is None else argv)}, f, indent=1)
    with open(os.path.join(args.out, "exchange_scaling.txt"), "w") as f:
        f.write(text + "\n")
    print(f"wrote {os.path.join(args.out, 'exchange_scaling.json')} and exchange_scaling.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
