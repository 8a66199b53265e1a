"""hvdkeras.ray.cluster and hvdkeras.launch.ray: what a Ray job asks for, and each refusal in one line (no cluster)."""
import socket
import sys
import types

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.launch.ray import request, shortfall
from hvdkeras.ray import cluster


def node(cpus, gpus=0, alive=True):
    resources = {"CPU": float(cpus)}
    if gpus:
        resources["GPU"] = float(gpus)
    return {"Alive": alive, "Resources": resources}


def test_horovods_two_placements_become_one_placement_group():
    packed = request(3, None, 1, 2, False, None)
    assert packed.strategy == "PACK" and packed.bundles == [{"CPU": 2.0}] * 3 and packed.num_workers == 3
    spread = request(None, 2, 4, 1, True, None)
    assert spread.strategy == "STRICT_SPREAD" and spread.bundles == [{"CPU": 4.0, "GPU": 4.0}] * 2
    assert spread.num_workers == 8
    assert spread.describe() == ("8 workers of 1 CPU and 1 GPU each on 2 distinct nodes, 4 per node (one placement"
                                 " group, strategy STRICT_SPREAD)")


@pytest.mark.parametrize("args, says", [
    ((None, None, 1, 1, False, None), r"^pass num_workers, or num_hosts with num_workers_per_host, not both or"),
    ((2, 2, 1, 1, False, None), r"not both or neither \(Received: num_workers=2, num_hosts=2\)"),
    ((0, None, 1, 1, False, None), r"^num_workers must be positive \(Received: num_workers=0\)$"),
    ((2, None, 1, 1, False, 1), r"^gpus_per_worker=1 asks for GPUs, but use_gpu=False: pass use_gpu=True$"),
])
def test_arguments_that_name_no_job_are_one_line(args, says):
    with pytest.raises(SetupError, match=says):
        request(*args)


def test_a_cluster_that_can_never_hold_the_job_is_named_before_ray_waits_forever():
    nodes = [node(2), node(2), node(8, alive=False)]
    assert shortfall(request(4, None, 1, 1, False, None), nodes) is None
    assert shortfall(request(5, None, 1, 1, False, None), nodes) == (
        "the job asks for 5 CPUs in all and the cluster's 2 alive node(s) have 4")
    assert shortfall(request(1, None, 1, 1, True, None), nodes) == (
        "the job asks for 1 GPUs in all and the cluster's 2 alive node(s) have 0")
    assert shortfall(request(None, 2, 2, 1, False, None), nodes) is None
    assert shortfall(request(None, 3, 1, 1, False, None), nodes) == (
        "the job asks for 3 distinct nodes with 1 CPU each, and the cluster has 2")


def test_ray_missing_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SetupError, match=r"^hvdkeras.ray needs Ray, which this Python lacks .*'hvdkeras\[ray\]'"):
        cluster.import_ray()


def test_an_address_that_does_not_answer_is_one_line_within_the_timeout():
    pytest.importorskip("ray")
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SetupError, match=rf"^the Ray cluster at 127.0.0.1:{port} does not answer \(.*\): start it"):
        cluster.connect(f"127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(SetupError, match=r"it is not host:port \(Received: address='nowhere'\)"):
        cluster.connect("nowhere", timeout_s=2)


def test_an_address_that_never_answers_is_named_with_the_timeout(monkeypatch):
    def silent(address, timeout):
        assert timeout == 3
        raise socket.timeout("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    assert cluster._answers("10.0.0.9:6379", 3) == "no answer within 3 s"


def test_leave_lets_the_forwarded_output_arrive_then_disconnects_once(monkeypatch):
    calls = []
    joined = types.SimpleNamespace(is_initialized=lambda: not calls, shutdown=lambda: calls.append("shutdown"))
    monkeypatch.setattr(cluster, "import_ray", lambda: joined)
    cluster.leave(drain_s=0.0)
    cluster.leave(drain_s=0.0)  # not joined any more: nothing to do
    assert calls == ["shutdown"]


def _refused_by_token():
    """Ray 2.60's error for a driver without the cluster's token, as ``ray.init`` raises it (seen on the lab's
    cluster with ``RAY_AUTH_MODE=token``): a ConnectionError raised from a RuntimeError quoting the
    AuthenticationError."""
    try:
        try:
            raise RuntimeError("Failed to connect to GCS. Last connection error: Traceback (most recent call last):\n"
                               "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token"
                               " is missing or incorrect. Note: RAY_AUTH_MODE is currently 'disabled' (not 'token').")
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.2:6379") from inner
    except ConnectionError as outer:
        return outer


def test_a_cluster_that_refuses_the_drivers_token_is_one_line_naming_ray_s_variables(monkeypatch):
    def init(**kwargs):
        raise _refused_by_token()

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setattr(cluster, "import_ray", lambda: fake)
    monkeypatch.setattr(cluster, "_answers", lambda address, timeout_s: None)
    with pytest.raises(SetupError, match=r"^the Ray cluster at 10.0.0.2:6379 refused this driver's token .*"
                                         r"RAY_AUTH_MODE=token, and the token in ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH"
                                         ):
        cluster.connect("10.0.0.2:6379")
    assert cluster.refused_token(_refused_by_token())
    assert not cluster.refused_token(ConnectionError("Failed to connect to Ray cluster at 10.0.0.2:6379"))
