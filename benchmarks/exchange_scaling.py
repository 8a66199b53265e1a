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

``--variants`` (e.g. ``default,fusion=0,fusion=128,fp16,groups=1,mpi,hierarchical``) runs, in every round and
at every ``N``, each of the exchange's settings (:func:`parse_variant`) in an order rotating by one each round,
and adds a table of each one's time per exchange against the first variant's in the same round and at the
same ``N`` (:func:`compare_variants`). ``per_host=2`` places the ``N`` ranks two on each of the first
``ceil(N / 2)`` hosts ("nodes" of two ranks, ``local_size`` 2) instead of one on each of ``N``;
``mpi_alg=ring`` (or another of :data:`MPI_ALLREDUCE_ALGORITHMS`) runs the MPI controller with Open MPI's
allreduce algorithm forced instead of chosen by its fixed decision rules; ``mca:NAME=VALUE`` sets any other of
Open MPI's parameters for an MPI variant.

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

DEFAULT = "default"
# Open MPI's coll/tuned allreduce algorithms by the names and numbers of its coll_tuned_allreduce_algorithm
MPI_ALLREDUCE_ALGORITHMS = {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3, "ring": 4,
                            "segmented_ring": 5, "rabenseifner": 6}
VARIANT_HEADER = (f"{'hosts':>5} {'variant':>14} {'median s':>9} {'min-max s':>13} {'/ ' + 'first, per round':>26} "
                  f"{'median':>6}")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One setting of the exchange: Horovod variables, the recipe's flags and the controller."""

    name: str
    env: tuple = ()  # (name, value) pairs
    flags: tuple = ()
    controller: str = "gloo"
    per_host: int = 1  # ranks on each host


def parse_variant(text: str) -> Variant:
    """``default``; ``fusion=MB`` (``HOROVOD_FUSION_THRESHOLD``, MB of 2**20 bytes; 0 turns fusion off); ``fp16``
    (the gradients cross the wire in fp16); ``groups=K`` (``K`` grouped allreduces); ``mpi`` (the MPI controller
    and its allreduce instead of Gloo's); ``mpi_alg=NAME`` (MPI, Open MPI's allreduce algorithm forced, a name of
    :data:`MPI_ALLREDUCE_ALGORITHMS`); ``mca:NAME=VALUE`` (MPI, Open MPI's MCA parameter ``NAME``, e.g.
    ``mca:mpi_yield_when_idle=1``); ``hierarchical`` (MPI, ``HOROVOD_HIERARCHICAL_ALLREDUCE=1``); ``per_host=K``
    (``K`` ranks on each host); or several joined by ``+``, e.g. ``fp16+fusion=128``, ``hierarchical+per_host=2``."""
    env, flags, controller, per_host = {}, [], "gloo", 1
    for part in str(text).split("+"):
        key, _, value = part.strip().partition("=")
        if key == DEFAULT and not value:
            continue
        if key == "fusion" and value.isdigit():
            env["HOROVOD_FUSION_THRESHOLD"] = str(int(value) * 2 ** 20)
        elif key == "fp16" and not value:
            flags.append("--fp16-allreduce")
        elif key == "groups" and value.isdigit():
            flags.append(f"--groups={int(value)}")
        elif key == "mpi" and not value:
            controller = "mpi"
        elif key == "hierarchical" and not value:
            controller, env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "mpi", "1"
        elif key == "mpi_alg" and value in MPI_ALLREDUCE_ALGORITHMS:
            controller = "mpi"
            env["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
            env["OMPI_MCA_coll_tuned_allreduce_algorithm"] = str(MPI_ALLREDUCE_ALGORITHMS[value])
        elif key.startswith("mca:") and len(key) > 4 and value:
            controller, env[f"OMPI_MCA_{key[4:]}"] = "mpi", value
        elif key == "per_host" and value.isdigit() and int(value) >= 1:
            per_host = int(value)
        else:
            raise ValueError("a variant is default, fusion=MB, fp16, groups=K, mpi, mpi_alg=NAME (NAME one of "
                             f"{', '.join(MPI_ALLREDUCE_ALGORITHMS)}), mca:NAME=VALUE, hierarchical or per_host=K, "
                             f"or several joined by +, e.g. fp16+fusion=128. Received: {text!r}")
    return Variant(str(text).strip(), tuple(sorted(env.items())), tuple(flags), controller, per_host)


def parse_variants(text: str) -> list[Variant]:
    """``--variants``: distinct variants, comma-separated; the first is the one the others are compared with."""
    variants = [parse_variant(p) for p in str(text).split(",") if p.strip()]
    if not variants or len({v.name for v in variants}) != len(variants):
        raise ValueError(f"--variants is distinct variants, comma-separated, e.g. default,fusion=0,fp16. "
                         f"Received: {text!r}")
    return variants


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


def summarize(runs: dict[int, list[dict]], rate_bps: int | None, variant: str = DEFAULT) -> list[dict]:
    """One row per host count: median and range over the rounds of the seconds per exchange of ``variant``'s jobs,
    against the ring model."""
    rows = []
    for n, jobs in runs.items():
        jobs = [j for j in jobs if j.get("variant", DEFAULT) == variant]
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


def compare_variants(runs: dict[int, list[dict]], variants: Sequence[Variant]) -> list[dict]:
    """One row per host count and variant: median and range of the seconds per exchange, and each round's ratio to
    the first variant's job of the same round and host count (the pairing), with their median."""
    rows = []
    for n, jobs in runs.items():
        by_round = {(j["variant"], j["round"]): exchange_seconds(j) for j in jobs}
        for v in variants:
            rounds = sorted(r for name, r in by_round if name == v.name)
            if not rounds:
                continue
            seconds = [by_round[v.name, r] for r in rounds]
            ratios = [by_round[v.name, r] / by_round[variants[0].name, r]
                      for r in rounds if (variants[0].name, r) in by_round]
            rows.append({"hosts": n, "variant": v.name, "median_s": statistics.median(seconds),
                         "min_s": min(seconds), "max_s": max(seconds), "over_first": ratios,
                         "over_first_median": statistics.median(ratios) if ratios else None})
    return rows


def format_variants(rows: Sequence[dict], title: str) -> str:
    """The variants' rows as text under ``title``."""
    lines = [title, VARIANT_HEADER]
    for r in rows:
        ratios = ", ".join(f"{x:.2f}" for x in r["over_first"])
        median = f"{r['over_first_median']:6.2f}" if r["over_first_median"] is not None else f"{'-':>6}"
        lines.append(f"{r['hosts']:>5} {r['variant']:>14} {r['median_s']:9.3f} {r['min_s']:6.3f}-{r['max_s']:6.3f} "
                     f"{ratios:>26} {median}")
    return "\n".join(lines)


def run_scaling(counts: Sequence[int], rate_bps: int | None, args, log=print,
                variants: Sequence[Variant] = (Variant(DEFAULT),)) -> dict[int, list[dict]]:
    """``args.rounds`` rounds of one exchange job at each host count and variant, on one lab of ``max(counts)``
    hosts whose links are shaped to ``rate_bps`` (None: unshaped); returns each count's jobs, in round order, each
    with its round and variant. Within a round the counts' order and, at each count, the variants' rotate."""
    runs: dict[int, list[dict]] = {n: [] for n in counts}
    tic = time.time()
    with lab(max(counts)) as info:
        with shaper.shaped(hosts.link_ends(len(info.hosts)), rate_bps):
            for round_, order in enumerate(round_orders(counts, args.rounds)):
                for n in order:
                    for v in round_orders(variants, round_ + 1)[round_]:
                        place = on_hosts(info, slots=v.per_host, np_=n)  # the first ceil(n / per_host) hosts
                        job = dict(run_exchange(args, n, place, env=dict(v.env), flags=v.flags,
                                                controller=v.controller), round=round_, variant=v.name)
                        runs[n].append(job)
                        log(f"round {round_ + 1}/{args.rounds} hosts {n} {v.name}: {exchange_seconds(job):.3f} s "
                            f"per exchange, machine busy {job['machine_busy_cores']:.2f} cores "
                            f"({time.time() - tic:.0f}s)")
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exchange_scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="2,3,4,6,8", help="host counts, 2 to 8, comma-separated")
    parser.add_argument("--model", default="applications.MobileNetV2",
                        help="applications.<Name> of keras.applications, or a registered model name")
    parser.add_argument("--image_size", type=int, default=224,
                        help="the model's input size (pooled before the classifier: the gradients' bytes do not "
                             "depend on it)")
    parser.add_argument("--link", default="200mbit", help="every link's rate, tc units (e.g. 200mbit), or unlimited")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="measured exchanges per job (after two warm-up ones)")
    parser.add_argument("--variants", default=DEFAULT,
                        help="the exchange's settings to compare, comma-separated, the first the reference: default, "
                             "fusion=MB, fp16, groups=K, mpi, mpi_alg=NAME, mca:NAME=VALUE, hierarchical, per_host=K, "
                             "or several joined by +")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one job may take")
    parser.add_argument("--out", default="runs/exchange_scaling")
    args = parser.parse_args(argv)
    try:
        counts = parse_hosts(args.hosts)
        rate = shaper.parse_rate(args.link)
        variants = parse_variants(args.variants)
    except ValueError as err:
        parser.error(str(err))
    if args.rounds < 1 or args.steps < 1:
        parser.error(f"--rounds and --steps are at least 1. Received: --rounds {args.rounds} --steps {args.steps}")
    if hosts.any_up():
        parser.error("the lab's hosts are up already (another job's, which building them again would tear down): "
                     "wait for it, or run python -m lab.hosts down if they are stale")
    runs = run_scaling(counts, rate, args, variants=variants)
    rows = summarize(runs, rate, variants[0].name)
    text = format_table(rows, f"{args.model}: wall time per exchange ({variants[0].name}), link "
                              f"{shaper.format_rate(rate)}, {args.rounds} rounds of {args.steps} exchanges")
    settings = compare_variants(runs, variants) if len(variants) > 1 else []
    if settings:
        text += "\n\n" + format_variants(settings, f"{args.model}: each variant's time per exchange, and over "
                                                   f"{variants[0].name}'s in the same round")
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "exchange_scaling.json"), "w") as f:
        json.dump({"model": args.model, "image_size": args.image_size, "link_bps": rate, "rounds": args.rounds,
                   "steps": args.steps, "hosts": counts, "table": rows,
                   "variants": [dataclasses.asdict(v) for v in variants], "settings_table": settings,
                   "runs": {str(n): j for n, j in runs.items()},
                   "argv": list(sys.argv[1:] if argv is None else argv)}, f, indent=1)
    with open(os.path.join(args.out, "exchange_scaling.txt"), "w") as f:
        f.write(text + "\n")
    print(f"wrote {os.path.join(args.out, 'exchange_scaling.json')} and exchange_scaling.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
