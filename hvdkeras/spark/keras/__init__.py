"""Horovod's ``horovod.spark.keras`` on hvdkeras: ``KerasEstimator`` and its ``KerasModel``."""
from hvdkeras.spark.keras.estimator import KerasEstimator
from hvdkeras.spark.keras.model import KerasModel

__all__ = ["KerasEstimator", "KerasModel"]
