"""Horovod's own Spark Keras tests, as a user switches them by their import lines, on local[2].

The local[2] driver this stack's Spark tests share (the ``spark_local`` fixture) runs, with
``scripts/horovod_spark_keras_check.py``, each scenario of Horovod's
``test/integration/test_spark_keras.py`` that uses only Horovod's public API, with ``import hvdkeras.spark.keras as
hvd`` and Keras 3's own migration; what the originals read of Horovod's internals is replaced by what a user sees.
Every scenario passes on both stacks (``HVDKERAS_ONCE_TESTS=all`` runs them all on each); to keep each stack's Spark
tests short, keras2 runs those whose ranks Spark starts (a Horovod start each) and keras3 those whose user backend
trains in the driver, where Keras 3's differences (losses, metrics, saving) show.

Horovod's published ``examples/spark/keras/keras_spark_mnist.py``, switched by its import lines
(``examples/horovod/keras_spark_mnist.py``, its data written offline), runs last in the same driver.
"""
import re

import pytest

from tests.harness.stacks import ONCE_ENV, once_here, once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")

BY_STACK = {
    "keras2": ["test_fit_model", "test_fit_model_with_tensorflow_dataset_prefetch_buffer_size",
               "test_fit_model_multiclass"],
    "keras3": ["test_restore_from_checkpoint", "test_keras_direct_parquet_train",
               "test_keras_model_checkpoint_callback", "test_model_serialization"],
}
HERE = [scenario for stack, scenarios in BY_STACK.items() if once_here(stack) for scenario in scenarios]
SPARK_LOCAL = {"scenarios": HERE}  # the part of the shared driver these tests need


@pytest.fixture(scope="module")
def outcome(spark_local):
    return spark_local.get("horovod", {})


@pytest.mark.parametrize("scenario", [s for scenarios in BY_STACK.values() for s in scenarios])
def test_horovods_spark_keras_scenario_passes_switched_by_its_imports(outcome, scenario):
    if scenario not in HERE:
        stack = next(s for s, scenarios in BY_STACK.items() if scenario in scenarios)
        pytest.skip(f"runs on the {stack} stack ({ONCE_ENV}=all runs it here too)")
    assert outcome[scenario] == "passed"


# ------------------------------------------------------------------ Horovod's published Spark Keras example

# Run in the shared driver, last (scripts/spark_local_check.py): as a user runs it in an activated venv, with no
# PYSPARK_PYTHON. The estimator's code is the same on both stacks; keras3 trains through it in the scenarios above
# and on the standalone cluster, so the example runs on keras2, where the Spark tests have the time.
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
