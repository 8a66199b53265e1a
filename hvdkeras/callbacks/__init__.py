"""Rank-correct Keras callbacks for Horovod training, usable in any ``model.fit``.

Recommended order (the trainer uses it)::

    [BroadcastGlobalVariablesCallback(0), AverageModelStatisticsCallback(), MetricAverageCallback(),
     LearningRateWarmupCallback(...), LearningRateScheduleCallback(...),
     <rank 0: ProgbarLogger, JsonlMetricsLogger, EpochCheckpoint>, ...]
"""
from hvdkeras.callbacks.broadcast import BroadcastGlobalVariablesCallback
from hvdkeras.callbacks.checkpoint import EpochCheckpoint
from hvdkeras.callbacks.learning_rate import LearningRateScheduleCallback, LearningRateWarmupCallback
from hvdkeras.callbacks.metric_average import MetricAverageCallback
from hvdkeras.callbacks.metrics_logger import JsonlMetricsLogger
from hvdkeras.callbacks.model_statistics import AverageModelStatisticsCallback

__all__ = [
    "AverageModelStatisticsCallback",
    "BroadcastGlobalVariablesCallback",
    "EpochCheckpoint",
    "JsonlMetricsLogger",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
    "MetricAverageCallback",
]
