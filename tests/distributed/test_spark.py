"""hvdkeras.spark on a real Spark (local[2]): Horovod's KerasEstimator API trained through hvdkeras's core.

One driver per stack (tests/distributed/scripts/spark_estimator_check.py) runs every check on one
SparkSession, and the tests below assert on its result. A rank killed in the middle of ``fit``, and the
resume, are test_spark_cluster.py's, on two hosts.
"""
import os
import sys

import pytest

from tests.harness.ranks import SCRIPTS, launch, results

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
CHECK = os.path.join(SCRIPTS, "spark_estimator_check.py")


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    store = tmp_path_factory.mktemp("spark_store")
    (result,) = results(launch([sys.executable, CHECK, str(store)], timeout=600))
    return result


def test_fit_trains_on_two_ranks_like_one_process_on_the_global_batch(checked):
    fit = checked["fit"]
    assert fit["history_keys"] == ["accuracy", "loss", "lr", "val_accuracy", "val_loss"]
    assert fit["epochs"] == 2
    assert fit["checkpoints"] == ["epoch-0001", "epoch-0002"]  # rank 0's checkpoints, in the store's run
    assert fit["single"] < 1e-5, fit  # the ranks' weights = one process stepping on their global batches


def test_transform_adds_the_output_column_and_predicts(checked):
    transform = checked["transform"]
    assert transform["columns"] == ["features", "extra", "label", "id", "label_prob"]
    assert transform["rows"] == 256
    assert transform["accuracy"] > 0.4  # four classes; chance is 0.25


def test_model_saves_and_loads_alone_and_in_a_pipeline(checked):
    persist = checked["persist"]
    assert persist["loaded_same"] and persist["pipeline_same"]
    assert persist["output_cols"] == ["label_prob"] and persist["type"] == "KerasModel"
    assert persist["save_twice"].endswith("already holds a saved model; use model.write().overwrite().save(path)")


def test_bad_input_is_one_line(checked):
    errors = checked["errors"]
    assert errors["missing"].startswith("feature_cols names column 'pixels', which the DataFrame does not have")
    assert errors["string"].startswith("column 'name' holds string, which a Keras model cannot take")
    assert errors["empty"].startswith("the DataFrame has no rows to train on")
    assert errors["length"] == ("feature column 'extra' holds 3 values per row, but the model's input 'image' takes"
                                " shape (8, 8, 1) (64 values); reshape the column or the input")
    assert errors["unknown"].startswith("KerasEstimator has no parameter 'epoch' (Received: epoch=...)")
    assert errors["petastorm"] == ("KerasEstimator(reader_pool_type=...) has no meaning here: it is petastorm's;"
                                   " each rank reads its rows with pyarrow; remove it")
    assert all("\n" not in line for line in errors.values())


def test_more_ranks_than_task_slots_is_one_line_at_once(checked):
    # hvdkeras.spark.run's ranks in rank order: test_spark_cluster.py, on two hosts
    assert checked["too_many"] == ("num_proc=3 ranks need 3 Spark task slots at once, but this Spark has 2 (master"
                                   " local[2]); lower num_proc to 2 or give Spark more cores")
