"""Horovod's own Spark Keras tests, as a user switches them by their import lines, on local[2].

The local[2] driver this stack's Spark tests share (the ``spark_local`` fixture) runs, with
``scripts/horovod_spark_keras_check.py``, each scenario of Horovod's
``test/integration/test_spark_keras.py`` that uses only Horovod's public API, with ``import hvdkeras.spark.keras as
hvd`` and Keras 3's own migration; what the originals read of Horovod's internals is replaced by what a user sees.
Every scenario passes on both stacks: here, on keras2, those whose ranks Spark starts (a Horovod start each); those
whose user backend trains in the driver, where Keras 3's differences (losses, metrics, saving) show, run on keras3 in
the standalone cluster's driver (test_spark_cluster.py). ``HVDKERAS_ONCE_TESTS=all`` runs both here.

Horovod's published ``examples/spark/keras/keras_spark_mnist.py``, switched by its import lines
(``examples/horovod/keras_spark_mnist.py``, its data written offline), runs last in the same driver.
"""
import re

import pytest

from tests.harness.spark_checks import SCENARIOS_WITH_RANKS
from tests.harness.stacks import once_here, once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")

SCENARIOS = once_per_make_test("Horovod's Spark Keras scenarios that start ranks", 0.8, stack="keras2")
SPARK_LOCAL = {"scenarios": SCENARIOS_WITH_RANKS if once_here("keras2") else []}  # the shared driver's part here


@pytest.fixture(scope="module")
def outcome(spark_local):
    return spark_local.get("horovod", {})


@SCENARIOS
@pytest.mark.parametrize("scenario", SCENARIOS_WITH_RANKS)
def test_horovods_spark_keras_scenario_passes_switched_by_its_imports(outcome, scenario):
    assert outcome[scenario] == "passed"


# ------------------------------------------------------------------ Horovod's published Spark Keras example

# Run in the shared driver, last (scripts/spark_local_check.py): as a user runs it in an activated venv, with no
# PYSPARK_PYTHON. The estimator's code is the same on both stacks; keras3 trains through it on the standalone
# cluster (test_spark_cluster.py), so the example runs on keras2.
EXAMPLE_ONCE = ("Horovod's Spark Keras MNIST example", 0.7, "keras2")
SPARK_LOCAL["examples"] = ["keras_spark_mnist"] if once_here(EXAMPLE_ONCE[2]) else []


@once_per_make_test(*EXAMPLE_ONCE)
def test_horovods_keras_spark_mnist_example_trains_predicts_and_evaluates_switched_by_its_imports(spark_local):
    example = spark_local["examples"]["keras_spark_mnist"]
    output = example["output"]
    accuracy = [line for line in output.splitlines() if line.startswith("Test accuracy:")]
    assert len(accuracy) == 1, output[-3000:]
    assert float(accuracy[0].split(":")[1]) > 0.3, accuracy  # ten classes; one epoch of 1,797 digits gives 0.6-0.8
    # Each rank's lines reached the driver, prefixed with their time (prefix_output_with_timestamp=True)
    for rank in (0, 1):
        assert re.search(rf"^\w{{3}} \w{{3}} +\d+ \d\d:\d\d:\d\d \d{{4}}\[{rank}\]<stdout>:.*starting fresh", output,
                         re.M), output[-3000:]
    (run,) = example["files"]["store/runs"]
    assert example["files"][f"store/runs/{run}/checkpoints"] == ["epoch-0001"]
    assert example["tensorboard"]  # the example's TensorBoard callback ran on the ranks
