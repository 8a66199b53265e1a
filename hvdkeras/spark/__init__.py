"""Horovod on Spark for Keras 2 and 3 (``hvdkeras.spark``, mirroring ``horovod.spark``).

:func:`run` (:mod:`hvdkeras.spark.runner`), the store (:mod:`hvdkeras.spark.common.store`), the backend
(:mod:`hvdkeras.spark.common.backend`) and the Keras estimator (:mod:`hvdkeras.spark.keras`). Importing this
package needs no pyspark; calling ``run`` does.
"""
from hvdkeras.spark.runner import run

__all__ = ["run"]
