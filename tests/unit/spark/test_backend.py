"""hvdkeras.spark.common.backend.SparkBackend: Horovod's arguments reach hvdkeras.spark.run, and the ranks' GPUs."""
import sys

import pytest

from hvdkeras.common.errors import RankFailedError
from hvdkeras.spark.common import backend as backend_lib


@pytest.fixture
def runs(monkeypatch):
    calls = []

    def run(fn, **kwargs):
        calls.append(kwargs)
        return ["done"]

    monkeypatch.setattr("hvdkeras.spark.runner.run", run)
    return calls


def test_horovods_arguments_reach_the_runner_with_horovods_meaning(runs):
    backend = backend_lib.SparkBackend(2, stdout=sys.stdout, stderr=sys.stderr, prefix_output_with_timestamp=True,
                                       start_timeout=30, verbose=2, nics=["lo"], use_mpi=False, use_gloo=True,
                                       executable="/opt/env/bin/python")
    assert backend.num_processes() == 2
    assert backend.run(print, args=(1,)) == ["done"]
    (call,) = runs
    assert call["stdout"] is sys.stdout and call["stderr"] is sys.stderr and call["prefix_output_with_timestamp"]
    assert (call["start_timeout"], call["verbose"], call["nics"], call["use_mpi"], call["use_gloo"]) == (
        30, 2, ["lo"], False, True)
    assert call["num_proc"] == 2 and call["args"] == (1,) and call["executable"] == "/opt/env/bin/python"


def test_an_argument_horovod_does_not_take_is_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'stdoutt'"):
        backend_lib.SparkBackend(2, stdoutt=sys.stdout)


def test_the_drivers_hidden_gpus_do_not_reach_the_ranks_but_use_gpu_false_does(runs, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # Horovod's examples hide the GPUs from the driver
    backend = backend_lib.SparkBackend(2)
    backend.run(print)
    assert "CUDA_VISIBLE_DEVICES" not in runs[-1]["env"]
    backend.run(print, env={"CUDA_VISIBLE_DEVICES": "-1"})  # what the estimator passes for use_gpu=False
    assert runs[-1]["env"]["CUDA_VISIBLE_DEVICES"] == "-1"


def test_the_ranks_get_the_drivers_allowed_variables_and_what_you_name_whole(runs, monkeypatch):
    monkeypatch.setenv("UNRELATED_API_TOKEN", "s3cr3t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-s3cr3t")
    monkeypatch.setenv("HOROVOD_LOG_LEVEL", "warning")
    backend_lib.SparkBackend(2).run(print)
    env = runs[-1]["env"]
    assert "UNRELATED_API_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert env["HOROVOD_LOG_LEVEL"] == "warning" and env["PATH"]
    backend_lib.SparkBackend(2, env={"UNRELATED_API_TOKEN": "named"}).run(print)  # named: it goes, alone
    assert runs[-1]["env"] == {"UNRELATED_API_TOKEN": "named"}


def test_spark_backend_hands_the_retries_to_the_runner_once(runs):
    backend = backend_lib.SparkBackend(2)
    assert backend_lib.run_retrying(backend, print, (1,), {"A": "1"}, 2, retry_hint=", from x") == ["done"]
    (call,) = runs  # the barrier stage retries inside the one call
    assert (call["max_retries"], call["retry_hint"], call["env"]["A"]) == (2, ", from x", "1")


class _HorovodsBackend:
    """A backend with Horovod's interface only (run, num_processes): the loop retries around its run."""

    def __init__(self, failures):
        self.failures, self.calls = failures, 0

    def run(self, fn, args=(), kwargs=None, env=None):
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"Horovod detected that one or more processes exited\nProcess name: {self.calls}")
        return [fn(*args)]

    def num_processes(self):
        return 1


def test_a_backend_with_horovods_interface_is_retried_around_its_run_with_one_warning_line_per_retry(capsys):
    backend = _HorovodsBackend(failures=2)
    assert backend_lib.run_retrying(backend, abs, (-3,), None, 2, retry_hint=", from run_id 'r'") == [3]
    assert backend.calls == 3
    err = capsys.readouterr().err
    assert err.count("starting the ranks again") == 2
    assert ("a rank failed (Horovod detected that one or more processes exited Process name: 2); starting the ranks"
            " again, retry 2 of 2, from run_id 'r'") in err


def test_the_last_failure_past_max_retries_is_raised_in_one_line():
    backend = _HorovodsBackend(failures=5)
    with pytest.raises(RankFailedError) as error:
        backend_lib.run_retrying(backend, abs, (-3,), None, 1)
    assert str(error.value) == "Horovod detected that one or more processes exited Process name: 2"
    assert backend.calls == 2


def test_check_asks_an_executor_for_the_ranks_python_only_when_one_is_given(monkeypatch):
    asked = []
    monkeypatch.setattr("hvdkeras.spark.runner.spark_context", lambda: "sc")
    monkeypatch.setattr("hvdkeras.spark.runner.check_cluster", lambda sc, n: None)
    monkeypatch.setattr("hvdkeras.spark.runner.check_executors", lambda sc: {})
    monkeypatch.setattr("hvdkeras.spark.runner.check_rank_python", lambda sc, python: asked.append((sc, python)))
    backend_lib.SparkBackend(2).check()
    assert asked == []
    backend_lib.SparkBackend(2, executable="/opt/env/bin/python").check()
    assert asked == [("sc", "/opt/env/bin/python")]
