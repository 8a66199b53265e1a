"""Rank-correct Keras callbacks for Horovod training, usable in any ``model.fit``.

Names and arguments follow Horovod's callbacks (broadcast, metric average,
learning-rate warmup and schedule) and Keras' (checkpointing, stopping, logging);
what is new is an added keyword argument. :func:`default_callbacks` returns the
recommended list in the right order.
"""
from hvdkeras.callbacks.agreement import EarlyStopping, ReduceLROnPlateau, TerminateOnNaN
from hvdkeras.callbacks.backup_and_restore import BackupAndRestore
from hvdkeras.callbacks.broadcast import BroadcastGlobalVariablesCallback
from hvdkeras.callbacks.chief_only import CSVLogger, ProgbarLogger, TensorBoard
from hvdkeras.callbacks.defaults import default_callbacks
from hvdkeras.callbacks.divergence import DivergenceGuard
from hvdkeras.callbacks.learning_rate import LearningRateScheduleCallback, LearningRateWarmupCallback
from hvdkeras.callbacks.metric_average import MetricAverageCallback
from hvdkeras.callbacks.metrics_logger import JsonlMetricsLogger
from hvdkeras.callbacks.model_checkpoint import ModelCheckpoint
from hvdkeras.callbacks.model_statistics import AverageModelStatisticsCallback
from hvdkeras.callbacks.position_tracker import PositionTracker
from hvdkeras.callbacks.profiler import ProfileBatches
from hvdkeras.callbacks.throughput import ThroughputLogger

__all__ = [
    "AverageModelStatisticsCallback",
    "BackupAndRestore",
    "BroadcastGlobalVariablesCallback",
    "CSVLogger",
    "DivergenceGuard",
    "EarlyStopping",
    "JsonlMetricsLogger",
    "LearningRateScheduleCallback",
    "LearningRateWarmupCallback",
    "MetricAverageCallback",
    "ModelCheckpoint",
    "PositionTracker",
    "ProfileBatches",
    "ProgbarLogger",
    "ReduceLROnPlateau",
    "TensorBoard",
    "TerminateOnNaN",
    "ThroughputLogger",
    "default_callbacks",
]
