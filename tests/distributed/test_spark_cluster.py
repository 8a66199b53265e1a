"""hvdkeras.spark on a real standalone Spark cluster: a master and one worker on each of the two emulated hosts.

lab/spark.py builds it on lab/hosts.py's namespaces (the master at the launcher's address, one
1-core worker per host, executors running this venv's Python) and removes it again; the driver
(``scripts/spark_cluster_check.py``) runs at the launcher's address, as on a cluster's gateway.
Needs root; elsewhere the module is skipped with the reason.

The ``spark_cluster`` fixture is the cluster for the module; one driver runs every check on it (a driver's
session and its executors take 10-20 s to start): a quiet KerasEstimator fit whose ranks say where they ran and
which GPU Spark assigned them, the same fit retried after its executor and its rank are killed, the task slots,
the refused ``num_proc=3``.
"""
import os
import sys

import pytest

from lab import hosts as hosts_lib
from lab import spark as spark_lab
from tests.harness.ranks import SCRIPTS, launch, results
from tests.harness.stacks import once_per_make_test

pytest.importorskip("pyspark", reason="the [spark] extra is not installed (pip install hvdkeras[spark])")

# Spark's scheduling and Horovod's task services across hosts do not depend on the stack. The KerasEstimator's
# checks run here on keras3 and on local[2] on keras2 (test_spark.py), one driver each.
pytestmark = [once_per_make_test("the standalone Spark cluster on the two hosts", 2.5, stack="keras3"), pytest.mark.lab]

CHECK = os.path.join(SCRIPTS, "spark_cluster_check.py")


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """The cluster (``lab.spark.ClusterInfo``), both workers registered; afterwards no JVM, host or link is left."""
    ok, reason = spark_lab.can_run()
    if not ok:
        pytest.skip(f"the Spark cluster test needs network namespaces, Java and pyspark: {reason}")
    with spark_lab.running(tmp_path_factory.mktemp("spark_cluster")) as info:
        yield info
    assert spark_lab._daemon_pids() == []
    assert not hosts_lib.any_up()
    assert not os.path.exists(f"/sys/class/net/{hosts_lib.IFACE}")


@pytest.fixture(scope="module")
def check(spark_cluster):
    store = os.path.join(spark_cluster.folder, "store")  # on the filesystem both hosts share
    (report,) = results(launch([sys.executable, CHECK, store], env=spark_cluster.env(), timeout=600))
    print(f"\nthe driver's SparkSession started in {report['session_s']:.1f}s, num_proc=3 was refused after"
          f" {report['too_many']['seconds']:.1f}s")
    return report


def test_the_master_counts_both_workers_with_one_core_each(spark_cluster):
    state = spark_lab.master_state(spark_cluster)
    assert state["status"] == "ALIVE" and state["aliveworkers"] == 2 and state["cores"] == spark_cluster.slots == 2
    assert sorted(w["host"] for w in state["workers"]) == [h.addr for h in spark_cluster.hosts.hosts]


def test_two_ranks_in_rank_order_one_on_each_host(spark_cluster, check):
    assert check["master"] == spark_cluster.master_url
    ranks = check["ranks"]
    assert [(r["rank"], r["size"], r["local_rank"], r["sum"]) for r in ranks] == [(0, 2, 0, 1.0), (1, 2, 0, 1.0)]
    by_name = {h.name: h for h in spark_cluster.hosts.hosts}
    assert sorted(r["hostname"] for r in ranks) == sorted(by_name)  # one rank on each host, in either order
    for r in ranks:
        assert r["addr"] == by_name[r["hostname"]].addr  # the rank ran in that host's namespace
        assert r["netns"] != check["driver_netns"]
    assert ranks[0]["netns"] != ranks[1]["netns"]


def test_the_task_slots_are_the_registered_executors_cores(check):
    # What hvdkeras.spark counts through Spark's JVM (the executors' cores over spark.task.cpus), not
    # spark.default.parallelism, which is at least 2 whatever has registered.
    assert check["slots"]["after_run"] == {"default_parallelism": 2, "registered": 2}


def test_more_ranks_than_the_clusters_slots_is_one_line_at_once(spark_cluster, check):
    too_many = check["too_many"]
    assert too_many["error"] == ("num_proc=3 ranks need 3 Spark task slots at once, but spark.cores.max gives this"
                                 f" application at most 2 (master {spark_cluster.master_url}); lower num_proc to 2 or"
                                 " raise spark.cores.max")
    assert too_many["seconds"] < 3  # Horovod itself would wait start_timeout for the third task


def test_a_fit_that_may_retry_returns_after_its_executor_and_its_rank_are_killed_on_an_undisturbed_fits_weights(check):
    resumed = check["resumed"]
    assert resumed["killed"] == [True, True], resumed  # the executor JVM in epoch 2, rank 1 in epoch 3
    assert resumed["epochs"] == 3, resumed  # every epoch once in the history
    assert resumed["max_diff_from_quiet"] == 0.0, resumed  # bit for bit the fit that nobody disturbed
    assert resumed["checkpoints"] == ["epoch-0002", "epoch-0003"], resumed  # kept: 2
    assert check["transformed"] == 10  # the model it returned predicts
    print(f"\nthe fit retried after both kills took {resumed['seconds']:.1f}s")


def test_each_rank_uses_the_gpu_spark_assigned_its_task_and_use_gpu_false_uses_none(check):
    # lab/spark.py's workers announce stand-in GPUs through a discovery script: address 0 on one host, 1 on the other
    with_gpu, without = check["devices"]["use_gpu"], check["devices"]["no_gpu"]
    assert sorted(tuple(d["assigned"]) for d in with_gpu) == [("0",), ("1",)], with_gpu  # one each, not the same
    assert all(d["visible"] == d["assigned"][0] for d in with_gpu), with_gpu  # pinned by Spark's, not the local rank
    assert sorted(tuple(d["assigned"]) for d in without) == [("0",), ("1",)], without
    assert all(d["visible"] == "-1" for d in without), without  # use_gpu=False: no GPU, even one Spark assigned


def test_each_fit_removes_its_intermediate_parquet_unless_asked_to_keep_it(check):
    assert check["left"] == []  # the retried fit's; the quiet fit kept its own, as asked


def test_a_second_prepare_writes_the_same_rows_in_the_same_order_on_the_cluster(check):
    # the rows of a file come from two executors' shuffle blocks; a rank's epoch shuffle permutes them by position
    assert check["same_files"]
