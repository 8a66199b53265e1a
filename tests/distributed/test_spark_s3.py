"""hvdkeras.spark's KerasEstimator with its store on S3 (moto's S3 server on loopback), on local[2], on each stack.

The local[2] driver this stack's Spark tests share (the ``spark_local`` fixture, tests/harness/spark_driver.py)
starts the server on a free port of 127.0.0.1 and stops it whatever happens; its S3 part
(tests/distributed/scripts/spark_s3_check.py) fits, is killed, resumes from the bucket, transforms, saves and
loads at an s3:// path, and says what it saw. Nothing of the S3 path differs between the stacks but Keras.
"""
import pytest

from tests.harness.stacks import once_here, once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytest.importorskip("s3fs", reason="s3fs is not installed (make install pins it)")
pytest.importorskip("moto.server", reason="moto[server] is not installed (make install pins it)")
# The store's code (fsspec, the Parquet writer, the checkpoint mirror) is the same Python on both stacks, and the
# model's bytes are what the local store holds too: keras3 runs it, in its shared driver with Horovod's in-driver
# scenarios, which evens out the stacks' times; keras2 passes it by hand (HVDKERAS_ONCE_TESTS=all).
pytestmark = once_per_make_test("the estimator's store on S3 (moto's server on loopback)", 2.5, stack="keras3")
SPARK_LOCAL = {"s3": once_here("keras3")}  # the part of the shared driver these tests need


@pytest.fixture(scope="module")
def checked(spark_local):
    return spark_local["s3"]


def test_a_fit_whose_rank_is_killed_ends_in_one_line_with_its_checkpoint_in_the_bucket(checked):
    killed = checked["killed"]
    assert killed["error"] is not None and "\n" not in killed["error"], killed
    assert "run_id='killed'" in killed["error"], killed
    assert killed["checkpoints"] == ["epoch-0001"], killed  # published by rank 0 before rank 1 died


def test_the_next_fit_resumes_from_the_bucket(checked):
    resumed = checked["resumed"]
    trained = [tuple(line) for line in checked["epochs_trained"]]
    assert [e for tag, e in trained if tag == "second"] == ["1", "2"], trained  # epochs 2 and 3 only
    assert resumed["history_epochs"] == 3  # metrics.jsonl came back from the bucket and went on
    assert resumed["checkpoints"] == ["epoch-0002", "epoch-0003"], resumed  # keep=2, pruned after the publish
    assert sorted(resumed["run_files"]) == ["config.yaml", "job.json", "metrics.jsonl"], resumed


def test_transform_and_an_s3_saved_model_predict_the_same(checked):
    assert checked["transform"] == {"columns": ["features", "label", "id", "label_prob"], "rows": 192}
    persist = checked["persist"]
    assert persist["same"] and persist["output_cols"] == ["label_prob"], persist
    assert persist["objects"] == ["models/resumed/metadata", "models/resumed/model.keras"], persist


def test_no_secret_in_the_bucket_and_no_rank_folder_left_on_the_host(checked):
    secret = checked["secret"]
    assert secret["objects_checked"] > 10 and secret["holding_secret"] == [], secret
    assert secret["rank_dirs_left"] == 0, secret  # the killed fit's, removed by the next fit's ranks
