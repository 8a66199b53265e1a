"""hvdkeras.spark.gang: the ranks' places from their tasks' hosts, and Horovod's settings for each rank."""
import time

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.spark import gang


def test_ranks_are_grouped_by_host_in_the_order_the_hosts_first_appear_as_horovodrun_places_them():
    plan = gang.slot_plan(["b", "a", "b", "a", "c"])
    assert [s.rank for s in plan] == [0, 2, 1, 3, 4]  # b's tasks 0 and 2 take ranks 0 and 1
    assert [s.local_rank for s in plan] == [0, 0, 1, 1, 0]
    assert [s.local_size for s in plan] == [2, 2, 2, 2, 1]
    # cross ranks: the hosts with a rank at that local rank, in host order (b, a, c for 0; b, a for 1)
    assert [(s.cross_rank, s.cross_size) for s in plan] == [(0, 3), (1, 3), (0, 2), (1, 2), (2, 3)]
    assert {s.size for s in plan} == {5}


def test_every_task_on_one_host_keeps_its_task_order():
    plan = gang.slot_plan(["h"] * 3)
    assert [(s.rank, s.local_rank, s.cross_rank, s.cross_size) for s in plan] == [(0, 0, 0, 1), (1, 1, 0, 1),
                                                                                  (2, 2, 0, 1)]


def test_a_ranks_environment_names_its_place_the_rendezvous_and_gloo():
    (slot,) = gang.slot_plan(["10.0.0.1"])
    env = gang.rank_environment(slot, ("10.0.0.1", 4242), "eth1")
    assert env["HOROVOD_RANK"] == "0" and env["HOROVOD_SIZE"] == "1" and env["HOROVOD_HOSTNAME"] == "10.0.0.1"
    assert (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("10.0.0.1", "4242")
    assert env["HOROVOD_CONTROLLER"] == env["HOROVOD_CPU_OPERATIONS"] == "gloo"
    assert env["HOROVOD_GLOO_IFACE"] == env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert "HOROVOD_GLOO_IFACE" not in gang.rank_environment(slot, ("10.0.0.1", 4242), None)
    assert "HOROVOD_GLOO_RENDEZVOUS_SECRET" not in env
    secret = gang.rendezvous_secret("the fit's relay token")
    assert len(secret) == 64 and secret != gang.rendezvous_secret("another fit's")
    assert gang.rank_environment(slot, ("10.0.0.1", 4242), None, secret)["HOROVOD_GLOO_RENDEZVOUS_SECRET"] == secret


def test_the_interface_of_an_address_is_the_one_holding_it():
    assert gang.interface_of("127.0.0.1") == "lo"
    assert gang.interface_of("127.0.0.1", nics=["eth9"]) is None
    assert gang.interface_of("no-such-host.invalid") is None


def test_the_reason_of_a_failed_job_is_the_marked_line():
    error = RuntimeError(f"Job aborted\nTraceback ...\nRuntimeError: {gang.FAILED}: rank 1 on h exited with status 9\n")
    assert gang._marked(error, gang.FAILED) == f"{gang.FAILED}: rank 1 on h exited with status 9"
    assert gang._marked(error, gang.GAVE_UP) is None


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
        gang.run_gang(sc, print, (), {}, 2, {}, start_timeout=10)
    assert str(error.value) == ("hvdkeras.spark.run starts its ranks as one Spark barrier stage, which Spark refuses"
                                " with dynamic allocation: set spark.dynamicAllocation.enabled=false for this"
                                " application")


def test_a_gang_none_of_whose_tasks_runs_within_the_start_timeout_is_cancelled(monkeypatch):
    monkeypatch.setattr(gang, "WATCH_INTERVAL_S", 0.05)
    sc = _Context()
    watch = gang._StartWatch(sc, "group-1", timeout_s=0.2)
    deadline = time.time() + 5
    while not watch.fired and time.time() < deadline:
        time.sleep(0.05)
    watch.stop()
    assert watch.fired and sc.cancelled == ["group-1"]


def test_a_ranks_python_that_cannot_start_is_one_line_naming_it_and_the_fix(tmp_path):
    missing = str(tmp_path / "no-such" / "python")
    proc, line = gang.start_rank(missing, str(tmp_path / "payload"), str(tmp_path / "result"), {})
    assert proc is None
    assert line == (f"cannot start the rank's Python {missing!r} on this executor (No such file or"
                    " directory): pass SparkBackend(executable=...) a Python every executor has, or leave it unset to"
                    " run the task's own")
