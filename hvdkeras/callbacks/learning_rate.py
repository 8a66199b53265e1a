"""Learning-rate warmup and schedules, per batch, through the optimizer's ``learning_rate``.

Same names and arguments as Horovod's callbacks, working with TF 2.15's Keras
optimizers (Horovod 0.28.1's warmup fails there). The formulas are in
:mod:`hvdkeras.common.schedules`. Each callback owns a range of epochs
``[start_epoch, end_epoch)``; a warmup followed by a schedule covers a whole run:

    callbacks = [
        LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=5),
        LearningRateScheduleCallback(scaled_lr, multiplier=1.0, start_epoch=5, end_epoch=30),
        LearningRateScheduleCallback(scaled_lr, multiplier=0.1, start_epoch=30),
    ]

Epochs are absolute (``fit(initial_epoch=...)`` resumes mid-schedule), and each
callback writes the current rate to the epoch logs as ``lr``.

Momentum correction (Goyal et al. 2017, on by default as in Horovod): Keras' SGD
keeps the rate inside its velocity (``v = momentum * v - lr * g``), so when the
rate changes from ``lr`` to ``lr'`` the velocity is rescaled by ``lr' / lr`` before
the step. Horovod does this by changing ``momentum`` for one batch, which TF 2.15's
compiled train step never sees; rescaling the velocity slots is the same update
and works on any Keras. It costs one multiply over the slots per rate change
(every batch during warmup or a per-batch decay) and applies to SGD with momentum only.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import tensorflow as tf

from hvdkeras.common import log, schedules
from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras


class _EpochRangeLearningRate(keras.callbacks.Callback):
    """Sets ``lr(epoch)`` for fractional epochs in ``[start_epoch, end_epoch)``."""

    def __init__(self, start_epoch: float, end_epoch: Optional[float], staircase: bool,
                 steps_per_epoch: Optional[int], verbose: int = 0, momentum_correction: bool = True,
                 initial_batch: int = 0):
        super().__init__()
        if initial_batch < 0:
            raise ValueError(f"initial_batch must be >= 0; received: initial_batch={initial_batch}")
        if end_epoch is not None and end_epoch <= start_epoch:
            raise ValueError(
                f"end_epoch must be after start_epoch; received: start_epoch={start_epoch}, end_epoch={end_epoch}"
            )
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.momentum_correction = momentum_correction
        self._epoch = 0
        self._steps = steps_per_epoch
        self._rescale = None
        self._slots_checked = False
        # Batches of the first epoch already run before this fit started (a resume mid-epoch):
        # batch b of that epoch in this fit is batch b + initial_batch of the epoch.
        self.initial_batch = initial_batch
        self._batch_offset = initial_batch

    def lr_at(self, epoch: float) -> float:
        raise NotImplementedError

    def _in_range(self, epoch: float) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _apply(self, epoch: float) -> None:
        if self._in_range(epoch):
            self._set(self.lr_at(epoch))

    def _set(self, new_lr: float) -> None:
        optimizer = self.model.optimizer
        old_lr = compat.get_learning_rate(optimizer)
        compat.set_learning_rate(optimizer, new_lr)
        if self._rescale is not None and old_lr > 0 and abs(new_lr - old_lr) > 1e-12 * old_lr:
            self._rescale(tf.constant(new_lr / old_lr, tf.float32))

    def _build_rescale(self) -> None:
        buffers = compat.momentum_buffers(self.model.optimizer) if self.momentum_correction else []
        if not buffers:
            self._rescale = None
            return

        @tf.function
        def rescale(factor):
            for v in buffers:
                v.assign(v * tf.cast(factor, v.dtype))

        self._rescale = rescale

    def on_train_begin(self, logs=None):
        self._batch_offset = self.initial_batch
        self._steps = self.steps_per_epoch or (self.params or {}).get("steps")
        if not self.staircase and not self._steps:
            raise ValueError(
                f"{type(self).__name__} needs steps_per_epoch: the data has no known length; pass "
                "steps_per_epoch= to the callback or to model.fit"
            )
        compat.get_learning_rate(self.model.optimizer)  # fail now, with a clear message, on a schedule
        self._build_rescale()
        self._slots_checked = self._rescale is not None

    def on_train_batch_end(self, batch, logs=None):
        if not self._slots_checked:  # the optimizer may create its slots in the first step
            self._build_rescale()
            self._slots_checked = True

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        # A resumed partial epoch goes straight to its first batch's rate: a detour through the
        # epoch's start would rescale the momentum twice, not bit for bit like the uninterrupted run.
        if self.staircase or self._batch_offset == 0:
            self._apply(float(epoch))

    def on_train_batch_begin(self, batch, logs=None):
        if not self.staircase:
            self._apply(self._epoch + (batch + self._batch_offset) / self._steps)

    def on_epoch_end(self, epoch, logs=None):
        self._batch_offset = 0
        if logs is not None:
            logs["lr"] = compat.get_learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(_EpochRangeLearningRate):
    """Per-batch linear warmup from ``start_lr`` to ``initial_lr``.

    ``lr = start_lr + (initial_lr - start_lr) * epoch / warmup_epochs`` for the
    fractional epoch, and exactly ``initial_lr`` from the end of the last warmup
    epoch on. ``initial_lr`` is the already-scaled rate. ``start_lr`` defaults to
    Horovod's ``initial_lr / size`` (``size``: the number of Horovod ranks), the
    single-process rate when the global batch grows with the ranks; with a global
    batch that stays the same on any number of ranks, pass the rate of the batch
    ``learning_rate`` was tuned for (:func:`hvdkeras.common.scaling.warmup_start_lr`), so the
    warmup does not change with the rank count. ``initial_batch``: the first epoch of
    ``fit`` starts at that batch (a run resumed mid-epoch).

    Args:
        initial_lr: the scaled rate the warmup ends at.
        warmup_epochs: the warmup's length in epochs, more than 0 (a fraction too).
        momentum_correction: rescale SGD's momentum by each change of the rate, as Horovod's does (SGD with
            momentum only).
        steps_per_epoch: batches per epoch, for the fractional epoch (``None``: ``fit``'s steps).
        verbose: ``1``: a line on rank 0 when the warmup ends.
        size: the number of ranks the default ``start_lr`` divides by (``None``: Horovod's size).
        initial_batch: the first epoch of ``fit`` starts at that batch.
        start_lr: the rate the warmup starts at (``None``: ``initial_lr / size``).
    """

    def __init__(self, initial_lr: float, warmup_epochs: float = 5, momentum_correction: bool = True,
                 steps_per_epoch: Optional[int] = None, verbose: int = 0, size: Optional[int] = None,
                 initial_batch: int = 0, start_lr: Optional[float] = None):
        if warmup_epochs <= 0:
            raise ValueError(f"warmup_epochs must be > 0; received: warmup_epochs={warmup_epochs}")
        # The range covers whole epochs: past a fractional end (2.5 epochs) the rate is initial_lr.
        super().__init__(0, math.ceil(warmup_epochs), staircase=False, steps_per_epoch=steps_per_epoch,
                         verbose=verbose, momentum_correction=momentum_correction, initial_batch=initial_batch)
        self.initial_lr = initial_lr
        self.warmup_epochs = warmup_epochs
        self.size = distributed.size() if size is None else size
        self.start_lr = initial_lr / self.size if start_lr is None else start_lr

    def lr_at(self, epoch: float) -> float:
        """The warmup rate at fractional ``epoch``: linear from ``start_lr`` to ``initial_lr``."""
        return schedules.warmup_lr(epoch, self.initial_lr, self.warmup_epochs, self.start_lr)

    def on_epoch_end(self, epoch, logs=None):
        """Sets exactly ``initial_lr`` after the last warmup epoch, then logs the epoch's rate as ``lr``."""
        if epoch < self.warmup_epochs <= epoch + 1:
            self._set(self.initial_lr)  # land exactly
            if self.verbose:  # once, on rank 0, as Horovod's does
                log.info(f"Epoch {epoch + 1}: finished learning-rate warmup to {self.initial_lr:g}.")
        super().on_epoch_end(epoch, logs)


class LearningRateScheduleCallback(_EpochRangeLearningRate):
    """``lr = initial_lr * multiplier(epoch)`` for epochs in ``[start_epoch, end_epoch)``.

    ``multiplier`` is a constant, a function of the epoch, or a Keras
    ``LearningRateSchedule`` used as a multiplier of the step counted from
    ``start_epoch`` (build it with initial rate 1.0, e.g.
    ``CosineDecay(1.0, decay_steps)``; it is then evaluated every batch). With
    ``staircase=True`` the rate changes at epoch starts (integer epochs); otherwise
    every batch (fractional epochs). ``initial_batch``: the first epoch of ``fit``
    starts at that batch (a run resumed mid-epoch).

    Args:
        initial_lr: the scaled rate the multiplier multiplies.
        multiplier: a number, a function of the epoch, or a Keras ``LearningRateSchedule`` of the step.
        start_epoch: the first epoch whose rate this callback sets.
        end_epoch: the epoch it stops at, which it leaves to the next callback (``None``: none).
        staircase: change the rate at epoch starts only; ``False``, or a ``LearningRateSchedule``: every batch.
        momentum_correction: rescale SGD's momentum by each change of the rate, as Horovod's does (SGD with
            momentum only).
        steps_per_epoch: batches per epoch, for the fractional epoch (``None``: ``fit``'s steps).
        verbose: Horovod's argument; this callback prints nothing.
        initial_batch: the first epoch of ``fit`` starts at that batch.
    """

    def __init__(self, initial_lr: float, multiplier, start_epoch: float = 0, end_epoch: Optional[float] = None,
                 staircase: bool = True, momentum_correction: bool = True, steps_per_epoch: Optional[int] = None,
                 verbose: int = 0, initial_batch: int = 0):
        schedule = isinstance(multiplier, keras.optimizers.schedules.LearningRateSchedule)
        super().__init__(start_epoch, end_epoch, staircase and not schedule, steps_per_epoch, verbose,
                         momentum_correction, initial_batch)
        self.initial_lr = initial_lr
        self.multiplier: Callable[[float], float]
        if schedule:
            def scheduled(epoch: float) -> float:
                assert self._steps, "not staircase: on_train_begin has the steps per epoch or refused to train"
                return float(multiplier((epoch - self.start_epoch) * self._steps))

            self.multiplier = scheduled
        elif callable(multiplier):
            self.multiplier = multiplier
        else:
            constant = float(multiplier)
            self.multiplier = lambda epoch: constant

    def lr_at(self, epoch: float) -> float:
        """The scheduled rate at fractional ``epoch``: ``initial_lr * multiplier(epoch)``."""
        return self.initial_lr * self.multiplier(epoch)
