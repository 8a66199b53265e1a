"""Learning rate as a function of the (fractional) epoch. Pure Python, no TensorFlow.

``epoch`` below is fractional: batch ``b`` of epoch ``k`` (0-based, ``steps`` batches
per epoch) is at ``k + b / steps``. ``initial_lr`` is the *scaled* rate (see
:func:`hvdkeras.optimizers.scaled_learning_rate`).

Warmup (Goyal et al. 2017, as in Horovod), for ``0 <= epoch <= warmup_epochs``::

    lr(epoch) = initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1)

It starts at ``initial_lr / size`` (the single-process rate under the linear scaling
rule) and lands exactly on ``initial_lr`` at ``epoch = warmup_epochs``.

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


def warmup_lr(epoch: float, initial_lr: float, warmup_epochs: float, size: int) -> float:
    """Warmup rate at fractional ``epoch``; ``initial_lr`` once ``epoch >= warmup_epochs``."""
    if warmup_epochs <= 0 or epoch >= warmup_epochs:
        return initial_lr
    epoch = max(0.0, epoch)
    return initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1.0)


def constant() -> Callable[[float], float]:
    return lambda epoch: 1.0


def step_decay(boundaries: Sequence[float], decay_rate: float) -> Callable[[float], float]:
    bounds = sorted(boundaries)
    return lambda epoch: decay_rate ** bisect.bisect_right(bounds, epoch)


def _progress(epoch: float, start: float, end: float) -> float:
    if end <= start:
        return 1.0
    return min(1.0, max(0.0, (epoch - start) / (end - start)))


def cosine_decay(start_epoch: float, end_epoch: float, end_fraction: float = 0.0) -> Callable[[float], float]:
    def multiplier(epoch: float) -> float:
        p = _progress(epoch, start_epoch, end_epoch)
        return end_fraction + (1.0 - end_fraction) * 0.5 * (1.0 + math.cos(math.pi * p))

    return multiplier


def polynomial_decay(start_epoch: float, end_epoch: float, end_fraction: float = 0.0,
                     power: float = 1.0) -> Callable[[float], float]:
    def multiplier(epoch: float) -> float:
        p = _progress(epoch, start_epoch, end_epoch)
        return end_fraction + (1.0 - end_fraction) * (1.0 - p) ** power

    return multiplier


def multiplier_from_config(schedule, total_epochs: int) -> Callable[[float], float]:
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
