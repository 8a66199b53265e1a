"""Spark ML's tuning and persistence with hvdkeras's KerasEstimator, on a real Spark (local[2]).

The local[2] driver this stack's Spark tests share (the ``spark_local`` fixture) runs
``scripts/spark_tuning_check.py``: a ``Pipeline`` of a ``VectorAssembler`` and the estimator saved and loaded unfitted,
``TrainValidationSplit`` over it (epochs and the optimizer's learning rate, ``parallelism=2``), read by a Spark ML
evaluator. keras2 runs it here; keras3 runs the same checks on the standalone cluster (test_spark_cluster.py), both
asserted by ``tests/harness/spark_checks.py`` (``HVDKERAS_ONCE_TESTS=all`` runs this module on keras3 too).
"""
import pytest

from tests.harness import spark_checks
from tests.harness.stacks import once_here, once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytestmark = once_per_make_test("Spark ML's tuning with the estimator", 0.5, stack="keras2")
SPARK_LOCAL = {"tuning": once_here("keras2")}  # the part of the shared driver these tests need


@pytest.fixture(scope="module")
def tuned(spark_local):
    return spark_local["tuning"]


def test_an_unfitted_pipeline_with_the_estimator_saves_and_loads(tuned):
    spark_checks.assert_unfitted_pipeline(tuned)


def test_train_validation_split_picks_the_better_learning_rate_and_its_pipeline_model_reloads(tuned):
    spark_checks.assert_train_validation_split(tuned)


def test_the_fits_of_a_tuning_queue_and_each_has_its_own_run(tuned):
    spark_checks.assert_tuning_queued(tuned)
