"""hvdkeras.spark on a real Spark (local[2]): Horovod's KerasEstimator API trained through hvdkeras's core.

The checks (tests/distributed/scripts/spark_estimator_check.py) run in the local[2] driver this stack's Spark
tests share (the ``spark_local`` fixture, tests/harness/spark_driver.py), and the tests below assert on its result
(tests/harness/spark_checks.py). keras2 runs them; keras3 runs its Spark fits on the standalone cluster of the two
emulated hosts (test_spark_cluster.py, once per ``make test``), where an executor and a rank are killed mid-``fit``.
"""
import pytest

from tests.harness import spark_checks
from tests.harness.stacks import ONCE_ENV, once_here

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytestmark = pytest.mark.skipif(
    not once_here("keras2"),
    reason="the KerasEstimator on local[2]: on the keras2 stack; keras3 runs the same checks on the standalone cluster"
           f" (test_spark_cluster.py), which keeps each stack's Spark tests within 3 minutes ({ONCE_ENV}=all runs"
           " them here too)")
# the parts of the shared driver these tests need
SPARK_LOCAL = {"estimator": once_here("keras2"), "quick_start": once_here("keras2")}


@pytest.fixture(scope="module")
def checked(spark_local):
    return spark_local["estimator"]


def test_fit_trains_on_two_ranks_like_one_process_on_the_global_batch(checked):
    spark_checks.assert_fit(checked["fit"])


def test_transform_adds_the_output_column_and_predicts(checked):
    spark_checks.assert_transform(checked["transform"])


def test_model_saves_and_loads_alone_and_in_a_pipeline(checked):
    spark_checks.assert_persist(checked["persist"])


def test_bad_input_is_one_line(checked):
    spark_checks.assert_errors(checked["errors"])


def test_bad_input_is_refused_before_anything_is_written(checked):
    spark_checks.assert_checked_early(checked)


def test_more_ranks_than_task_slots_is_one_line_at_once(checked):
    # hvdkeras.spark.run's ranks in rank order: test_spark_cluster.py, on two hosts
    assert checked["too_many"] == ("num_proc=3 ranks need 3 Spark task slots at once, but this Spark has 2 (master"
                                   " local[2]); lower num_proc to 2 or give Spark more cores")


def test_no_rank_sees_a_secret_of_the_drivers_environment_but_its_own_settings(checked):
    # the driver's whole environment went to every rank in Spark's task messages; now an allow-list does
    assert checked["environment"] == [{"unrelated": None, "aws": None, "rank": str(rank), "path": True}
                                      for rank in range(2)]


def test_the_quick_start_fits_transforms_saves_and_loads(spark_local):
    # docs/spark.md's quick start, examples/spark/keras_spark_digits.py's quick_start, in the shared driver's session
    quick = spark_local["quick_start"]
    assert quick["rows"] > 100 and quick["accuracy"] > 0.5, quick  # 3 epochs of the digits give about 0.9
    assert quick["loaded"] == "KerasModel" and quick["outputs"] == ["label_prob"], quick
    assert "metadata" in quick["saved"], quick
