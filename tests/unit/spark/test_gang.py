"""hvdkeras.spark.gang: the ranks' places from their tasks' hosts, and Horovod's settings for each rank."""
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


def test_the_interface_of_an_address_is_the_one_holding_it():
    assert gang.interface_of("127.0.0.1") == "lo"
    assert gang.interface_of("127.0.0.1", nics=["eth9"]) is None
    assert gang.interface_of("no-such-host.invalid") is None


def test_the_reason_of_a_failed_job_is_the_marked_line():
    error = RuntimeError(f"Job aborted\nTraceback ...\nRuntimeError: {gang.FAILED}: rank 1 on h exited with status 9\n")
    assert gang._marked(error, gang.FAILED) == f"{gang.FAILED}: rank 1 on h exited with status 9"
    assert gang._marked(error, gang.GAVE_UP) is None
