"""The link sweep: every variant at every link rate on the two emulated hosts, in alternating rounds.

    python -m hvdkeras.bench --hosts 2 --link unlimited,1gbit,gpu --rounds 3

Order: the hosts come up once; then, round after round, each rate is applied in turn
and every variant runs once at it, the variants' order rotating by one each round so
that no variant always runs first after a change of rate. ``gpu`` in ``--link`` is the
GPU-equivalent rate (:func:`hvdkeras.bench.efficiency.gpu_equivalent_rate`), computed
from a ceiling job run unshaped before the first round (it also warms the caches),
rounded to two significant digits.

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

from hvdkeras.bench import efficiency
from hvdkeras.bench.lab import hosts, shaper
from hvdkeras.bench.runner import on_hosts, run_variant

GPU_TOKEN = "gpu"


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
    """The emulated hosts for the length of the block (a :class:`hosts.HostsInfo`), gone after it."""
    if n_hosts != len(hosts.HOST_SPECS):
        raise ValueError(f"the lab has {len(hosts.HOST_SPECS)} emulated hosts; received: --hosts {n_hosts}")
    ok, reason = hosts.can_run()
    if not ok:
        raise RuntimeError(f"the lab cannot run here: {reason}")
    with _terminate_as_exit():
        info = hosts.up(tempfile.mkdtemp(prefix="hvdkeras-lab-"))
        try:
            yield info
        finally:
            try:
                shaper.clear(hosts.link_ends())
            finally:
                hosts.down(info)


def calibrate(args, info, workdir: str) -> dict:
    """One unshaped ceiling job: its images/s, step compute time, gradient bytes and the GPU-equivalent rate."""
    result = run_variant("ceiling", args, len(info.hosts), workdir, on_hosts(info))
    n = len(info.hosts)
    compute = efficiency.step_seconds(result["images_per_sec"], args.batch * n)
    rate = efficiency.gpu_equivalent_rate(result["gradient_bytes"], compute, workers=n)
    return {"ceiling_images_per_sec": result["images_per_sec"], "compute_s": compute,
            "gradient_bytes": result["gradient_bytes"], "gpu_equivalent_bps": round_rate(rate),
            "dgx_ratio": efficiency.dgx_ratio()}


def run_sweep(variants: Sequence[str], rates: Sequence, args, log=print) -> dict:
    """Every variant at every rate, ``args.rounds`` times; returns ``{"calibration", "rates", "runs"}``.

    ``runs[variant][rate_name]`` is the list of results (one per round), each with the
    round number, so a row can be compared with the ceiling of the same round.
    """
    workdir = tempfile.mkdtemp(prefix="hvdkeras-lab-runs-")
    with lab(args.hosts) as info:
        place = on_hosts(info)
        tic = time.time()
        calibration = calibrate(args, info, workdir)
        log(f"calibration: ceiling {calibration['ceiling_images_per_sec']:.2f} images/s, compute "
            f"{calibration['compute_s']:.3f} s/step, gradients {calibration['gradient_bytes'] / 1e6:.1f} MB, "
            f"GPU-equivalent link {shaper.format_rate(calibration['gpu_equivalent_bps'])} ({time.time() - tic:.0f}s)")
        resolved = [calibration["gpu_equivalent_bps"] if r == GPU_TOKEN else r for r in rates]
        names = [shaper.format_rate(r) for r in resolved]
        runs = {v: {name: [] for name in names} for v in variants}
        for round_ in range(args.rounds):
            order = list(variants[round_ % len(variants):]) + list(variants[:round_ % len(variants)])
            for rate, name in zip(resolved, names):
                with shaper.shaped(hosts.link_ends(), rate):
                    for variant in order:
                        result = dict(run_variant(variant, args, len(info.hosts), workdir, place), round=round_)
                        runs[variant][name].append(result)
                        log(f"round {round_ + 1}/{args.rounds} link {name:>9} {variant:28} "
                            f"{result['images_per_sec']:8.2f} images/s ({time.time() - tic:.0f}s)")
    return {"calibration": calibration, "rates": names, "rates_bps": resolved, "runs": runs}
