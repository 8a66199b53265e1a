"""hvdkeras.spark's KerasEstimator with its store on S3 (moto's S3 server on loopback), on local[2], on each stack.

The test starts the server on a free port of 127.0.0.1 and stops it whatever happens; one driver
(tests/distributed/scripts/spark_s3_check.py) fits, is killed, resumes from the bucket, transforms, saves and
loads at an s3:// path, and prints what it saw. Nothing of the S3 path differs between the stacks but Keras.
"""
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from hvdkeras.common.processes import kill_tree
from tests.harness.ranks import SCRIPTS, launch, results
from tests.harness.stacks import once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytest.importorskip("s3fs", reason="s3fs is not installed (make install pins it)")
pytest.importorskip("moto.server", reason="moto[server] is not installed (make install pins it)")
# The store's code (fsspec, the Parquet writer, the checkpoint mirror) is the same Python on both stacks, and the
# model's bytes are what the local store holds too: keras3 passes it by hand (HVDKERAS_ONCE_TESTS=all).
pytestmark = once_per_make_test("the estimator's store on S3 (moto's server on loopback)", 2.5, stack="keras2")
CHECK = os.path.join(SCRIPTS, "spark_s3_check.py")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's S3 server on 127.0.0.1, up until the module's tests end (stopped whatever happens)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto's S3 server did not start on {endpoint} (exit status {server.poll()})")
                time.sleep(0.2)
        yield endpoint
    finally:
        kill_tree(server.pid)
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def checked(s3_endpoint, tmp_path_factory):
    work = tmp_path_factory.mktemp("spark_s3")
    (result,) = results(launch([sys.executable, CHECK, s3_endpoint, str(work)], timeout=300))
    print("spark_s3_check.py's laps (s):", result["seconds"])
    return result


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
