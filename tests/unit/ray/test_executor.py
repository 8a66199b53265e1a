"""hvdkeras.ray.executor: Horovod's arguments, the checks of each actor and the settings each rank gets, with the
actors and Ray stood in by small objects (the real cluster is tests/distributed/test_ray.py's)."""
import types

import pytest

from hvdkeras.common.errors import SetupError
from hvdkeras.engines import failures
from hvdkeras.engines.python_check import python_probe
from hvdkeras.ray.executor import RayExecutor


class Call:
    """A stand-in for an actor method: ``.remote(...)`` returns what ``answer`` makes of its arguments."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def remote(self, *args):
        self.calls.append(args)
        return self.answer(*args)


class Actor:
    def __init__(self):
        self.identity = Call(lambda: None)
        self.interface = Call(lambda ip, nics: "eth0")
        self.setup = Call(lambda env: None)


def executor(**kwargs):
    ex = RayExecutor(RayExecutor.create_settings(timeout_s=30), **kwargs)
    ex._wait = lambda refs, timeout_s=None: list(refs)  # the "refs" are the answers themselves
    ex._ray = types.SimpleNamespace(util=types.SimpleNamespace(get_node_ip_address=lambda: "127.0.0.1"))
    return ex


def test_horovod_021s_slot_names_are_taken_with_a_warning(capsys):
    ex = RayExecutor(None, num_hosts=2, num_slots=4, cpus_per_slot=8, use_gpu=False)
    assert ex.num_workers == 8 and ex.request.bundles == [{"CPU": 32.0}] * 2
    assert "num_slots= is Horovod 0.21's name for num_workers_per_host=" in capsys.readouterr().err
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_slot'"):
        RayExecutor(None, num_hosts=2, num_slot=4)
    elastic = RayExecutor(None, min_workers=1, max_workers=2, cpus_per_slot=2, reset_limit=3)
    assert elastic.num_workers == 1 and elastic._elastic.cpus_per_worker == 2.0
    assert (elastic._elastic.settings.max_num_proc, elastic._elastic.settings.reset_limit) == (2, 3)
    with pytest.raises(SetupError, match=r"^an elastic RayExecutor \(min_workers/max_workers\) runs functions with"):
        elastic.execute_single(lambda _: 1)
    with pytest.raises(SetupError, match=r"^an elastic job takes min_workers/max_workers, not num_workers"):
        RayExecutor(None, num_workers=2, min_workers=1)


def test_a_worker_without_the_patched_horovod_or_at_other_versions_is_refused_naming_its_node(monkeypatch):
    driver = next(python_probe()(None))
    monkeypatch.delenv("HVDKERAS_ALLOW_OPEN_RENDEZVOUS", raising=False)
    ex = executor(num_workers=2)
    same = dict(driver, ip="10.0.0.1", unpatched=None)
    older = dict(same, ip="10.0.0.2", tensorflow="2.0.0")
    ex._wait = lambda refs, timeout_s=None: [same, older]
    with pytest.raises(failures.CannotStartError, match=r"^the Ray worker on node 10.0.0.2 \(.*\) has tensorflow"
                       r" 2.0.0 \(the driver has .*\): install hvdkeras, and Horovod built by"):
        ex._identities([Actor(), Actor()])
    open_one = dict(same, ip="10.0.0.3", unpatched="the Horovod this process imports (/x) lacks hvdkeras's build"
                    " patch 0010")
    ex._wait = lambda refs, timeout_s=None: [same, open_one]
    with pytest.raises(failures.CannotStartError, match=r"^cannot start a rank with an authenticated rendezvous on"
                       r" node 10.0.0.3: the Horovod .* lacks hvdkeras's build patch 0010"):
        ex._identities([Actor(), Actor()])
    ex._wait = lambda refs, timeout_s=None: [same, same]
    assert ex._identities([Actor(), Actor()]) == [same, same]


# What Ray 2.60 raised on the lab's cluster for an actor on a node whose Python has no hvdkeras (colours and all)
DIED_IN_INIT = ("The actor died because of an error raised in its creation task, \x1b[36mray::RankWorker.__init__()"
                "\x1b[39m (pid=11817, ip=198.18.213.4, actor_id=7773d3b0, repr=<hvdkeras.ray.worker."
                "FunctionActorManager._create_fake_actor_class.<locals>.TemporaryActor object at 0x7fe47f0f6310>)\n"
                "RuntimeError: The actor with name RankWorker failed to import on the worker. This may be because"
                " needed library dependencies are not installed in the worker environment:\n\n"
                "\x1b[36mray::RankWorker.__init__()\x1b[39m (pid=11817, ip=198.18.213.4)\n"
                "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
                "ModuleNotFoundError: No module named 'hvdkeras'")


def test_an_actor_that_cannot_start_is_one_line_with_its_node_and_its_cause():
    exceptions = pytest.importorskip("ray.exceptions")
    ex = executor(num_workers=1)

    def broken(refs, timeout_s=None):  # as _wait ends when an actor's first call fails
        raise ex._failed(0, exceptions.RayActorError(None, DIED_IN_INIT, actor_init_failed=True), [])

    ex._wait = broken
    with pytest.raises(failures.CannotStartError) as err:
        ex._identities([Actor()])
    assert str(err.value) == ("a Ray worker on node 198.18.213.4 could not start a rank's actor (ModuleNotFoundError:"
                              " No module named 'hvdkeras'): install hvdkeras, and Horovod built by `python -m"
                              " hvdkeras.build_horovod`, on every Ray node at the driver's versions"
                              " (docs/ray.md#every-node)")


def test_an_actor_lost_after_its_start_is_a_lost_worker_not_a_start_failure():
    exceptions = pytest.importorskip("ray.exceptions")
    ex = executor(num_workers=1)
    error = ex._failed(0, exceptions.RayActorError(None, "The actor died unexpectedly before finishing this task."), [])
    assert isinstance(error, failures.RankExitedError)
    assert str(error) == "a rank's Ray worker was lost (The actor died unexpectedly before finishing this task.)"

    def lost_while_starting(refs, timeout_s=None):  # as _wait ends when a started actor's process is gone
        raise ex._failed(0, exceptions.RayActorError(None, "The actor died unexpectedly before finishing this task."),
                         [])

    ex._wait = lost_while_starting
    with pytest.raises(failures.RankExitedError) as err:  # retried by the config trainer's attempts, said once
        ex._identities([Actor()])
    assert str(err.value) == str(error)


def configured(use_gpu, gpus):
    """The environments :meth:`RayExecutor._configure` sets on two nodes' actors with stand-in GPU assignments."""
    from hvdkeras.engines.placement import slot_plan

    ex = executor(num_workers=4, use_gpu=use_gpu)
    ips = ["10.0.0.2", "10.0.0.1", "10.0.0.2", "10.0.0.1"]
    ex.plan = slot_plan(ips)
    ex.workers = [Actor() for _ in ips]
    found = [{"ip": ip, "gpus": g} for ip, g in zip(ips, gpus)]
    ex._configure(found, {"TF_CPP_MIN_LOG_LEVEL": "2"})
    try:
        return [w.setup.calls[0][0] for w in ex.workers], ex.plan
    finally:
        ex.shutdown()


def test_each_rank_uses_the_gpu_ray_gave_its_actor_and_none_without_use_gpu():
    envs, plan = configured(True, [["3"], ["0"], ["1"], ["2"]])
    for env, slot, own in zip(envs, plan, ["3", "0", "1", "2"]):
        assert env["CUDA_VISIBLE_DEVICES"].split(",")[slot.local_rank] == own  # the GPU at its local rank is its own
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["3,1", "0,2", "3,1", "0,2"]
    envs, _ = configured(False, [[], [], [], []])
    assert {env["CUDA_VISIBLE_DEVICES"] for env in envs} == {"-1"}


def test_each_rank_gets_horovods_settings_and_the_secret_in_its_environment():
    envs, plan = configured(False, [[], [], [], []])
    assert [int(env["HOROVOD_RANK"]) for env in envs] == [s.rank for s in plan]
    assert [env["HOROVOD_LOCAL_RANK"] for env in envs] == ["0", "0", "1", "1"]
    assert {env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] for env in envs} == {"127.0.0.1"}
    assert len({env["HOROVOD_GLOO_RENDEZVOUS_SECRET"] for env in envs}) == 1
    assert {env["HOROVOD_GLOO_IFACE"] for env in envs} == {"eth0"} and envs[0]["TF_CPP_MIN_LOG_LEVEL"] == "2"


def test_a_run_before_start_is_one_line():
    with pytest.raises(SetupError, match=r"^this RayExecutor's ranks are not running: call start\(\) first"):
        RayExecutor(None, num_workers=1).run(print)


def test_ray_trains_backend_places_the_ranks_by_node_and_gives_each_its_settings(monkeypatch):
    """hvdkeras.ray.ray_train's backend on a stand-in Ray Train group: its calls run here, in order."""
    pytest.importorskip("ray.train")
    import ray

    from hvdkeras.ray import ray_train as trainer

    driver = next(python_probe()(None))
    nodes = ["10.0.0.2", "10.0.0.1", "10.0.0.2"]
    envs = {}

    class Group:
        def __len__(self):
            return len(nodes)

        def execute_single_async(self, index, fn, *args):
            if fn is trainer.identity:
                return dict(driver, ip=nodes[index], gpus=[], unpatched=None)
            if fn is trainer.interface:
                return "eth0"
            assert fn is trainer.set_environment
            envs[index] = args[0]

    monkeypatch.setattr(ray, "get", lambda refs: list(refs))
    monkeypatch.setattr(ray.util, "get_node_ip_address", lambda: "127.0.0.1")
    backend = trainer.HorovodConfig(timeout_s=60).backend_cls()
    backend.on_start(Group(), trainer.HorovodConfig(timeout_s=60))
    try:
        assert [envs[i]["HOROVOD_RANK"] for i in range(3)] == ["0", "2", "1"]  # 10.0.0.2's two first, as horovodrun
        assert [envs[i]["HOROVOD_LOCAL_RANK"] for i in range(3)] == ["0", "0", "1"]
        assert {envs[i]["CUDA_VISIBLE_DEVICES"] for i in range(3)} == {"-1"}  # no GPU from Ray: none at all
        assert len({envs[i]["HOROVOD_GLOO_RENDEZVOUS_SECRET"] for i in range(3)}) == 1
    finally:
        backend.on_shutdown(Group(), trainer.HorovodConfig())
    assert backend._server is None
