"""Why figures on a small shared host come in fixed steps: the ceiling beside ``k`` busy threads.

    python -m hvdkeras.bench.contention --hogs 0,1,2,4 --rounds 2

Runs the communication-free ceiling (:mod:`hvdkeras.bench.recipes.ceiling`, two ranks,
one compute thread each) alone and beside ``k`` processes that only spin, in
alternating rounds, and prints images/s next to the CPU each rank got. Linux shares
the cores fairly among runnable threads, so with ``2`` ranks and ``k`` spinners on
``c`` cores each rank gets ``min(1, c / (2 + k))`` of a core and the job runs at
that fraction of its quiet rate: 1/2, 1/3, 1/4 of it for 2, 4, 6 spinners on 2
cores. A figure that lands on such a fraction of the quiet rate was measured
beside other busy threads (ours, another job's, or another guest's, which shows as
stolen time), not slowed by anything inside the job. The expected fraction is
:func:`fair_share`.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import types

from hvdkeras.bench.runner import run_variant


def fair_share(ranks: int, spinners: int, cores: int) -> float:
    """The share of a core each of ``ranks`` single-threaded ranks gets beside ``spinners`` busy threads."""
    return min(1.0, cores / (ranks + spinners))


def _spin() -> None:
    while True:
        pass


def with_spinners(k: int, run):
    """``run()`` while ``k`` spinning processes compete for the cores; they are gone afterwards."""
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(k)]
    for p in procs:
        p.start()
    try:
        return run()
    finally:
        for p in procs:
            p.kill()
            p.join()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hvdkeras.bench.contention", description=__doc__.split("\n")[0])
    parser.add_argument("--hogs", default="0,2,4", help="comma-separated numbers of spinning processes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="applications.MobileNetV2")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args(argv)
    hogs = [int(k) for k in args.hogs.split(",")]
    cores = len(os.sched_getaffinity(0))
    job = types.SimpleNamespace(model=args.model, batch=args.batch, image_size=args.image_size, steps=args.steps,
                                timeout=args.timeout)
    workdir = os.path.abspath(os.path.join("runs", "contention"))
    os.makedirs(workdir, exist_ok=True)
    results: dict[int, list[dict]] = {k: [] for k in hogs}
    for round_ in range(args.rounds):
        for k in hogs:
            r = with_spinners(k, lambda: run_variant("ceiling", job, 2, workdir))
            results[k].append(r)
            print(f"round {round_ + 1} spinners {k}: {r['images_per_sec']:6.2f} images/s, "
                  f"{r['cpu_cores_per_rank']:.2f} cores/rank", flush=True)
    quiet = statistics.median(r["images_per_sec"] for r in results[hogs[0]])
    print(f"{'spinners':>8} {'images/s':>9} {'of quiet':>8} {'fair share':>10} {'cores/rank':>10}")
    for k in hogs:
        ips = statistics.median(r["images_per_sec"] for r in results[k])
        cpu = statistics.median(r["cpu_cores_per_rank"] for r in results[k])
        print(f"{k:8d} {ips:9.2f} {ips / quiet:8.2f} {fair_share(2, k, cores) / fair_share(2, hogs[0], cores):10.2f}"
              f" {cpu:10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
