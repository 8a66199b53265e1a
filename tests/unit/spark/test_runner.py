"""hvdkeras.spark.runner's checks before a Spark job starts (a Spark context stood in by its three attributes)."""
import sys
import types

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark.runner import check_cluster, check_rank_python, rank_python, task_slots


def context(master="local[2]", parallelism=2, python=sys.executable):
    return types.SimpleNamespace(master=master, defaultParallelism=parallelism, pythonExec=python)


def test_ranks_fit_the_slots_and_this_python():
    assert task_slots(context()) == 2
    check_cluster(context(), 2)


DRIVER = {"python": "/venv/bin/python", "python_version": "3.11", "horovod": "0.28.1", "tensorflow": "2.21.0",
          "hvdkeras": "0.9.0"}


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
    monkeypatch.setattr(runner, "_SLOTS_SEEN", {})  # each test's contexts are new applications
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


def test_the_ranks_run_the_executors_python():
    found = dict(DRIVER, python="/opt/image/bin/python3")
    assert rank_python("python3", found) == "/opt/image/bin/python3"  # the bare name, as an executor resolved it
    assert rank_python("/opt/image/bin/python3", found) == "/opt/image/bin/python3"
    # a shipped environment (spark.archives) is unpacked in each task's folder: the relative path works on each
    assert rank_python("./environment/bin/python", found) == "./environment/bin/python"


def test_a_fit_after_an_executor_was_lost_waits_for_its_replacement_past_the_registration_time(clock):
    # Two slots seen by a first fit, long after the start; then an executor is lost and its replacement registers
    # 5 s into the next fit's check
    lost = {}
    sc = cluster(clock, lambda since: 1 if lost and clock.now < lost["at"] + 5 else 2, started_ago=60)
    assert task_slots(sc) == 2
    lost["at"] = clock.now
    check_cluster(sc, 2)  # not refused: it waited for the replacement
    assert 5 <= clock.now - lost["at"] < 5.5


def test_an_executor_lost_and_not_replaced_is_one_line_naming_it(clock):
    lost = {}
    sc = cluster(clock, lambda since: 1 if lost else 2, started_ago=60)
    assert task_slots(sc) == 2
    lost["at"] = clock.now
    with pytest.raises(SetupError) as err:
        check_cluster(sc, 2)
    assert str(err.value) == ("num_proc=2 ranks need 2 Spark task slots at once, but 1 are registered, where this"
                              " application had 2: an executor was lost and not replaced within 10 s (master"
                              " spark://master:7077); check the cluster manager's workers (their logs say why the"
                              " executor ended), then fit again")
    assert 10 <= clock.now - lost["at"] < 10.5


def test_without_a_sparkcontext_the_line_says_whether_a_connect_session_is_there_and_how_to_pass_it(monkeypatch):
    import pyspark

    from hvdkeras.common.errors import SetupError
    from hvdkeras.spark import runner

    monkeypatch.setattr(pyspark.SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(runner, "_active_connect_session", lambda: None)
    with pytest.raises(SetupError, match=r"^hvdkeras.spark.run needs a running SparkSession: create one first"):
        runner.spark_context()
    monkeypatch.setattr(runner, "_active_connect_session", lambda: object())
    with pytest.raises(SetupError) as error:
        runner.spark_context()
    assert str(error.value) == ("the active SparkSession is a Spark Connect one, which has no SparkContext: pass it"
                                " on, as hvdkeras.spark.run(..., num_proc=N, session=spark) or"
                                " SparkBackend(num_proc=N, session=spark); fit(df) on its DataFrame needs neither")


class _ProbedContext:
    """A SparkContext whose one probe task answers ``answer``, or raises it when it is an exception."""

    master, pythonExec = "local[2]", "/venv/bin/python3"  # noqa: N815 (SparkContext's own name)

    def __init__(self, answer, app):
        self.answer, self.applicationId = answer, app

    def parallelize(self, data, slices):
        return self

    def mapPartitions(self, fn):
        return self

    def collect(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return [self.answer]


def test_an_executors_python_that_cannot_start_or_differs_is_one_line_naming_the_fix():
    import sys

    from hvdkeras.common.errors import SetupError
    from hvdkeras.spark import runner

    local = f"PYSPARK_PYTHON={sys.executable} before the SparkSession starts"
    failing = _ProbedContext(RuntimeError("py4j...\njava.io.IOException: Cannot run program \"/venv/bin/python3\""),
                             "app-cannot")
    with pytest.raises(SetupError) as error:
        runner.check_executors(failing)
    assert str(error.value) == ("Spark's executors could not run /venv/bin/python3 (java.io.IOException: Cannot run"
                                f" program \"/venv/bin/python3\"): set {local}, or ship this environment with"
                                " spark.archives (docs/spark-cluster.md)")
    driver = next(runner.python_probe()(None))
    other = dict(driver, python="/other/python", horovod=None)
    with pytest.raises(SetupError) as error:
        runner.check_executors(_ProbedContext(other, "app-other"))
    assert str(error.value) == ("Spark's executors run /other/python, which lacks horovod: set"
                                f" {local}, or ship this environment with spark.archives (docs/spark-cluster.md)")
    assert runner.check_executors(_ProbedContext(driver, "app-same")) == driver
    assert runner.check_executors(_ProbedContext(RuntimeError("not asked again"), "app-same")) == driver


class _TaskContext:
    """A SparkContext whose one task runs its function here, in this process (an executor's stand-in)."""

    def parallelize(self, data, slices):
        self.data = data
        return self

    def map(self, fn):
        self.fn = fn
        return self

    def collect(self):
        return [self.fn(x) for x in self.data]


def test_a_ranks_python_an_executor_cannot_start_is_refused_before_the_fit_prepares_its_data(tmp_path):
    check_rank_python(_TaskContext(), sys.executable)
    check_rank_python(_TaskContext(), "sh")  # a name on the executor's PATH
    missing = str(tmp_path / "env" / "bin" / "python")
    with pytest.raises(SetupError) as error:
        check_rank_python(_TaskContext(), missing)
    assert str(error.value) == (f"cannot start the rank's Python {missing!r} on this executor (No such file or"
                                " directory): pass SparkBackend(executable=...) a Python every executor has, or leave"
                                " it unset to run the task's own")
    plain = tmp_path / "python"
    plain.write_text("")  # there, but no program
    with pytest.raises(SetupError, match=r"\(Permission denied\)"):
        check_rank_python(_TaskContext(), str(plain))
    with pytest.raises(SetupError, match=r"\(No such file or directory\)"):
        check_rank_python(_TaskContext(), "/opt/env/bin/py\0thon")  # a hostile name: one line, no traceback
