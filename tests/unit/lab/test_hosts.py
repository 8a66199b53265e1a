"""lab.hosts without root: the table of 2 to 8 hosts, their cores, their links, and what down() and any_up() look at."""
import ipaddress

import pytest

from lab import hosts


def test_the_first_two_hosts_keep_their_names():
    assert hosts.HOST_SPECS == (("hvd-host-a", "hvdtest-a", "198.18.213.2", "hvdtest0-a"),
                                ("hvd-host-b", "hvdtest-b", "198.18.213.3", "hvdtest0-b"))
    assert hosts.host_specs(2) == hosts.HOST_SPECS
    assert hosts.host_specs(5)[:2] == hosts.HOST_SPECS


def test_eight_hosts_have_distinct_names_and_addresses_2_to_9_in_the_subnet():
    specs = hosts.host_specs(8)
    assert [s[2] for s in specs] == [f"198.18.213.{i}" for i in range(2, 10)]
    assert specs[7] == ("hvd-host-h", "hvdtest-h", "198.18.213.9", "hvdtest0-h")
    for column in zip(*specs):
        assert len(set(column)) == 8
    assert all(ipaddress.ip_address(s[2]) in hosts.SUBNET for s in specs)
    assert hosts.LAUNCHER_ADDR not in [s[2] for s in specs]
    # Linux device names have at most 15 characters; the inner veth end is created as root_end + "i"
    assert all(len(s[3] + "i") <= 15 for s in specs)
    assert hosts.ALL_HOST_SPECS == specs


@pytest.mark.parametrize("bad", [0, 1, 9, "3"])
def test_a_host_count_outside_2_to_8_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match=r"^the lab builds 2 to 8 hosts\. Received: ") as err:
        hosts.host_specs(bad)
    assert "\n" not in str(err.value)


def test_up_refuses_a_bad_count_before_building_anything(monkeypatch):
    monkeypatch.setattr(hosts, "can_run", lambda: pytest.fail("up() went on with 9 hosts"))
    with pytest.raises(ValueError, match="Received: 9"):
        hosts.up("/nonexistent", hosts=9)


@pytest.mark.parametrize("argv", [["up", "--hosts", "1"], ["up", "--hosts", "9"], ["up", "--hosts", "four"]])
def test_the_command_line_names_the_allowed_range(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        hosts.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"the lab builds 2 to 8 hosts. Received: {argv[-1]!r}")


def test_hosts_take_every_nth_core_or_one_core_each_round_robin():
    assert [hosts.host_cpus(i, 2, [0, 1]) for i in range(2)] == ["0", "1"]
    assert [hosts.host_cpus(i, 4, [0, 1]) for i in range(4)] == ["0", "1", "0", "1"]
    assert [hosts.host_cpus(i, 3, [4, 6]) for i in range(3)] == ["4", "6", "4"]
    assert [hosts.host_cpus(i, 2, list(range(8))) for i in range(2)] == ["0,2,4,6", "1,3,5,7"]
    assert [hosts.host_cpus(i, 3, list(range(4))) for i in range(3)] == ["0,3", "1", "2"]


def test_link_ends_are_both_ends_of_the_first_n_links():
    assert hosts.link_ends() == [("hvdtest-a", "hvdtest0"), (None, "hvdtest0-a"),
                                 ("hvdtest-b", "hvdtest0"), (None, "hvdtest0-b")]
    ends = hosts.link_ends(4)
    assert len(ends) == 8 and ends[-1] == (None, "hvdtest0-d") and ends[-2] == ("hvdtest-d", "hvdtest0")


@pytest.fixture
def fake_system(monkeypatch):
    """Namespaces and links as sets; ``ip netns del`` and ``ip link del`` remove from them."""
    state = {"netns": set(), "links": set(), "ran": []}

    def run(cmd, check=True, **kwargs):
        state["ran"].append(cmd)
        if cmd[:3] == ["ip", "netns", "del"]:
            state["netns"].discard(cmd[3])
            state["links"].discard(f"hvdtest0-{cmd[3][-1]}")  # the veth pair goes with its namespace
        if cmd[:3] == ["ip", "link", "del"]:
            state["links"].discard(cmd[3])
        return type("Res", (), {"returncode": 0, "stdout": ""})()

    monkeypatch.setattr(hosts, "_run", run)
    monkeypatch.setattr(hosts, "_pids_in", lambda netns: [])
    monkeypatch.setattr(hosts, "_netns_exists", lambda netns: netns in state["netns"])
    monkeypatch.setattr(hosts, "_link_exists", lambda dev: dev in state["links"])
    return state


def test_any_up_sees_a_leftover_seventh_host(fake_system):
    assert not hosts.any_up()
    fake_system["netns"].add("hvdtest-g")
    assert hosts.any_up()


def test_down_removes_whatever_of_the_eight_a_killed_run_left(fake_system):
    fake_system["netns"] |= {"hvdtest-a", "hvdtest-f", "hvdtest-h"}
    fake_system["links"] |= {"hvdtest0", "hvdtest0-a", "hvdtest0-f", "hvdtest0-h", "hvdtest0-c"}
    hosts.down()
    assert fake_system["netns"] == set() and fake_system["links"] == set()
    assert ["ip", "netns", "del", "hvdtest-h"] in fake_system["ran"]
    assert ["ip", "link", "del", "hvdtest0-c"] in fake_system["ran"]  # a veth left without its namespace


def test_down_says_what_it_left_behind(fake_system, monkeypatch):
    monkeypatch.setattr(hosts, "_link_exists", lambda dev: dev in ("hvdtest0-e",))
    with pytest.raises(RuntimeError, match="left something behind: link hvdtest0-e still exists"):
        hosts.down()
