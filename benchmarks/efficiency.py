"""The arithmetic of the lab: efficiency, the step's split, the GPU-equivalent link rate and a projection.

Definitions, for ``n`` workers averaging ``G`` bytes of gradients per step with a ring
allreduce over links of ``R`` bits/s:

* bytes each worker sends (and receives) per step: ``2 (n - 1) / n * G``;
* wire time of that allreduce: ``t_comm = 2 (n - 1) / n * G * 8 / R`` seconds;
* **scaling efficiency** of a row: ``throughput / ceiling``, where the ceiling is the same
  processes with the gradient exchange removed;
* a row's step splits into ``compute = ceiling step time`` and
  ``exposed communication = step time - compute`` (what overlap did not hide);
* **GPU-equivalent link rate**: the ``R`` at which ``t_comm = ratio * compute``. For 8
  DGX A100 servers training ResNet-50 over 25 Gbit/s, ``ratio`` is about one half:
  2,375 images/s per GPU at batch 256 is 0.108 s of compute per step, and
  ``2 * 7 / 8 * 102 MB = 178 MB`` at 3.125 GB/s is 0.057 s, so ``0.057 / 0.108 = 0.53``.
  A step here with the same ratio puts the lab in the regime those users pay for.

The projection (:func:`projected_efficiency`) is a model, not a measurement::

    no overlap:   efficiency = c / (c + t_comm)
    overlap:      efficiency = c / (c + max(t_tail, t_comm - b * c))

with ``c`` the compute time of a step, ``b`` the fraction of it (the backward pass)
that communication can run under, and ``t_tail`` the wire time of the gradients made
last (the first layers'), which nothing can hide. With ``comm_factors`` (:func:`comm_factor`), ``t_comm``
is the ring model's time times the factor by which the measured exchange exceeded it at that worker count
(``measured / model`` of :mod:`benchmarks.exchange_scaling`, read by :func:`measured_factors`).

    python -m benchmarks.efficiency runs/exchange_scaling/resnet50/exchange_scaling.json

prints that projection for the DGX ResNet-50 step (0.108 s of compute, 102 MB of gradients) at 8-256
workers and 25, 100 and 400 Gbit/s, on the ring model and on the measured factors side by side.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Dict, Iterable, List, Mapping, Optional

# NVIDIA's published DGX A100 ResNet-50 training figure and its gradient size (fp32).
DGX_IMAGES_PER_SEC_PER_GPU = 2375.0
DGX_BATCH_PER_GPU = 256
RESNET50_GRADIENT_BYTES = 25_557_032 * 4
DGX_LINK_BPS = 25e9
DGX_SERVERS = 8


def ring_allreduce_bytes(gradient_bytes: float, workers: int) -> float:
    """Bytes each worker sends per allreduce of ``gradient_bytes``: ``2 (n - 1) / n * G``."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1; received: {workers}")
    return 2 * (workers - 1) / workers * gradient_bytes


def allreduce_seconds(gradient_bytes: float, workers: int, link_bps: Optional[float]) -> float:
    """Wire time of a ring allreduce: ``2 (n - 1) / n * G * 8 / R`` (0 on an unlimited link)."""
    if link_bps is None:
        return 0.0
    return ring_allreduce_bytes(gradient_bytes, workers) * 8 / link_bps


def gpu_equivalent_rate(gradient_bytes: float, compute_s: float, workers: int = 2,
                        ratio: Optional[float] = None) -> float:
    """The link rate (bits/s) at which ``t_comm = ratio * compute_s``; ``ratio`` defaults to the DGX one."""
    ratio = dgx_ratio() if ratio is None else ratio
    return ring_allreduce_bytes(gradient_bytes, workers) * 8 / (ratio * compute_s)


def dgx_ratio() -> float:
    """``t_comm / compute`` of 8 DGX A100 servers on ResNet-50 over 25 Gbit/s (about 0.53)."""
    compute = DGX_BATCH_PER_GPU / DGX_IMAGES_PER_SEC_PER_GPU
    return allreduce_seconds(RESNET50_GRADIENT_BYTES, DGX_SERVERS, DGX_LINK_BPS) / compute


def scaling_efficiency(images_per_sec: float, ceiling_images_per_sec: float) -> float:
    """``throughput / ceiling``."""
    if ceiling_images_per_sec <= 0:
        raise ValueError(f"the ceiling must be positive; received: {ceiling_images_per_sec}")
    return images_per_sec / ceiling_images_per_sec


def step_seconds(images_per_sec: float, global_batch: int) -> float:
    """Seconds per step of a job that processes ``global_batch`` images per step."""
    return global_batch / images_per_sec


@dataclasses.dataclass(frozen=True)
class StepSplit:
    step_s: float
    compute_s: float
    exposed_comm_s: float


def split_step(images_per_sec: float, ceiling_images_per_sec: float, global_batch: int) -> StepSplit:
    """A row's step as compute (the ceiling's step) plus exposed communication (the rest, at least 0)."""
    step = step_seconds(images_per_sec, global_batch)
    compute = step_seconds(ceiling_images_per_sec, global_batch)
    return StepSplit(step, compute, max(0.0, step - compute))


def measured_factors(sweep: dict) -> Dict[int, float]:
    """``{hosts: measured / ring model}`` from an ``exchange_scaling.json`` of a shaped sweep."""
    factors = {int(r["hosts"]): float(r["measured_over_model"]) for r in sweep.get("table", [])
               if r.get("measured_over_model")}
    if not factors:
        raise ValueError("the exchange scaling sweep has no measured/model ratio (an unshaped or empty sweep): give "
                         "one run with --link at a rate")
    return factors


def comm_factor(factors: Optional[Mapping[int, float]], workers: int) -> float:
    """The measured factor over the ring model at ``workers``: 1 without ``factors``; the measured one at a
    measured count, linear between two measured counts, and the nearest measured count's outside them (the
    largest one's for every larger count: the lab measures up to 8)."""
    if not factors:
        return 1.0
    counts = sorted(factors)
    if workers <= counts[0]:
        return factors[counts[0]]
    if workers >= counts[-1]:
        return factors[counts[-1]]
    below = max(c for c in counts if c <= workers)
    above = min(c for c in counts if c >= workers)
    if below == above:
        return factors[below]
    return factors[below] + (factors[above] - factors[below]) * (workers - below) / (above - below)


def projected_efficiency(compute_s: float, gradient_bytes: float, workers: int, link_bps: float,
                         overlap: bool, backward_fraction: float = 2 / 3, tail_fraction: float = 0.05,
                         factor: float = 1.0) -> float:
    """The model in this module's docstring; ``tail_fraction`` is the share of ``G`` made last, ``factor`` the
    measured exchange's over the ring model."""
    t_comm = factor * allreduce_seconds(gradient_bytes, workers, link_bps)
    if not overlap:
        exposed = t_comm
    else:
        exposed = max(tail_fraction * t_comm, t_comm - backward_fraction * compute_s)
    return compute_s / (compute_s + exposed)


def projection(compute_s: float, gradient_bytes: float, workers: Iterable[int], rates_bps: Iterable[float],
               scale: float = 1.0, comm_factors: Optional[Mapping[int, float]] = None, **model) -> List[Dict]:
    """Rows ``{workers, rate_bps, overlap, comm_factor, efficiency}``; each rate is divided by ``scale`` before use,
    and each ring time multiplied by :func:`comm_factor` of ``comm_factors``.

    ``scale`` maps a cluster's link onto the lab's step: with ``scale = R_cluster / R_lab``
    (e.g. 25 Gbit/s over the lab's GPU-equivalent rate), the lab's compute and bytes at
    ``R / scale`` have the same communication-to-compute ratio as the cluster at ``R``.
    """
    rows = []
    for rate in rates_bps:
        for n in workers:
            for overlap in (False, True):
                factor = comm_factor(comm_factors, n)
                rows.append({"workers": n, "rate_bps": rate, "overlap": overlap, "comm_factor": factor,
                             "efficiency": projected_efficiency(compute_s, gradient_bytes, n, rate / scale,
                                                                overlap, factor=factor, **model)})
    return rows


DGX_WORKERS = (8, 16, 32, 64, 128, 256)
DGX_RATES_BPS = (25e9, 100e9, 400e9)


def dgx_projection_text(factors: Mapping[int, float]) -> str:
    """The DGX ResNet-50 step's projected efficiency, with overlap, on the ring model and on ``factors``."""
    compute = DGX_BATCH_PER_GPU / DGX_IMAGES_PER_SEC_PER_GPU
    ring = projection(compute, RESNET50_GRADIENT_BYTES, DGX_WORKERS, DGX_RATES_BPS)
    measured = projection(compute, RESNET50_GRADIENT_BYTES, DGX_WORKERS, DGX_RATES_BPS, comm_factors=factors)
    lines = [f"{'workers':>7} {'Gbit/s':>6} {'factor':>6} {'ring, overlap':>13} {'measured, overlap':>17} "
             f"{'ring, none':>10} {'measured, none':>14}"]
    for rate in DGX_RATES_BPS:
        for n in DGX_WORKERS:
            pick = {(r["overlap"], kind): r for kind, rows in (("ring", ring), ("measured", measured))
                    for r in rows if r["workers"] == n and r["rate_bps"] == rate}
            lines.append(f"{n:>7} {rate / 1e9:6g} {pick[True, 'measured']['comm_factor']:6.2f} "
                         f"{pick[True, 'ring']['efficiency']:13.3f} {pick[True, 'measured']['efficiency']:17.3f} "
                         f"{pick[False, 'ring']['efficiency']:10.3f} {pick[False, 'measured']['efficiency']:14.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m benchmarks.efficiency EXCHANGE_SCALING_JSON (an exchange_scaling.json of "
              "python -m benchmarks.exchange_scaling)", file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            factors = measured_factors(json.load(f))
    except (OSError, ValueError) as err:
        print(f"{argv[0]}: {err}", file=sys.stderr)
        return 2
    print(dgx_projection_text(factors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
