"""Horovod on Spark for Keras 2 and 3 (``hvdkeras.spark``, mirroring ``horovod.spark``): work in progress, issue 50.

So far: :mod:`hvdkeras.spark.common.store`, where a Spark job's data, checkpoints and logs go.
"""
