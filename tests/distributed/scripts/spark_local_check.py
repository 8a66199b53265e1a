"""One driver on local[2] for a stack's Spark tests: one SparkSession, one TensorFlow import, for every check.

``spark_local_check.py WORK [--estimator] [--s3 ENDPOINT] [--scenarios NAME,...]`` runs, in this order:

* ``--estimator``: the KerasEstimator's checks (``spark_estimator_check.run_checks``, test_spark.py), the store a
  folder under WORK;
* ``--s3 ENDPOINT``: the checks with the store in a bucket of the S3 server at ENDPOINT
  (``spark_s3_check.run_s3_checks``, test_spark_s3.py); the environment that finds it is set before Spark starts;
* ``--scenarios``: Horovod's own Spark Keras scenarios by name (``horovod_spark_keras_check.run_scenarios``,
  test_horovod_spark_keras.py).

A driver's session, its executors' Python workers and its TensorFlow take 15-25 s to start on two cores, once
here instead of once for each. Prints ``RESULT {"estimator": {...}, "s3": {...}, "horovod": {...}}`` with the
parts asked for (tests/harness/spark_driver.py runs it).
"""
import argparse
import importlib
import json
import os
import sys

import cloudpickle

ARGS = argparse.ArgumentParser()
ARGS.add_argument("work")
ARGS.add_argument("--estimator", action="store_true")
ARGS.add_argument("--s3", metavar="ENDPOINT")
ARGS.add_argument("--scenarios", default="")
OPTIONS = ARGS.parse_args()

os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors run this venv's Python, which has Horovod
if OPTIONS.s3:
    from spark_s3_check import s3_environment  # this script's folder is first on sys.path

    s3_environment(OPTIONS.s3, os.path.join(OPTIONS.work, "s3"))

from pyspark.sql import SparkSession  # noqa: E402


def check_module(name):
    """One of this folder's check scripts, imported; what it defines (a callback a rank runs) travels to the ranks
    by value, as it did when that script ran as ``__main__``: the ranks cannot import this folder."""
    module = importlib.import_module(name)
    cloudpickle.register_pickle_by_value(module)
    return module


session = (SparkSession.builder.master("local[2]").appName("hvdkeras-spark-local-check")
           .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
result = {}
try:
    if OPTIONS.estimator:
        os.makedirs(os.path.join(OPTIONS.work, "store"), exist_ok=True)
        result["estimator"] = check_module("spark_estimator_check").run_checks(session,
                                                                               os.path.join(OPTIONS.work, "store"))
    if OPTIONS.s3:
        result["s3"] = check_module("spark_s3_check").run_s3_checks(session, os.path.join(OPTIONS.work, "s3"))
    if OPTIONS.scenarios:
        result["horovod"] = check_module("horovod_spark_keras_check").run_scenarios(
            session, os.path.join(OPTIONS.work, "horovod"), OPTIONS.scenarios.split(","))
finally:
    session.stop()
print("RESULT " + json.dumps(result), flush=True)
