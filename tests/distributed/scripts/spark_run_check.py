"""Run by test_spark.py: a local[2] SparkSession, then hvdkeras.spark.run as Horovod ranks in its tasks.

``spark_run_check.py ranks``: two ranks allreduce their rank; prints ``RESULT {"results": [...]}``.
``spark_run_check.py too_many``: ``num_proc=3`` on two slots; prints ``RESULT {"error": ..., "seconds": ...}``.
"""
import json
import os
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors run this venv's Python, which has Horovod

from pyspark.sql import SparkSession

from hvdkeras import spark as hvd_spark
from hvdkeras.common.errors import HvdkerasError


def allreduce_rank():
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum, name="spark_check")
    return {"rank": hvd.rank(), "size": hvd.size(), "sum": float(total.numpy())}


session = (SparkSession.builder.master("local[2]").appName("hvdkeras-spark-check")
           .config("spark.ui.enabled", "false").getOrCreate())
try:
    if sys.argv[1] == "ranks":
        print("RESULT " + json.dumps({"results": hvd_spark.run(allreduce_rank, num_proc=2, verbose=0)}), flush=True)
    else:
        started = time.monotonic()
        try:
            hvd_spark.run(allreduce_rank, num_proc=3, verbose=0)
            error = None
        except HvdkerasError as exc:
            error = str(exc)
        print("RESULT " + json.dumps({"error": error, "seconds": time.monotonic() - started}), flush=True)
finally:
    session.stop()
