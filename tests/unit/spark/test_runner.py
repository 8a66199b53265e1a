"""hvdkeras.spark.runner's checks before a Spark job starts (a Spark context stood in by its three attributes)."""
import sys
import types

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.runner import check_cluster, task_slots


def context(master="local[2]", parallelism=2, python=sys.executable):
    return types.SimpleNamespace(master=master, defaultParallelism=parallelism, pythonExec=python)


def test_ranks_fit_the_slots_and_this_python():
    assert task_slots(context()) == 2
    check_cluster(context(), 2)


def test_a_local_master_whose_executors_run_another_python_is_one_line():
    with pytest.raises(SetupError, match=r"Spark's executors run /usr/bin/python3, not this Python .*: set"
                                         r" PYSPARK_PYTHON=.* before the SparkSession starts"):
        check_cluster(context(python="/usr/bin/python3"), 2)
    check_cluster(context(master="spark://master:7077", python="/opt/venv/bin/python"), 2)  # a cluster's own path


def test_more_ranks_than_slots_is_one_line():
    with pytest.raises(SetupError, match=r"^num_proc=4 ranks need 4 Spark task slots at once, but this Spark has 2"):
        check_cluster(context(), 4)
