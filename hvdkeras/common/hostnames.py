"""Host names and addresses as the launchers take them, checked before any of them reaches a command line.

A host is an RFC 1123 name (``node-1``, ``node-1.cluster.local``), an IPv4 address or an IPv6 address, and an
entry may carry ``:slots``; an IPv6 address with slots is written in brackets (``[fd00::1]:4``). Anything else (a
space, a quote, a ``;``, a newline, a ``$(...)``) is refused in one line naming the entry and where it came from:
Horovod puts host names unquoted into the ssh commands it runs.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Optional, Tuple

from hvdkeras.common.errors import LaunchError, shown

MAX_NAME = 253  # RFC 1123's longest host name, in characters
MAX_SLOTS = 4096  # processes on one host: more is a typo, not a machine
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_SCOPE = re.compile(r"[A-Za-z0-9_.-]{1,15}")  # an IPv6 zone: an interface's name (fe80::1%eth0)


def _address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``name`` as an IP address, or None; an IPv6 zone must be an interface's name."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    if "%" in name and not _SCOPE.fullmatch(name.partition("%")[2]):
        return None
    return address


def is_host(name: str) -> bool:
    """Whether ``name`` is an RFC 1123 host name, an IPv4 address or an IPv6 address.

    Args:
        name: A host name or address, without slots or brackets.

    Returns:
        True for ``node-1``, ``node-1.cluster.local``, ``10.0.0.1`` and ``fd00::1``; False for anything else.
    """
    if not name or len(name) > MAX_NAME or not name.isascii():
        return False
    if _address(name) is not None:
        return True
    if "%" in name:
        return False
    labels = name[:-1].split(".") if name.endswith(".") else name.split(".")
    # A name of digits and dots only is an address or nothing (RFC 1123, 2.1): "10.0.0.300" is not a host.
    if all(label.isdigit() for label in labels):
        return False
    return all(_LABEL.fullmatch(label) for label in labels)


def is_ipv6(name: str) -> bool:
    """Whether ``name`` is an IPv6 address (Horovod's ``-H`` cannot carry one: it splits ``host:slots`` at ``:``)."""
    return isinstance(_address(name), ipaddress.IPv6Address)


def parse_entry(entry: str, source: str, example: str = "a:4,b:4") -> Tuple[str, Optional[int]]:
    """One ``host`` or ``host:slots`` entry, checked.

    Args:
        entry: The entry, surrounding spaces already removed (``node-1:4``, ``10.0.0.1``, ``[fd00::1]:2``).
        source: Where it came from, for the error (``--hosts a:4,b:4``, ``hosts file hosts.txt``).
        example: A valid value for the error's hint.

    Returns:
        ``(host, slots)``; slots is None when the entry gives none.

    Raises:
        LaunchError: One line naming the entry and its source, unless the host is a name or an address and the
            slots a whole number from 1 to :data:`MAX_SLOTS`.
    """
    name, slots = entry, ""
    if entry.startswith("["):
        inside, bracket, rest = entry[1:].partition("]")
        if bracket and is_ipv6(inside) and (not rest or rest.startswith(":")):
            name, slots = inside, rest[1:] if rest else ""
            if not rest:
                return name, None
        else:
            name = ""
    elif not is_ipv6(entry):
        name, colon, slots = entry.partition(":")
        if colon and not slots:
            name = ""
    if not is_host(name) or (slots and not (slots.isascii() and slots.isdigit() and 1 <= int(slots) <= MAX_SLOTS)):
        raise LaunchError(f"{source}: entry {shown(entry)} is not host or host:slots, where host is a host name "
                          f"(RFC 1123), an IPv4 address or a bracketed IPv6 address and slots 1-{MAX_SLOTS}"
                          f" (e.g. {example})")
    return name, int(slots) if slots else None
