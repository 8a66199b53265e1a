"""hvdkeras.ray.elastic_executor: the slots Horovod's elastic driver sees, each rank's environment, and the
arguments of Horovod's ElasticRayExecutor (without a cluster: tests/distributed/test_ray.py runs one)."""
import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.engines.placement import Slot
from hvdkeras.ray import ElasticRayExecutor
from hvdkeras.ray.elastic_executor import ElasticSettings, node_slots, slot_environment


def node(ip, cpus, gpus=0, alive=True):
    resources = {"CPU": float(cpus), **({"GPU": float(gpus)} if gpus else {})}
    return {"NodeManagerAddress": ip, "NodeID": f"id-{ip}", "Alive": alive, "Resources": resources}


def test_each_alive_node_holds_its_cpus_or_gpus_over_a_workers_share():
    nodes = [node("10.0.0.1", 8), node("10.0.0.2", 3, gpus=1), node("10.0.0.3", 16, alive=False),
             node("10.0.0.4", 1)]
    assert node_slots(nodes, cpus_per_worker=2, gpus_per_worker=0) == {"10.0.0.1": 4, "10.0.0.2": 1}
    assert node_slots(nodes, cpus_per_worker=1, gpus_per_worker=1) == {"10.0.0.2": 1}  # GPUs count with use_gpu
    assert node_slots(nodes, cpus_per_worker=0.5, gpus_per_worker=0) == {"10.0.0.1": 16, "10.0.0.2": 6,
                                                                         "10.0.0.4": 2}


def test_a_ranks_environment_is_elastic_authenticated_and_keeps_gpus_off_without_use_gpu():
    slot = Slot(hostname="10.0.0.2", rank=1, local_rank=0, cross_rank=1, size=2, local_size=1, cross_size=2)
    env = slot_environment(slot, ("10.0.0.1", 4242), "eth1", "s3cret", None, 30, {"EXTRA": "1"})
    assert env["HOROVOD_ELASTIC"] == "1" and env["HOROVOD_GLOO_RENDEZVOUS_SECRET"] == "s3cret"
    assert (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("10.0.0.1", "4242")
    assert (env["HOROVOD_HOSTNAME"], env["HOROVOD_RANK"], env["HOROVOD_GLOO_IFACE"]) == ("10.0.0.2", "1", "eth1")
    assert env["CUDA_VISIBLE_DEVICES"] == "-1" and env["EXTRA"] == "1"
    assert slot_environment(slot, ("a", 1), None, "s", ["3"], 30, {})["CUDA_VISIBLE_DEVICES"] == "3"  # Ray's GPU


def test_horovods_arguments_and_their_older_names_are_taken():
    settings = ElasticRayExecutor.create_settings(min_np=2, max_np=4, reset_limit=3, elastic_timeout=60,
                                                  verbose=True, ssh_identity_file="~/key")
    assert (settings.min_num_proc, settings.max_num_proc, settings.reset_limit, settings.verbose) == (2, 4, 3, 1)
    ex = ElasticRayExecutor(settings, use_gpu=True, cpus_per_slot=2)
    assert (ex.num_workers, ex.cpus_per_worker, ex.gpus_per_worker) == (2, 2.0, 1.0)
    with pytest.raises(SetupError, match=r"^gpus_per_slot=1 needs use_gpu=True \(Received: use_gpu=False\)$"):
        ElasticRayExecutor(settings, gpus_per_slot=1)
    with pytest.raises(SetupError, match=r"^an elastic job needs 1 <= min_num_proc <= max_num_proc \(Received:"):
        ElasticSettings(min_num_proc=3, max_num_proc=2)


def test_running_before_start_is_one_line():
    ex = ElasticRayExecutor(ElasticRayExecutor.create_settings())
    with pytest.raises(SetupError, match=r"^this ElasticRayExecutor is not started: call start\(\) first$"):
        ex.run(lambda: 1)
