"""Horovod's ``horovod.tensorflow.keras.callbacks``: the same names and arguments, hvdkeras' implementations.

``BroadcastGlobalVariablesCallback`` (``root_rank``, ``device``, ``local_variables``),
``MetricAverageCallback`` (``device``), ``LearningRateScheduleCallback``,
``LearningRateWarmupCallback`` and ``BestModelCheckpoint`` are :mod:`hvdkeras.callbacks`'
classes, which take Horovod's arguments in Horovod's order. Where they are stricter
(``docs/migrating.md``): metrics are averaged exactly (sums of the metric states, not a
mean of each rank's value), the broadcast happens before the first step when the model
is built, the checkpoint is written by rank 0 only, and the ranks compare their weights at
every epoch end and before every save (``check_divergence``).
"""
from hvdkeras.callbacks import (  # noqa: F401
    BroadcastGlobalVariablesCallback,
    LearningRateScheduleCallback,
    LearningRateWarmupCallback,
    MetricAverageCallback,
)
from hvdkeras.callbacks.model_checkpoint import BestModelCheckpoint  # noqa: F401

__all__ = ["BestModelCheckpoint", "BroadcastGlobalVariablesCallback", "LearningRateScheduleCallback",
           "LearningRateWarmupCallback", "MetricAverageCallback"]
