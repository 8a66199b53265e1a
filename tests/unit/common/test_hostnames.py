"""hvdkeras.common.hostnames: what a host entry may be before it reaches a command line."""
import pytest
from hypothesis import given

from hvdkeras.common import hostnames
from hvdkeras.common.errors import LaunchError, shown
from tests.harness.hostile import PROPERTY, host_entry

SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:%_")


@pytest.mark.parametrize("name", ["node-1", "node-1.cluster.local", "n1.", "a" * 63, "10.0.0.1", "fd00::1",
                                  "fe80::1%eth0", "localhost"])
def test_names_and_addresses_are_hosts(name):
    assert hostnames.is_host(name)


@pytest.mark.parametrize("name", ["", "-a", "a-", "a..b", "a_b", "a;id", "a b", "a\n", "$(id)", "10.0.0.300",
                                  "1.2.3", "a" * 64, "fe80::1%a;b", "é.example", ".a", "a%b", "x" * 254])
def test_anything_else_is_not(name):
    assert not hostnames.is_host(name)


@pytest.mark.parametrize("entry, parsed", [("a:4", ("a", 4)), ("a", ("a", None)), ("10.0.0.1:2", ("10.0.0.1", 2)),
                                           ("[fd00::1]:2", ("fd00::1", 2)), ("[fd00::1]", ("fd00::1", None)),
                                           ("fd00::1", ("fd00::1", None))])
def test_entries_with_and_without_slots(entry, parsed):
    assert hostnames.parse_entry(entry, "--hosts x") == parsed


@pytest.mark.parametrize("entry", ["a:", "a:0", "a:-1", "a:4097", "a:4:4", "a:٣", "[x]:2", "[fd00::1]2", ":4",
                                   "a;id>/tmp/pwn;b:2", "a\nb:2"])
def test_bad_entries_are_one_line_naming_the_entry_and_its_source(entry):
    with pytest.raises(LaunchError) as info:
        hostnames.parse_entry(entry, "hosts file h.txt")
    message = str(info.value)
    assert message.startswith(f"hosts file h.txt: entry {shown(entry)} ") and "\n" not in message


@PROPERTY
@given(host_entry)
def test_an_entry_is_a_safe_host_or_one_line(entry):
    try:
        name, slots = hostnames.parse_entry(entry, "--hosts")
    except LaunchError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert set(name) <= SAFE and hostnames.is_host(name)
    assert slots is None or 1 <= slots <= hostnames.MAX_SLOTS
