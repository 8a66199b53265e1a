"""What the Spark estimators share: the store (``hvdkeras.spark.common.store``, as in ``horovod.spark.common``)."""
