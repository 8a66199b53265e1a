"""Keep non-trained model state (batch-norm moving statistics) identical on every rank."""
from __future__ import annotations

import numpy as np

from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.compat import keras


def statistics_variables(model):
    """The model's non-trainable floating-point variables (e.g. batch-norm moving mean and variance)."""
    return [v for v in model.non_trainable_variables if compat.dtype(v).is_floating]


def average_over_ranks(variables, name: str) -> None:
    """Replaces each variable by its mean over ranks (one collective for all of them)."""
    if not variables:
        return
    values = [np.asarray(v.numpy(), dtype=np.float64) for v in variables]
    flat = np.concatenate([a.reshape(-1) for a in values])
    mean = distributed.allreduce_sum(flat, name=name) / distributed.size()
    i = 0
    for v, a in zip(variables, values):
        v.assign(mean[i:i + a.size].reshape(a.shape).astype(compat.dtype(v).as_numpy_dtype))
        i += a.size


class AverageModelStatisticsCallback(keras.callbacks.Callback):
    """Averages batch-norm moving statistics over ranks before validation and at each epoch end.

    Rule enforced: gradients keep trained weights identical, but each rank updates
    its batch-norm moving mean and variance from its own batches, so they drift
    apart. Averaging them (as timm's ``distribute_bn`` does) makes validation use
    the same model on every rank and the checkpoint hold statistics of all the data.
    One collective per epoch; nothing happens for models without such variables.
    """

    def __init__(self):
        super().__init__()
        self._synced_this_epoch = False
        self._in_epoch = False

    def _sync(self, tag: str) -> None:
        average_over_ranks(statistics_variables(self.model), name=f"hvdkeras.model_statistics.{tag}")
        self._synced_this_epoch = True

    def on_epoch_begin(self, epoch, logs=None):
        """Notes the epoch; its statistics are not averaged yet."""
        self._in_epoch = True
        self._synced_this_epoch = False
        self._epoch = epoch

    def on_test_begin(self, logs=None):
        """Averages the statistics before validation inside ``fit``."""
        if self._in_epoch and not self._synced_this_epoch:
            self._sync(f"{self._epoch}")

    def on_epoch_end(self, epoch, logs=None):
        """Averages the statistics, unless validation already did this epoch."""
        if not self._synced_this_epoch:
            self._sync(f"{epoch}")
        self._in_epoch = False
