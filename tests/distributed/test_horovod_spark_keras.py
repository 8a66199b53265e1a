"""Horovod's own Spark Keras tests, as a user switches them by their import lines, on local[2].

The local[2] driver this stack's Spark tests share (the ``spark_local`` fixture) runs, with
``scripts/horovod_spark_keras_check.py``, each scenario of Horovod's
``test/integration/test_spark_keras.py`` that uses only Horovod's public API, with ``import hvdkeras.spark.keras as
hvd`` and Keras 3's own migration; what the originals read of Horovod's internals is replaced by what a user sees.
Every scenario passes on both stacks: here, on keras2, those whose ranks Spark starts (a Horovod start each); those
whose user backend trains in the driver, where Keras 3's differences (losses, metrics, saving) show, run on keras3 in
the standalone cluster's driver (test_spark_cluster.py). ``HVDKERAS_ONCE_TESTS=all`` runs both here.

Horovod's published ``examples/spark/keras/keras_spark_mnist.py`` and ``keras_spark_rossmann_estimator.py``, switched
by their import lines (``examples/horovod/``, their data written offline), run last in the same driver.
"""
import csv
import io
import math
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
ROSSMANN_ONCE = ("Horovod's Spark Keras Rossmann example", 1.0, "keras2")
SPARK_LOCAL["examples"] = (["keras_spark_mnist"] if once_here(EXAMPLE_ONCE[2]) else []) + \
    (["keras_spark_rossmann_estimator"] if once_here(ROSSMANN_ONCE[2]) else [])


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


# Horovod's Rossmann example (examples/horovod/keras_spark_rossmann_estimator.py) on offline_rossmann.py's small
# synthetic CSVs, one epoch: ~36 named inputs, a metric and an activation of the script in custom_objects,
# BestModelCheckpoint choosing the returned model, a boolean validation column, keras_model.save to a local path,
# transform on a DataFrame with extra columns, toPandas.
@once_per_make_test(*ROSSMANN_ONCE)
def test_horovods_keras_spark_rossmann_example_trains_saves_and_predicts_switched_by_its_imports(spark_local):
    example = spark_local["examples"]["keras_spark_rossmann_estimator"]
    output = example["output"]
    best = [line for line in output.splitlines() if line.startswith("Best RMSPE:")]
    assert len(best) == 1, output[-3000:]
    assert math.isfinite(float(best[0].split(":")[1])), best  # min of the history's val_exp_rmspe
    # keras_model.save(--local-checkpoint-file): the model's folder, its parameters (the custom objects by name)
    assert example["files"]["checkpoint"] == ["metadata", "model.keras"], example["files"]
    assert "Written checkpoint to " in output
    # The submission: one row per test Id, in order, each a finite, positive number of sales (exp of the output)
    rows = list(csv.DictReader(io.StringIO(example["csv"]["submission.csv"])))
    test_rows = example["offline"]["test.csv"]
    assert [int(row["Id"]) for row in rows] == list(range(1, test_rows + 1)), rows[:3]
    sales = [float(row["Sales_pred"]) for row in rows]
    assert all(math.isfinite(s) and s > 0 for s in sales), sales[:5]
