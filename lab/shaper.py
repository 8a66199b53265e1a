"""The lab's link speed: Linux's token-bucket shaper (``tc qdisc ... tbf``) on every end of the hosts' links.

Each emulated host (:mod:`lab.hosts`) reaches the bridge through a veth
pair. Shaping the egress of both ends of both pairs limits each host's link to the
rate in each direction, as a full-duplex NIC of that speed would::

    host a --[hvdtest0 | hvdtest0-a]-- bridge --[hvdtest0-b | hvdtest0]-- host b
              shaped     shaped                  shaped       shaped

Rates use tc's units (``bit``, ``kbit``, ``mbit``, ``gbit``: powers of 1000 bits per
second); ``unlimited`` is the unshaped link. The bucket holds ``burst`` bytes (at
least 256 KiB, and 2 ms at the rate, so the kernel's timer never starves it), and a
packet waits at most ``latency`` (100 ms) before it is dropped.

:func:`apply` replaces whatever root qdisc the ends had (so applying twice is the
same as once), :func:`clear` deletes ours and ignores ends that have none or are
gone; :func:`shaped` applies for the length of a ``with`` block and clears on any
exit. ``netem`` (delay, loss) is not used: it is not in every kernel.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import subprocess
from typing import Iterator, List, Optional, Sequence, Tuple

UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
UNLIMITED = ("unlimited", "none", "0")
MIN_BURST_BYTES = 256 * 1024
BURST_SECONDS = 0.002
LATENCY_MS = 100

End = Tuple[Optional[str], str]  # (network namespace or None for the root one, device)


def parse_rate(text: str) -> Optional[int]:
    """``"500mbit"`` -> 500_000_000 bits/s; ``"unlimited"`` -> None.

    >>> parse_rate("2gbit"), parse_rate("1.5mbit"), parse_rate("unlimited")
    (2000000000, 1500000, None)
    """
    value = str(text).strip().lower()
    if value in UNLIMITED:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|tbit)", value)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"a link rate is a number and one of {', '.join(UNITS)} (tc's units, e.g. 500mbit or "
                         f"10gbit), or 'unlimited'. Received: {text!r}")
    return int(round(float(match.group(1)) * UNITS[match.group(2)]))


def format_rate(bits_per_s: Optional[float]) -> str:
    """The shortest tc spelling of a rate: 500_000_000 -> ``"500mbit"``, None -> ``"unlimited"``."""
    if bits_per_s is None:
        return "unlimited"
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        scaled = bits_per_s / UNITS[unit]
        if scaled >= 1 and abs(scaled - round(scaled, 3)) < 1e-9:
            return f"{round(scaled, 3):g}{unit}"
    return f"{int(bits_per_s)}bit"


def parse_rates(text: str) -> List[Optional[int]]:
    """A comma-separated list, e.g. ``"unlimited,10gbit,1gbit"``, in the order given."""
    rates = [parse_rate(part) for part in str(text).split(",") if part.strip()]
    if not rates:
        raise ValueError(f"--link needs at least one rate, e.g. 10gbit,1gbit,500mbit. Received: {text!r}")
    return rates


@dataclasses.dataclass(frozen=True)
class Tbf:
    rate_bps: int
    burst_bytes: int
    latency_ms: int = LATENCY_MS

    def args(self) -> List[str]:
        return ["tbf", "rate", f"{self.rate_bps}bit", "burst", str(self.burst_bytes),
                "latency", f"{self.latency_ms}ms"]


def tbf_for(rate_bps: int) -> Tbf:
    """The bucket for a rate: ``burst = max(256 KiB, rate * 2 ms)``, ``latency`` 100 ms."""
    return Tbf(rate_bps, max(MIN_BURST_BYTES, int(rate_bps / 8 * BURST_SECONDS)))


def _in(netns: Optional[str], argv: List[str]) -> List[str]:
    return ["ip", "netns", "exec", netns, *argv] if netns else argv


def apply_commands(ends: Sequence[End], rate_bps: Optional[int]) -> List[List[str]]:
    """The ``tc`` commands that give every end the rate (for None: that remove our shaper)."""
    if rate_bps is None:
        return clear_commands(ends)
    tbf = tbf_for(rate_bps)
    return [_in(ns, ["tc", "qdisc", "replace", "dev", dev, "root", *tbf.args()]) for ns, dev in ends]


def clear_commands(ends: Sequence[End]) -> List[List[str]]:
    return [_in(ns, ["tc", "qdisc", "del", "dev", dev, "root"]) for ns, dev in ends]


def _run(argv: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)


def root_qdisc(end: End) -> Optional[str]:
    """What shapes an end now: e.g. ``"tbf rate 500Mbit burst 256Kb lat 100ms"``; None if it is gone."""
    ns, dev = end
    res = _run(_in(ns, ["tc", "qdisc", "show", "dev", dev, "root"]))
    if res.returncode != 0:
        return None
    line = res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
    return re.sub(r"^qdisc (\S+) \S+ (?:dev \S+ )?root (?:refcnt \d+ )?", r"\1 ", line).strip()


def apply(ends: Sequence[End], rate_bps: Optional[int]) -> None:
    """Shapes every end to ``rate_bps`` (None: unshaped), replacing what was there; raises on failure."""
    if rate_bps is None:
        clear(ends)
        return
    for argv in apply_commands(ends, rate_bps):
        res = _run(argv)
        if res.returncode != 0:
            clear(ends)
            raise RuntimeError(f"could not shape the lab's link: {' '.join(argv)} exited {res.returncode}: "
                               f"{res.stdout.strip()}")
    for end in ends:
        if not (root_qdisc(end) or "").startswith("tbf"):
            clear(ends)
            raise RuntimeError(f"the shaper did not take on {end[1]} ({end[0] or 'root namespace'}): "
                               f"tc shows {root_qdisc(end)!r}")


def clear(ends: Sequence[End]) -> None:
    """Removes the shaper from every end that has one; ends without one, or gone, are left as they are."""
    for end, argv in zip(ends, clear_commands(ends)):
        if (root_qdisc(end) or "").startswith("tbf"):
            res = _run(argv)
            if res.returncode != 0 and (root_qdisc(end) or "").startswith("tbf"):
                raise RuntimeError(f"could not remove the lab's shaper: {' '.join(argv)}: {res.stdout.strip()}")


@contextlib.contextmanager
def shaped(ends: Sequence[End], rate_bps: Optional[int]) -> Iterator[None]:
    """Every end at ``rate_bps`` inside the block; unshaped again after it, however it ends."""
    apply(ends, rate_bps)
    try:
        yield
    finally:
        clear(ends)
