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
