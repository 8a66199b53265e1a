"""hvdkeras.engines.placement: the ranks' places from their tasks' hosts, as horovodrun places them."""
from hvdkeras.engines.placement import interface_of, slot_plan


def test_ranks_are_grouped_by_host_in_the_order_the_hosts_first_appear_as_horovodrun_places_them():
    plan = slot_plan(["b", "a", "b", "a", "c"])
    assert [s.rank for s in plan] == [0, 2, 1, 3, 4]  # b's tasks 0 and 2 take ranks 0 and 1
    assert [s.local_rank for s in plan] == [0, 0, 1, 1, 0]
    assert [s.local_size for s in plan] == [2, 2, 2, 2, 1]
    # cross ranks: the hosts with a rank at that local rank, in host order (b, a, c for 0; b, a for 1)
    assert [(s.cross_rank, s.cross_size) for s in plan] == [(0, 3), (1, 3), (0, 2), (1, 2), (2, 3)]
    assert {s.size for s in plan} == {5}


def test_every_task_on_one_host_keeps_its_task_order():
    plan = slot_plan(["h"] * 3)
    assert [(s.rank, s.local_rank, s.cross_rank, s.cross_size) for s in plan] == [(0, 0, 0, 1), (1, 1, 0, 1),
                                                                                  (2, 2, 0, 1)]


def test_the_interface_of_an_address_is_the_one_holding_it():
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("127.0.0.1", nics=["eth9"]) is None
    assert interface_of("no-such-host.invalid") is None


def test_each_rank_sees_its_hosts_gpus_with_its_own_at_its_local_rank():
    from hvdkeras.engines.placement import visible_gpus

    plan = slot_plan(["b", "a", "b", "a"])  # task 0 -> rank 0 on b, task 2 -> rank 1 on b; a's tasks ranks 2, 3
    assigned = [["3"], ["0"], ["1", "5"], ["2"]]
    visible = visible_gpus(plan, assigned)
    assert visible == ["3,1", "0,2", "3,1", "0,2"]
    for slot, gpus, seen in zip(plan, assigned, visible):
        assert seen.split(",")[slot.local_rank] == gpus[0]  # the rank that pins its local rank's GPU pins its own
    assert visible_gpus(plan, [["3"], [], ["1"], ["2"]]) == ["3,1", "", "3,1", ""]  # host a: one task has none
    assert visible_gpus(plan, [[]] * 4) == [""] * 4
