"""Spark ML's tuning and persistence with hvdkeras's KerasEstimator, on a real Spark (local[2]).

The local[2] driver this stack's Spark tests share (the ``spark_local`` fixture) runs
``scripts/spark_tuning_check.py``: a ``Pipeline`` of a ``VectorAssembler`` and the estimator saved and loaded unfitted,
``TrainValidationSplit`` over it (epochs and the optimizer's learning rate, ``parallelism=2``), read by a Spark ML
evaluator. Spark ML's machinery is the same Python on
both stacks: keras2 runs it (``HVDKERAS_ONCE_TESTS=all`` runs it on keras3 too).
"""
import pytest

from tests.harness.stacks import once_here, once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytestmark = once_per_make_test("Spark ML's tuning with the estimator", 0.5, stack="keras2")
SPARK_LOCAL = {"tuning": once_here("keras2")}  # the part of the shared driver these tests need


@pytest.fixture(scope="module")
def tuned(spark_local):
    return spark_local["tuning"]


def test_an_unfitted_pipeline_with_the_estimator_saves_and_loads(tuned):
    assert tuned["unfitted"] == {"stages": ["VectorAssembler", "KerasEstimator"], "epochs": 1,
                                 "feature_cols": ["features"], "loss": "binary_crossentropy"}


def test_train_validation_split_picks_the_better_learning_rate_and_its_pipeline_model_reloads(tuned):
    tvs = tuned["tvs"]
    low, high = tvs["metrics"]  # 1 epoch at 0.01, then 4 epochs at 0.5: the evaluator tells them apart
    assert high > low, tvs
    assert tvs["best"] == ["VectorAssembler", "KerasModel"] and tvs["best_epochs"] == 4, tvs
    assert tvs["auc"] > 0.9 and tvs["reloaded_auc"] == tvs["auc"], tvs


def test_the_fits_of_a_tuning_queue_and_each_has_its_own_run(tuned):
    # TrainValidationSplit: 2 fits and the best one's refit on every row
    assert tuned["fits"] == 3 and tuned["runs"] == 3, tuned
    assert tuned["most_at_once"] == 1, tuned  # parallelism=2 started two at once: they queued
