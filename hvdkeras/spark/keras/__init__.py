"""Horovod's ``horovod.spark.keras`` on hvdkeras: ``KerasEstimator`` and its ``KerasModel``.

Both are imported on first use (PEP 562), so a rank that unpickles its training function from
:mod:`hvdkeras.spark.keras.remote` imports neither pyspark's ML library nor what it brings.
"""
from typing import Any

__all__ = ["KerasEstimator", "KerasModel"]


def __getattr__(name: str) -> Any:
    if name == "KerasEstimator":
        from hvdkeras.spark.keras.estimator import KerasEstimator

        return KerasEstimator
    if name == "KerasModel":
        from hvdkeras.spark.keras.model import KerasModel

        return KerasModel
    raise AttributeError(f"module 'hvdkeras.spark.keras' has no attribute {name!r}")
