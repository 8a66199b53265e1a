"""hvdkeras.spark on a real Spark (local[2]): Horovod's KerasEstimator API trained through hvdkeras's core.

One driver per stack (tests/distributed/scripts/spark_estimator_check.py) runs every check on one
SparkSession, and the tests below assert on its result: ``core`` on both stacks, ``full`` (also the
resume after a killed rank, and ``num_proc`` above the slots) once per ``make test``.
"""
import os
import sys

import pytest

from tests.harness.ranks import SCRIPTS, launch, results
from tests.harness.stacks import current_stack

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
CHECK = os.path.join(SCRIPTS, "spark_estimator_check.py")
FULL_STACK = "keras3"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    mode = "full" if current_stack() == FULL_STACK or os.environ.get("HVDKERAS_ONCE_TESTS") == "all" else "core"
    store = tmp_path_factory.mktemp("spark_store")
    (result,) = results(launch([sys.executable, CHECK, str(store), mode], timeout=600))
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


def test_a_killed_rank_ends_fit_in_one_line_and_the_next_fit_resumes(checked):
    if "resume" not in checked:
        pytest.skip(f"runs once per make test, on {FULL_STACK} (HVDKERAS_ONCE_TESTS=all runs it here too)")
    killed = checked["killed"]
    assert killed["error"].startswith("fit stopped: a rank failed ("), killed
    assert "fit again with run_id='killed' to resume there" in killed["error"] and "\n" not in killed["error"]
    assert killed["checkpoints"] == ["epoch-0001"]  # written before the kill, in epoch 2, and kept
    assert killed["seconds"] < 120, killed  # no hang: Spark's barrier would wait for ever
    # the second fit restores epoch 1 and trains epochs 2 and 3: three epochs of history in all
    assert checked["resume"] == {"epochs": 3, "checkpoints": ["epoch-0002", "epoch-0003"]}


def test_more_ranks_than_task_slots_is_one_line_at_once(checked):
    if "too_many" not in checked:
        pytest.skip(f"runs once per make test, on {FULL_STACK} (HVDKERAS_ONCE_TESTS=all runs it here too)")
    # hvdkeras.spark.run's ranks in rank order: test_spark_cluster.py, on two hosts
    assert checked["too_many"] == ("num_proc=3 ranks need 3 Spark task slots at once, but this Spark has 2 (master"
                                   " local[2]); lower num_proc to 2 or give Spark more cores")
