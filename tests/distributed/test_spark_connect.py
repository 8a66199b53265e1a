"""The Spark estimator through Spark Connect: ``SparkSession.builder.remote("local[2]")``, pyspark's own local server.

``scripts/spark_connect_check.py`` runs as a user's script, with the classic ``SparkContext`` that the local server
keeps in the same process hidden, as a remote client has none. The ranks start as a barrier ``mapInPandas``, the
Parquet is written by ``mapInArrow``, and the model reaches ``transform``'s tasks inside its function. On keras3,
which has Connect's client (pyspark 4 with grpcio).
"""
import os
import sys

import pytest

from tests.harness.ranks import launch, results

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")
pytest.importorskip("pyspark.sql.connect.session",
                    reason="Spark Connect's client (pyspark[connect]) is installed on the keras3 stack only")

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "spark_connect_check.py")


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    work = str(tmp_path_factory.mktemp("connect"))
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    (result,) = results(launch([sys.executable, SCRIPT, work], env=env, timeout=600, cwd=work))
    return result


def test_the_session_is_a_connect_client(connect):
    assert connect["client"] == "pyspark.sql.connect.session"


def test_a_fit_through_connect_whose_rank_exits_starts_again_and_resumes_at_the_lost_epoch(connect):
    # rank 1 exits in epoch 1 of the first attempt: the retry resumes from epoch 0's checkpoint
    assert connect["epochs_begun"] == [0, 1, 1, 2], connect
    assert connect["history_epochs"] == 3


def test_transform_and_a_saved_and_loaded_model_predict_as_the_model_does(connect):
    assert connect["columns"] == ["features", "label", "label__output"]
    assert connect["transform_vs_predict"] <= 1e-6
    assert connect["loaded_vs_predict"] <= 1e-6


def test_what_connect_cannot_do_is_one_line_naming_the_fix(connect):
    assert connect["no_num_proc"] == ("through Spark Connect, give num_proc (KerasEstimator(num_proc=...) or"
                                      " SparkBackend(num_proc=...)): a Connect client cannot count the executors'"
                                      " task slots")
    assert connect["mpi"] == ("use_mpi=True starts the ranks through Horovod's runner from the driver's"
                              " SparkContext, which a Spark Connect session has not: leave use_mpi unset (Gloo)")
    assert connect["no_session"].startswith("the active SparkSession is a Spark Connect one, which has no"
                                            " SparkContext: pass it on, as hvdkeras.spark.run(")
