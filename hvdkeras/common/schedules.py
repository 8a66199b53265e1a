"""Learning rate as a function of the (fractional) epoch. Pure Python, no TensorFlow.

``epoch`` below is fractional: batch ``b`` of epoch ``k`` (0-based, ``steps`` batches
per epoch) is at ``k + b / steps``. ``initial_lr`` is the *scaled* rate (see
:func:`hvdkeras.common.scaling.scaled_learning_rate`).

Warmup (Goyal et al. 2017), for ``0 <= epoch <= warmup_epochs``, linear from
``start_lr`` to ``initial_lr``::

    lr(epoch) = start_lr + (initial_lr - start_lr) * epoch / warmup_epochs

The trainer starts at :func:`hvdkeras.common.scaling.warmup_start_lr`, the reference
batch's rate, which does not depend on the number of ranks for a fixed global
batch. Horovod's warmup callback starts at ``initial_lr / size`` (the single-process
rate under its convention), which makes this its formula
``initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1)``.

After warmup, ``lr(epoch) = initial_lr * multiplier(epoch)`` with, for ``W`` warmup
epochs, ``E`` total epochs and ``p = (epoch - W) / (E - W)``:

* constant: ``1``
* step: ``decay_rate ** (number of boundaries <= epoch)``
* cosine: ``f + (1 - f) * 0.5 * (1 + cos(pi * p))``
* polynomial: ``f + (1 - f) * (1 - p) ** power``

where ``f`` is ``end_lr_fraction``.
"""
from __future__ import annotations

import bisect
import math
from typing import Callable, Sequence

from hvdkeras.config.schema import ScheduleConfig


def warmup_lr(epoch: float, initial_lr: float, warmup_epochs: float, start_lr: float) -> float:
    """Warmup rate at fractional ``epoch``, from ``start_lr``; ``initial_lr`` once ``epoch >= warmup_epochs``."""
    if warmup_epochs <= 0 or epoch >= warmup_epochs:
        return initial_lr
    epoch = max(0.0, epoch)
    return start_lr + (initial_lr - start_lr) * epoch / warmup_epochs


def constant() -> Callable[[float], float]:
    """The multiplier 1.0 at every epoch."""
    return lambda epoch: 1.0


def step_decay(boundaries: Sequence[float], decay_rate: float) -> Callable[[float], float]:
    """The multiplier ``decay_rate ** n``, ``n`` the number of ``boundaries`` at or before the epoch."""
    bounds = sorted(boundaries)
    return lambda epoch: decay_rate ** bisect.bisect_right(bounds, epoch)


def _progress(epoch: float, start: float, end: float) -> float:
    if end <= start:
        return 1.0
    return min(1.0, max(0.0, (epoch - start) / (end - start)))


def cosine_decay(start_epoch: float, end_epoch: float, end_fraction: float = 0.0) -> Callable[[float], float]:
    """A multiplier falling from 1 to ``end_fraction`` along a half cosine between the two epochs."""
    def multiplier(epoch: float) -> float:
        p = _progress(epoch, start_epoch, end_epoch)
        return end_fraction + (1.0 - end_fraction) * 0.5 * (1.0 + math.cos(math.pi * p))

    return multiplier


def polynomial_decay(start_epoch: float, end_epoch: float, end_fraction: float = 0.0,
                     power: float = 1.0) -> Callable[[float], float]:
    """A multiplier falling from 1 to ``end_fraction`` as ``(1 - progress) ** power`` between the two epochs."""
    def multiplier(epoch: float) -> float:
        p = _progress(epoch, start_epoch, end_epoch)
        decayed: float = (1.0 - p) ** power  # float ** float is typed Any (a negative base gives a complex)
        return end_fraction + (1.0 - end_fraction) * decayed

    return multiplier


def multiplier_from_config(schedule: ScheduleConfig, total_epochs: int) -> Callable[[float], float]:
    """The post-warmup multiplier for a :class:`hvdkeras.config.ScheduleConfig`."""
    if schedule.name == "constant":
        return constant()
    if schedule.name == "step":
        return step_decay(schedule.boundaries, schedule.decay_rate)
    if schedule.name == "cosine":
        return cosine_decay(schedule.warmup_epochs, total_epochs, schedule.end_lr_fraction)
    if schedule.name == "polynomial":
        return polynomial_decay(schedule.warmup_epochs, total_epochs, schedule.end_lr_fraction, schedule.power)
    raise ValueError(f"unknown schedule {schedule.name!r}")


def is_staircase(schedule: ScheduleConfig) -> bool:
    """Whether the rate after the warmup changes at epoch boundaries only (``constant``, ``step``), not per batch."""
    return schedule.name in ("constant", "step")


def rate_from_config(schedule: ScheduleConfig, total_epochs: int, initial_lr: float,
                     start_lr: float) -> Callable[[float], float]:
    """The configured rate at a fractional epoch: the warmup from ``start_lr``, then ``initial_lr`` times the
    decay's multiplier, at the epoch's start for a staircase schedule (:func:`is_staircase`).

    What the trainer's callbacks apply batch by batch, as one function (the ``tf.estimator`` front door evaluates
    it at each global step).

    Args:
        schedule: The config's schedule section.
        total_epochs: The epochs trained (``trainer.epochs``).
        initial_lr: The scaled rate.
        start_lr: The warmup's first rate (:func:`hvdkeras.common.scaling.warmup_start_lr`).

    Returns:
        ``lr(epoch)`` for a fractional epoch.
    """
    multiplier = multiplier_from_config(schedule, total_epochs)
    staircase = is_staircase(schedule)

    def rate(epoch: float) -> float:
        if epoch < schedule.warmup_epochs:
            return warmup_lr(epoch, initial_lr, schedule.warmup_epochs, start_lr)
        return initial_lr * multiplier(float(int(epoch)) if staircase else epoch)

    return rate
