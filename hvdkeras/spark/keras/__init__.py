"""Horovod's ``horovod.spark.keras`` on hvdkeras: ``KerasEstimator`` and its ``KerasModel``."""
from hvdkeras.spark.keras.estimator import KerasEstimator, KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
