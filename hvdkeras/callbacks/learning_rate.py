"""Learning-rate warmup and schedules, per batch, through the optimizer's ``learning_rate``.

Same names and arguments as Horovod's callbacks, working with TF 2.15's Keras
optimizers (Horovod 0.28.1's warmup fails there). The formulas are in
:mod:`hvdkeras.schedules`. Each callback owns a range of epochs
``[start_epoch, end_epoch)``; a warmup followed by a schedule covers a whole run:

    callbacks = [
        LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=5),
        LearningRateScheduleCallback(scaled_lr, multiplier=1.0, start_epoch=5, end_epoch=30),
        LearningRateScheduleCallback(scaled_lr, multiplier=0.1, start_epoch=30),
    ]

Epochs are absolute (``fit(initial_epoch=...)`` resumes mid-schedule), and each
callback writes the current rate to the epoch logs as ``lr``.
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Union

from hvdkeras import compat, schedules

keras = compat.keras


class _EpochRangeLearningRate(keras.callbacks.Callback):
    """Sets ``lr(epoch)`` for fractional epochs in ``[start_epoch, end_epoch)``."""

    def __init__(self, start_epoch: float, end_epoch: Optional[float], staircase: bool,
                 steps_per_epoch: Optional[int], verbose: int = 0):
        super().__init__()
        if end_epoch is not None and end_epoch <= start_epoch:
            raise ValueError(
                f"end_epoch must be after start_epoch; received: start_epoch={start_epoch}, end_epoch={end_epoch}"
            )
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self._epoch = 0
        self._steps = steps_per_epoch

    def lr_at(self, epoch: float) -> float:
        raise NotImplementedError

    def _in_range(self, epoch: float) -> bool:
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _apply(self, epoch: float) -> None:
        if self._in_range(epoch):
            compat.set_learning_rate(self.model.optimizer, self.lr_at(epoch))

    def on_train_begin(self, logs=None):
        self._steps = self.steps_per_epoch or (self.params or {}).get("steps")
        if not self.staircase and not self._steps:
            raise ValueError(
                f"{type(self).__name__} needs steps_per_epoch: the data has no known length; pass "
                "steps_per_epoch= to the callback or to model.fit"
            )
        compat.get_learning_rate(self.model.optimizer)  # fail now, with a clear message, on a schedule

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._apply(float(epoch))

    def on_train_batch_begin(self, batch, logs=None):
        if not self.staircase:
            self._apply(self._epoch + batch / self._steps)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = compat.get_learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(_EpochRangeLearningRate):
    """Per-batch linear warmup from ``initial_lr / size`` to ``initial_lr``.

    ``lr = initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1)`` for the
    fractional epoch, and exactly ``initial_lr`` from the end of the last warmup
    epoch on. ``initial_lr`` is the already-scaled rate; ``size`` defaults to the
    number of Horovod ranks.
    """

    def __init__(self, initial_lr: float, warmup_epochs: float = 5, steps_per_epoch: Optional[int] = None,
                 verbose: int = 0, size: Optional[int] = None):
        if warmup_epochs <= 0:
            raise ValueError(f"warmup_epochs must be > 0; received: warmup_epochs={warmup_epochs}")
        # The range covers whole epochs: past a fractional end (2.5 epochs) the rate is initial_lr.
        super().__init__(0, math.ceil(warmup_epochs), staircase=False, steps_per_epoch=steps_per_epoch,
                         verbose=verbose)
        self.initial_lr = initial_lr
        self.warmup_epochs = warmup_epochs
        if size is None:
            from hvdkeras import distributed

            size = distributed.size()
        self.size = size

    def lr_at(self, epoch: float) -> float:
        return schedules.warmup_lr(epoch, self.initial_lr, self.warmup_epochs, self.size)

    def on_epoch_end(self, epoch, logs=None):
        if epoch < self.warmup_epochs <= epoch + 1:
            compat.set_learning_rate(self.model.optimizer, self.initial_lr)  # land exactly
            if self.verbose:
                print(f"Epoch {epoch + 1}: finished learning-rate warmup to {self.initial_lr:g}.")
        super().on_epoch_end(epoch, logs)


class LearningRateScheduleCallback(_EpochRangeLearningRate):
    """``lr = initial_lr * multiplier(epoch)`` for epochs in ``[start_epoch, end_epoch)``.

    ``multiplier`` is a constant or a function of the epoch. With ``staircase=True``
    the rate changes at epoch starts (integer epochs); otherwise every batch
    (fractional epochs).
    """

    def __init__(self, initial_lr: float, multiplier: Union[float, Callable[[float], float]],
                 start_epoch: float = 0, end_epoch: Optional[float] = None, staircase: bool = True,
                 steps_per_epoch: Optional[int] = None, verbose: int = 0):
        super().__init__(start_epoch, end_epoch, staircase, steps_per_epoch, verbose)
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch, m=float(multiplier): m)

    def lr_at(self, epoch: float) -> float:
        return self.initial_lr * self.multiplier(epoch)
