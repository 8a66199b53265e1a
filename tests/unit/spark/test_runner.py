"""hvdkeras.spark.runner's checks before a Spark job starts (a Spark context stood in by its three attributes)."""
import sys
import types

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.runner import check_cluster, task_slots


def context(master="local[2]", parallelism=2, python=sys.executable):
    return types.SimpleNamespace(master=master, defaultParallelism=parallelism, pythonExec=python)


def test_ranks_fit_the_slots_and_this_python():
    assert task_slots(context()) == 2
    check_cluster(context(), 2)


def test_a_local_master_whose_executors_run_another_python_is_one_line():
    with pytest.raises(SetupError, match=r"Spark's executors run /usr/bin/python3, not this Python .*: set"
                                         r" PYSPARK_PYTHON=.* before the SparkSession starts"):
        check_cluster(context(python="/usr/bin/python3"), 2)
    check_cluster(context(master="spark://master:7077", python="/opt/venv/bin/python"), 2)  # a cluster's own path


def test_more_ranks_than_slots_is_one_line():
    with pytest.raises(SetupError, match=r"^num_proc=4 ranks need 4 Spark task slots at once, but this Spark has 2"):
        check_cluster(context(), 4)


# ------------------------------------------------------------------ a cluster master: the registered executors' slots


class _Clock:
    """Stands in for the runner's ``time``: ``sleep`` advances ``time``, and each poll may register executors."""

    def __init__(self, now=1000.0):
        self.now = now

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def cluster(clock, registered, cores_max=None, wait="10s", started_ago=0.0, master="spark://master:7077"):
    """A cluster's context whose executors' slots are ``registered(seconds since its start)``."""
    class Jvm:
        def maxNumConcurrentTasks(self, profile):
            assert profile == "default profile"
            return registered(clock.now - started)

        def resourceProfileManager(self):
            return types.SimpleNamespace(defaultResourceProfile=lambda: "default profile")

        def conf(self):
            def get_time_as_ms(key, default):
                assert (key, default) == ("spark.scheduler.maxRegisteredResourcesWaitingTime", "30s")
                return float(wait.rstrip("s")) * 1000

            return types.SimpleNamespace(getTimeAsMs=get_time_as_ms)

    started = clock.now - started_ago
    conf = {"spark.cores.max": cores_max} if cores_max else {}
    return types.SimpleNamespace(master=master, defaultParallelism=2, pythonExec="/opt/venv/bin/python",
                                 startTime=started * 1000, _jsc=types.SimpleNamespace(sc=Jvm),
                                 getConf=lambda: types.SimpleNamespace(get=lambda k, d=None: conf.get(k, d)))


@pytest.fixture
def clock(monkeypatch):
    from hvdkeras.spark import runner

    fake = _Clock()
    monkeypatch.setattr(runner, "time", fake)
    return fake


def test_a_clusters_slots_are_its_registered_executors_once_they_have_registered(clock):
    # spark.default.parallelism says 2 before any executor registered: 4 ranks on 4 slots must not be refused
    sc = cluster(clock, lambda s: 0 if s < 3 else 4)
    check_cluster(sc, 4)
    assert 3 <= clock.now - 1000 < 4  # waited for them, not for Spark's whole registration time
    assert task_slots(cluster(clock, lambda s: 1, started_ago=60)) == 1  # a 1-slot cluster is 1, not 2


def test_more_ranks_than_a_clusters_registered_slots_is_one_line_after_the_registration_time(clock):
    sc = cluster(clock, lambda s: 2, started_ago=4)
    with pytest.raises(SetupError) as err:
        check_cluster(sc, 3)
    assert str(err.value) == ("num_proc=3 ranks need 3 Spark task slots at once, but the executors registered within"
                              " 10 s of the SparkContext's start have 2 (master spark://master:7077); lower num_proc"
                              " to 2 or give Spark more cores")
    assert 6 <= clock.now - 1000 < 6.5  # until 10 s after the start, not longer


def test_spark_cores_max_below_the_ranks_is_one_line_at_once(clock):
    with pytest.raises(SetupError, match=r"^num_proc=3 ranks need 3 Spark task slots at once, but spark.cores.max"
                                         r" gives this application at most 2 \(master spark://master:7077\); lower"
                                         r" num_proc to 2 or raise spark.cores.max$"):
        check_cluster(cluster(clock, lambda s: 2, cores_max="2"), 3)
    assert clock.now == 1000


def test_a_cluster_without_executors_is_one_line_naming_the_workers(clock):
    with pytest.raises(SetupError, match=r"registered within 10 s of the SparkContext's start have 0 .*; check that"
                                         r" the master has workers with free cores and that they reach this driver$"):
        check_cluster(cluster(clock, lambda s: 0), 1)
