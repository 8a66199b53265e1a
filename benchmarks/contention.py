"""Why figures on a small shared host come in fixed steps: the ceiling beside other busy sessions.

    python -m benchmarks.contention --hogs 0,2,4/1 --rounds 2

Runs the communication-free ceiling (:mod:`benchmarks.recipes.ceiling`, two ranks,
one compute thread each) alone and beside processes that only spin, in alternating
rounds, and prints images/s next to the CPU each rank got. ``N`` spins ``N``
processes, each in its own session (as ``horovodrun`` starts each rank: Horovod's
launcher calls ``setsid``); ``N/S`` spreads them over ``S`` sessions.

With the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``,
on by default in Debian and Ubuntu), Linux shares the cores fairly among *sessions*
with runnable threads, not among threads. Every rank is a session of its own, so
with ``r`` ranks beside ``s`` busy sessions on ``c`` cores each rank gets
``min(1, c / (r + s))`` of a core, however many threads anyone runs: another
2-rank job on a 2-core host halves a job exactly, two of them leave a third, three
a quarter. A figure that lands on such a fraction of the quiet rate was measured
beside other busy sessions, not slowed by anything inside the job. The expected
share is :func:`fair_share`.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics

from benchmarks.runner import run_variant
from hvdkeras.common.processes import kill_group


def fair_share(ranks: int, sessions: int, cores: int) -> float:
    """The share of a core each of ``ranks`` ranks (each its own session) gets beside ``sessions`` busy sessions."""
    return min(1.0, cores / (ranks + sessions))


def parse_hogs(spec: str) -> tuple[int, int]:
    """``"4"`` -> 4 spinners in 4 sessions; ``"4/1"`` -> 4 spinners in one session."""
    count, _, sessions = spec.partition("/")
    n = int(count)
    s = int(sessions) if sessions else n
    if n < 0 or (n and not 1 <= s <= n):
        raise ValueError(f"a hog is N or N/S with 1 <= S <= N spinners. Received: {spec!r}")
    return n, (s if n else 0)


def _session(spinners: int) -> None:
    """A new session (``setsid``) with ``spinners`` processes in it that only spin."""
    os.setsid()
    for _ in range(spinners - 1):
        if os.fork() == 0:
            break
    while True:
        pass


def with_spinners(k: int, run, sessions: int | None = None):
    """``run()`` while ``k`` spinning processes in ``sessions`` sessions (default ``k``) compete for the cores.

    Every session is killed as a whole afterwards, nothing of it outlives the call.
    """
    sessions = k if sessions is None else sessions
    sizes = [k // sessions + (i < k % sessions) for i in range(sessions)] if k else []
    leaders = [multiprocessing.Process(target=_session, args=(n,), daemon=True) for n in sizes]
    for p in leaders:
        p.start()
    try:
        return run()
    finally:
        for p in leaders:
            kill_group(p.pid)  # the leader and the spinners it forked
            p.join()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.contention", description=__doc__.split("\n")[0])
    parser.add_argument("--hogs", default="0,2,4/1",
                        help="comma-separated N (N spinners, each its own session) or N/S (in S sessions)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="applications.MobileNetV2")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args(argv)
    try:
        hogs = [parse_hogs(h) for h in args.hogs.split(",")]
    except ValueError as err:
        parser.error(str(err))
    cores = len(os.sched_getaffinity(0))
    workdir = os.path.abspath(os.path.join("runs", "contention"))
    os.makedirs(workdir, exist_ok=True)
    results: dict[tuple, list[dict]] = {h: [] for h in hogs}
    for round_ in range(args.rounds):
        for n, sessions in hogs:
            r = with_spinners(n, lambda: run_variant("ceiling", args, 2, workdir), sessions)
            results[(n, sessions)].append(r)
            print(f"round {round_ + 1}: {n} spinners in {sessions} sessions: {r['images_per_sec']:6.2f} images/s, "
                  f"{r['cpu_cores_per_rank']:.2f} cores/rank", flush=True)
    quiet = statistics.median(r["images_per_sec"] for r in results[hogs[0]])
    print(f"{'spinners':>8} {'sessions':>8} {'images/s':>9} {'of quiet':>8} {'fair share':>10} {'cores/rank':>10}")
    for n, sessions in hogs:
        ips = statistics.median(r["images_per_sec"] for r in results[(n, sessions)])
        cpu = statistics.median(r["cpu_cores_per_rank"] for r in results[(n, sessions)])
        share = fair_share(2, sessions, cores) / fair_share(2, hogs[0][1], cores)
        print(f"{n:8d} {sessions:8d} {ips:9.2f} {ips / quiet:8.2f} {share:10.2f} {cpu:10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
