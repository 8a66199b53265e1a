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
last (the first layers'), which nothing can hide.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Optional

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


def projected_efficiency(compute_s: float, gradient_bytes: float, workers: int, link_bps: float,
                         overlap: bool, backward_fraction: float = 2 / 3, tail_fraction: float = 0.05) -> float:
    """The model in this module's docstring; ``tail_fraction`` is the share of ``G`` made last."""
    t_comm = allreduce_seconds(gradient_bytes, workers, link_bps)
    if not overlap:
        exposed = t_comm
    else:
        exposed = max(tail_fraction * t_comm, t_comm - backward_fraction * compute_s)
    return compute_s / (compute_s + exposed)


def projection(compute_s: float, gradient_bytes: float, workers: Iterable[int], rates_bps: Iterable[float],
               scale: float = 1.0, **model) -> List[Dict]:
    """Rows ``{workers, rate_bps, overlap, efficiency}``; each rate is divided by ``scale`` before use.

    ``scale`` maps a cluster's link onto the lab's step: with ``scale = R_cluster / R_lab``
    (e.g. 25 Gbit/s over the lab's GPU-equivalent rate), the lab's compute and bytes at
    ``R / scale`` have the same communication-to-compute ratio as the cluster at ``R``.
    """
    rows = []
    for rate in rates_bps:
        for n in workers:
            for overlap in (False, True):
                rows.append({"workers": n, "rate_bps": rate, "overlap": overlap,
                             "efficiency": projected_efficiency(compute_s, gradient_bytes, n, rate / scale,
                                                                overlap, **model)})
    return rows
