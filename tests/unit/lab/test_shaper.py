"""lab.shaper: rates, the tc commands, and (as root) a real veth shaped and cleared."""
import os
import shutil
import subprocess

import pytest

from lab import shaper


def test_rates_in_tcs_units():
    assert shaper.parse_rate("500mbit") == 500_000_000
    assert shaper.parse_rate("10GBIT") == 10_000_000_000
    assert shaper.parse_rate("1.5gbit") == 1_500_000_000
    assert shaper.parse_rate("unlimited") is None
    assert shaper.parse_rates("unlimited,1gbit") == [None, 1_000_000_000]
    for bad in ("fast", "500mb", "500mbps", "-1gbit", "0mbit"):
        with pytest.raises(ValueError, match=f"Received: '{bad}'"):
            shaper.parse_rate(bad)


def test_format_rate_is_the_inverse():
    for text in ("500mbit", "10gbit", "1.5gbit", "64kbit", "unlimited"):
        assert shaper.format_rate(shaper.parse_rate(text)) == text
    assert shaper.format_rate(530_000_000) == "530mbit"


def test_bucket_is_at_least_256_kib_and_two_ms_of_the_rate():
    assert shaper.tbf_for(100_000_000).burst_bytes == 256 * 1024
    assert shaper.tbf_for(10_000_000_000).burst_bytes == 2_500_000


def test_commands_replace_on_every_end_and_clearing_deletes():
    ends = [("ns-a", "eth0"), (None, "veth-a")]
    apply = shaper.apply_commands(ends, 1_000_000_000)
    assert apply[0][:4] == ["ip", "netns", "exec", "ns-a"]
    assert apply[0][4:10] == ["tc", "qdisc", "replace", "dev", "eth0", "root"]
    assert apply[1][:6] == ["tc", "qdisc", "replace", "dev", "veth-a", "root"]
    assert "tbf" in apply[1] and "1000000000bit" in apply[1]
    assert shaper.apply_commands(ends, None) == shaper.clear_commands(ends)
    assert shaper.clear_commands(ends)[1] == ["tc", "qdisc", "del", "dev", "veth-a", "root"]


NS, DEV = "hvdtest-shaper", "hvdtest-sh0"


@pytest.fixture
def veth():
    """A veth pair, one end in a private namespace: the same kind of ends the lab shapes."""
    if os.geteuid() != 0 or not shutil.which("tc"):
        pytest.skip("shaping a real link needs root and tc (iproute2)")

    def cleanup():
        subprocess.run(["ip", "netns", "del", NS], capture_output=True)
        subprocess.run(["ip", "link", "del", DEV], capture_output=True)

    cleanup()
    for cmd in (["ip", "netns", "add", NS], ["ip", "link", "add", DEV, "type", "veth", "peer", "name", DEV + "p"],
                ["ip", "link", "set", DEV + "p", "netns", NS], ["ip", "link", "set", DEV, "up"]):
        subprocess.run(cmd, check=True, capture_output=True)
    try:
        yield [(None, DEV), (NS, DEV + "p")]
    finally:
        cleanup()


def test_a_real_link_is_shaped_then_cleared(veth):
    shaper.apply(veth, 500_000_000)
    for end in veth:
        assert shaper.root_qdisc(end).startswith("tbf rate 500Mbit"), shaper.root_qdisc(end)
    shaper.apply(veth, 2_000_000_000)  # applying again replaces, it does not stack
    assert all(shaper.root_qdisc(end).startswith("tbf rate 2Gbit") for end in veth)
    shaper.clear(veth)
    assert not any(shaper.root_qdisc(end).startswith("tbf") for end in veth)
    shaper.clear(veth)  # idempotent


def test_the_shaper_is_removed_when_the_block_fails(veth):
    with pytest.raises(RuntimeError, match="a job failed"):
        with shaper.shaped(veth, 1_000_000_000):
            assert shaper.root_qdisc(veth[0]).startswith("tbf")
            raise RuntimeError("a job failed")
    assert not any(shaper.root_qdisc(end).startswith("tbf") for end in veth)


def test_clearing_ends_that_are_gone_is_not_an_error(veth):
    shaper.clear([(None, "hvdtest-nosuchdev"), ("hvdtest-nosuchns", "eth0")])
    assert shaper.root_qdisc((None, "hvdtest-nosuchdev")) is None
