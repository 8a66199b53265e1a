"""hvdkeras.spark.gang: the Spark adapter of the launch core: its refusals, its start watch, a rank not started."""
import time

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark import gang


def test_the_reason_of_a_failed_job_is_the_carried_failure_and_sparks_refusal_is_read_from_its_text():
    from hvdkeras.engines import failures

    carried = failures.carried(failures.RankExitedError("rank 1 on h exited with status 9"))
    error = RuntimeError(f"Job aborted\nTraceback ...\nRuntimeError: {carried}\n")
    assert str(failures.received(error)) == "rank 1 on h exited with status 9"
    refusal = RuntimeError("py4j ...\norg.apache.spark.SparkException: [SPARK-24819]: Barrier execution mode does"
                           " not allow run a barrier stage that requires more slots\n")
    assert gang._spark_refusal(refusal).startswith("Barrier execution mode does not allow")
    assert gang._spark_refusal(error) is None


class _Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


class _Tracker:
    def getJobIdsForGroup(self, group):
        return [7]

    def getJobInfo(self, job):
        return type("JobInfo", (), {"stageIds": [3]})()

    def getStageInfo(self, stage):
        return type("StageInfo", (), {"numActiveTasks": 0})()  # nothing of the gang ever runs


class _Context:
    def __init__(self, conf=None):
        self.conf, self.cancelled = _Conf(conf or {}), []

    def getConf(self):
        return self.conf

    def statusTracker(self):
        return _Tracker()

    def cancelJobGroup(self, group):
        self.cancelled.append(group)


def test_dynamic_allocation_which_spark_refuses_for_a_barrier_stage_is_one_line_before_anything_runs():
    sc = _Context({"spark.dynamicAllocation.enabled": "true"})
    with pytest.raises(SetupError) as error:
        gang.run_gang(gang.ClassicStage(sc), print, (), {}, 2, {}, start_timeout=10)
    assert str(error.value) == ("hvdkeras.spark.run starts its ranks as one Spark barrier stage, which Spark refuses"
                                " with dynamic allocation: set spark.dynamicAllocation.enabled=false for this"
                                " application")


def _until_fired(watch):
    """Waits (5 s at most) for ``watch`` to fire, then stops it."""
    deadline = time.time() + 5
    while not watch.fired and time.time() < deadline:
        time.sleep(0.05)
    watch.stop()


def test_a_gang_none_of_whose_tasks_runs_within_the_start_timeout_is_cancelled(monkeypatch):
    monkeypatch.setattr(gang, "WATCH_INTERVAL_S", 0.05)
    sc = _Context()
    stage = gang.ClassicStage(sc)
    watch = gang._StartWatch(gang._running(stage, "group-1", None), lambda: stage.cancel("group-1"), timeout_s=0.2)
    _until_fired(watch)
    assert watch.fired and sc.cancelled == ["group-1"]


class _Relay:
    connections = 3  # the tasks of earlier submissions


class _Session:
    def __init__(self):
        self.interrupted = []

    def interruptTag(self, tag):
        self.interrupted.append(tag)


def test_through_spark_connect_a_gang_none_of_whose_tasks_reaches_the_driver_is_interrupted(monkeypatch):
    # A Connect client sees no tasks: a submission none of whose tasks has reached the relay is not running.
    from hvdkeras.spark.common.connect import ConnectStage

    monkeypatch.setattr(gang, "WATCH_INTERVAL_S", 0.05)
    spark, relay = _Session(), _Relay()
    stage = ConnectStage(spark)
    running = gang._running(stage, "tag-1", relay)
    assert not running()
    relay.connections = 4
    assert running()
    relay.connections = 3
    watch = gang._StartWatch(gang._running(stage, "tag-1", relay), lambda: stage.cancel("tag-1"), timeout_s=0.2)
    _until_fired(watch)
    assert watch.fired and spark.interrupted == ["tag-1"]


def test_a_ranks_python_that_cannot_start_is_one_line_naming_it_and_the_fix(tmp_path):
    missing = str(tmp_path / "no-such" / "python")
    proc, line = gang.start_rank(missing, str(tmp_path / "payload"), str(tmp_path / "result"), {})
    assert proc is None
    assert line == (f"cannot start the rank's Python {missing!r} on this executor (No such file or"
                    " directory): pass SparkBackend(executable=...) a Python every executor has, or leave it unset to"
                    " run the task's own")
