"""Where each rank runs: its rank, local rank and cross rank from the hosts its engine's tasks landed on.

Ranks are placed as ``horovodrun`` places them: grouped by host, the hosts in the order they first appear, each
host's tasks in task order with consecutive ranks. An engine learns its tasks' hosts (Spark's
``BarrierTaskContext.getTaskInfos``) and each task takes ``slot_plan(hosts)[its index]``. Plain Python.
"""
from __future__ import annotations

import dataclasses
import socket
from typing import Dict, List, Optional, Sequence, Tuple


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one rank runs, as ``horovodrun`` places it (Horovod's ``SlotInfo``)."""

    hostname: str
    rank: int
    local_rank: int
    cross_rank: int
    size: int
    local_size: int
    cross_size: int


def slot_plan(hosts: Sequence[str]) -> List[Slot]:
    """Each task's rank from the hosts its tasks run on (``hosts[i]``: task ``i``'s), as Horovod places ranks: the
    hosts in the order they first appear, each host's tasks in task order with consecutive ranks.

    Returns:
        ``plan[i]``: task ``i``'s slot.
    """
    order: List[str] = []
    for host in hosts:
        if host not in order:
            order.append(host)
    local_sizes = {host: sum(1 for h in hosts if h == host) for host in order}
    ranks: Dict[int, Tuple[int, int]] = {}  # task -> (rank, local rank)
    rank = 0
    for host in order:
        for local_rank, task in enumerate(i for i, h in enumerate(hosts) if h == host):
            ranks[task] = (rank, local_rank)
            rank += 1
    plan = []
    for task, host in enumerate(hosts):
        rank, local_rank = ranks[task]
        crossing = [h for h in order if local_sizes[h] > local_rank]  # the hosts with a rank at this local rank
        plan.append(Slot(hostname=host, rank=rank, local_rank=local_rank, cross_rank=crossing.index(host),
                         size=len(hosts), local_size=local_sizes[host], cross_size=len(crossing)))
    return plan


def visible_gpus(plan: Sequence[Slot], assigned: Sequence[Sequence[str]]) -> List[str]:
    """Each task's ``CUDA_VISIBLE_DEVICES`` from the GPUs its engine assigned it (``assigned[i]``: task ``i``'s).

    A host's tasks each see the first GPU of every task on that host, in local-rank order: the GPU at index
    ``local_rank`` is the task's own, whether the rank pins its local rank's GPU (hvdkeras, Horovod's examples) or
    index 0 of what it sees, and NCCL still finds its neighbours' GPUs. Where a task of a host was assigned none,
    that host's tasks get ``""`` (nothing to restrict: each rank pins its local rank's GPU).

    Returns:
        ``visible[i]``: task ``i``'s ``CUDA_VISIBLE_DEVICES``, or ``""``.
    """
    by_host: Dict[str, List[Tuple[int, str]]] = {}
    for slot, gpus in zip(plan, assigned):
        by_host.setdefault(slot.hostname, []).append((slot.local_rank, str(gpus[0]) if gpus else ""))
    visible = {}
    for host, owned in by_host.items():
        ordered = [gpu for _, gpu in sorted(owned)]
        visible[host] = ",".join(ordered) if all(ordered) else ""
    return [visible[slot.hostname] for slot in plan]


def interface_of(address: str, nics: Optional[Sequence[str]] = None) -> Optional[str]:
    """The network interface that holds ``address`` (a name is resolved first) on this host, among ``nics`` when
    given; None when none does."""
    import psutil

    try:
        ip = socket.gethostbyname(address)
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if nics and name not in nics:
            continue
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    return None
