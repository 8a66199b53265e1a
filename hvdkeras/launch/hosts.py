"""Hosts and slots: ``--hosts a:4,b:4`` and ``--np``, as horovodrun reads them."""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple, Union

from hvdkeras.common.errors import LaunchError


@dataclasses.dataclass(frozen=True)
class Host:
    """One host of ``--hosts`` and its slots."""

    name: str
    slots: int  # processes on this host


def parse_hosts(text: str) -> Tuple[Host, ...]:
    """``"a:4,b:4"`` -> (Host("a", 4), Host("b", 4)); a host without ``:slots`` has 1 slot (as in horovodrun)."""
    hosts: List[Host] = []
    for entry in text.split(","):
        entry = entry.strip()
        name, _, slots = entry.partition(":")
        if not name or (slots and not (slots.isdigit() and int(slots) > 0)):
            raise LaunchError(f"--hosts entry {entry!r} in --hosts {text} must be host or host:slots with slots >= 1"
                              " (e.g. --hosts a:4,b:4)")
        if any(h.name == name for h in hosts):
            raise LaunchError(f"--hosts {text} lists {name} twice; give each host once with its slots")
        hosts.append(Host(name, int(slots) if slots else 1))
    return tuple(hosts)


def hosts_text(hosts: Sequence[Host]) -> str:
    """The ``-H`` value: ``a:4,b:4``."""
    return ",".join(f"{h.name}:{h.slots}" for h in hosts)


def world(np_: Optional[int], hosts: Union[None, str, Sequence[Host]]) -> Tuple[int, Tuple[Host, ...]]:
    """The world size and hosts: ``np`` defaults to the hosts' slots (else 1), hosts to ``localhost:np``."""
    parsed = parse_hosts(hosts) if isinstance(hosts, str) and hosts else tuple(hosts or ())
    if np_ is not None and np_ < 1:
        raise LaunchError(f"--np must be >= 1; received: {np_}")
    if not parsed:
        n = np_ or 1
        return n, (Host("localhost", n),)
    slots = sum(h.slots for h in parsed)
    if np_ is not None and np_ != slots:
        raise LaunchError(f"--np {np_} does not match --hosts {hosts_text(parsed)} ({slots} slots); "
                          f"pass --np {slots} or change --hosts")
    return slots, parsed
