"""Horovod on Spark for Keras 2 and 3 (``hvdkeras.spark``, mirroring ``horovod.spark``): work in progress, issue 50.

So far: :func:`run` (:mod:`hvdkeras.spark.runner`), :mod:`hvdkeras.spark.common.store` and
:mod:`hvdkeras.spark.common.backend`. Importing this package needs no pyspark; calling ``run`` does.
"""
from hvdkeras.spark.runner import run

__all__ = ["run"]
