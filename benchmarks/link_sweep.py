"""The link sweep: every variant at every link rate on the emulated hosts (two by default), in alternating rounds.

    python -m benchmarks --hosts 2 --link unlimited,1gbit,gpu --rounds 3

Order: the hosts come up once; then, round after round, the ceiling runs once unshaped
(it exchanges no gradients, so the link cannot change it; each row is divided by the
ceiling of its own round), then each rate is applied in turn and every other variant
runs once at it, their order rotating by one each round so that no variant always runs
first after a change of rate. ``gpu`` in ``--link`` is the GPU-equivalent rate
(:func:`benchmarks.efficiency.gpu_equivalent_rate`), computed from the first
round's ceiling job, rounded to two significant digits.

Whatever happens (an error, Ctrl-C, SIGTERM), the shaper is removed and the hosts
are taken down before the sweep returns or raises.
"""
from __future__ import annotations

import contextlib
import math
import signal
import tempfile
import time
from collections.abc import Sequence

from benchmarks import efficiency
from benchmarks.runner import on_hosts, run_variant
from lab import hosts, shaper

GPU_TOKEN = "gpu"
CEILING = "ceiling"


def round_rate(bits_per_s: float) -> int:
    """Two significant digits: 527_813_000 -> 530_000_000."""
    digits = int(math.floor(math.log10(bits_per_s))) - 1
    return int(round(bits_per_s, -digits))


def parse_link(text: str) -> list:
    """``--link``'s rates: bits/s, None for unlimited, or :data:`GPU_TOKEN` (resolved after calibration)."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    rates = [GPU_TOKEN if p.lower() == GPU_TOKEN else shaper.parse_rate(p) for p in parts]
    if not rates:
        raise ValueError(f"--link needs at least one rate, e.g. unlimited,1gbit,gpu. Received: {text!r}")
    return rates


@contextlib.contextmanager
def _terminate_as_exit():
    """SIGTERM raises SystemExit inside the block, so its ``finally`` clauses run."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def lab(n_hosts: int):
    """``n_hosts`` emulated hosts, 2 to 8, for the length of the block (a :class:`hosts.HostsInfo`), gone after it.

    Whatever ends the block (an error, Ctrl-C, SIGTERM), the shaper is removed from their links and they go down."""
    hosts.host_specs(n_hosts)  # a bad count fails here, before anything is built
    ok, reason = hosts.can_run()
    if not ok:
        raise RuntimeError(f"the lab cannot run here: {reason}")
    with _terminate_as_exit(), tempfile.TemporaryDirectory(prefix="hvdkeras-lab-", ignore_cleanup_errors=True) as tmp:
        info = hosts.up(tmp, hosts=n_hosts)
        try:
            yield info
        finally:
            try:
                shaper.clear(hosts.link_ends(n_hosts))
            finally:
                hosts.down(info)


def calibration(result: dict, args, n: int) -> dict:
    """From an unshaped ceiling job: its images/s, step compute time, gradient bytes and the GPU-equivalent rate."""
    compute = efficiency.step_seconds(result["images_per_sec"], args.batch * n)
    rate = efficiency.gpu_equivalent_rate(result["gradient_bytes"], compute, workers=n)
    return {"ceiling_images_per_sec": result["images_per_sec"], "compute_s": compute,
            "gradient_bytes": result["gradient_bytes"], "gpu_equivalent_bps": round_rate(rate),
            "dgx_ratio": efficiency.dgx_ratio()}


def run_sweep(variants: Sequence[str], rates: Sequence, args, log=print) -> dict:
    """Every variant at every rate, ``args.rounds`` times; returns ``{"calibration", "rates", "runs"}``.

    ``runs[variant][rate_name]`` is the list of results (one per round), each with the
    round number, so a row can be compared with the ceiling of the same round; the
    ceiling's one job per round is listed under every rate.
    """
    shaped_variants = [v for v in variants if v != CEILING]
    # the jobs' working directories are removed at the end, on failure too
    with tempfile.TemporaryDirectory(prefix="hvdkeras-lab-runs-", ignore_cleanup_errors=True) as workdir, \
            lab(args.hosts) as info:
        place, n = on_hosts(info), len(info.hosts)
        tic = time.time()
        runs: dict = {}
        names: list = []
        resolved: list = []
        cal: dict = {}
        for round_ in range(args.rounds):
            ceiling = dict(run_variant(CEILING, args, n, workdir, place), round=round_)
            if round_ == 0:
                cal = calibration(ceiling, args, n)
                log(f"calibration: ceiling {cal['ceiling_images_per_sec']:.2f} images/s, compute "
                    f"{cal['compute_s']:.3f} s/step, gradients {cal['gradient_bytes'] / 1e6:.1f} MB, "
                    f"GPU-equivalent link {shaper.format_rate(cal['gpu_equivalent_bps'])} ({time.time() - tic:.0f}s)")
                resolved = [cal["gpu_equivalent_bps"] if r == GPU_TOKEN else r for r in rates]
                names = [shaper.format_rate(r) for r in resolved]
                runs = {v: {name: [] for name in names} for v in variants}
            else:
                log(f"round {round_ + 1}/{args.rounds} unshaped {CEILING:28} {ceiling['images_per_sec']:8.2f} images/s"
                    f" ({time.time() - tic:.0f}s)")
            if CEILING in runs:
                for name in names:
                    runs[CEILING][name].append(ceiling)
            k = round_ % max(len(shaped_variants), 1)
            order = shaped_variants[k:] + shaped_variants[:k]
            for rate, name in zip(resolved, names):
                with shaper.shaped(hosts.link_ends(n), rate):
                    for variant in order:
                        result = dict(run_variant(variant, args, n, workdir, place), round=round_)
                        runs[variant][name].append(result)
                        log(f"round {round_ + 1}/{args.rounds} link {name:>9} {variant:28} "
                            f"{result['images_per_sec']:8.2f} images/s ({time.time() - tic:.0f}s)")
    return {"calibration": cal, "rates": names, "rates_bps": resolved, "runs": runs}
