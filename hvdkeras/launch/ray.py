"""The Ray launch, planned without Ray: what a job asks Ray for, whether a cluster can ever hold it, and the one
command that starts the config trainer on Ray (``python -m hvdkeras.train --launcher ray``).

Horovod's placement arguments become one placement group (:func:`request`): ``num_workers`` bundles of one worker,
packed as Ray places them, or ``num_hosts`` bundles of ``num_workers_per_host`` workers, each on its own node.
:mod:`hvdkeras.ray.cluster` reserves it; the dry run prints it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

from hvdkeras.common.errors import SetupError
from hvdkeras.launch.commands import TRAIN_MODULE, shell
from hvdkeras.launch.plan import Plan


@dataclasses.dataclass(frozen=True)
class RayOptions:
    """The config trainer's Ray flags.

    Args:
        address: the cluster's address: ``auto`` (the cluster of the node this runs on) or the head's host:port.
        cpus_per_worker: CPUs each rank's actor takes.
        gpus_per_worker: GPUs each rank's actor takes (0: no rank uses a GPU).
        max_retries: how often the ranks start again after a lost worker or node, each resuming from the
            workdir's last checkpoint.
    """

    address: str = "auto"
    cpus_per_worker: float = 1
    gpus_per_worker: float = 0
    max_retries: int = 2


@dataclasses.dataclass(frozen=True)
class Request:
    """What a job asks Ray for: its workers' bundles, how they spread, and what each worker takes.

    Args:
        bundles: one resource dict per bundle (a worker's, or a host's workers' together).
        strategy: the placement group's strategy: ``PACK`` (a bundle per worker) or ``STRICT_SPREAD`` (a bundle
            per host, each on its own node).
        workers_per_bundle: how many workers each bundle holds.
        cpus_per_worker: CPUs each worker takes.
        gpus_per_worker: GPUs each worker takes (0 without GPUs).
    """

    bundles: List[Dict[str, float]]
    strategy: str
    workers_per_bundle: int
    cpus_per_worker: float
    gpus_per_worker: float

    @property
    def num_workers(self) -> int:
        """How many workers (ranks) the request holds."""
        return len(self.bundles) * self.workers_per_bundle

    def describe(self) -> str:
        """The request in one line, as the dry run and the errors say it."""
        per = f"{self.cpus_per_worker:g} CPU" + (f" and {self.gpus_per_worker:g} GPU" if self.gpus_per_worker else "")
        where = (f" on {len(self.bundles)} distinct nodes, {self.workers_per_bundle} per node"
                 if self.strategy == "STRICT_SPREAD" else "")
        return (f"{self.num_workers} workers of {per} each{where} (one placement group, strategy"
                f" {self.strategy})")


def request(num_workers: Optional[int], num_hosts: Optional[int], num_workers_per_host: int,
            cpus_per_worker: float, use_gpu: bool, gpus_per_worker: Optional[float]) -> Request:
    """The resources for Horovod's placement arguments: ``num_workers`` workers packed as Ray places them, or
    ``num_hosts`` nodes with ``num_workers_per_host`` workers each.

    Raises:
        SetupError: neither or both of ``num_workers`` and ``num_hosts``, or a count below 1.
    """
    if (num_workers is None) == (num_hosts is None):
        raise SetupError("pass num_workers, or num_hosts with num_workers_per_host, not both or neither (Received:"
                         f" num_workers={num_workers}, num_hosts={num_hosts})")
    for name, value in (("num_workers", num_workers), ("num_hosts", num_hosts),
                        ("num_workers_per_host", num_workers_per_host), ("cpus_per_worker", cpus_per_worker)):
        if value is not None and value <= 0:
            raise SetupError(f"{name} must be positive (Received: {name}={value})")
    if gpus_per_worker and not use_gpu:
        raise SetupError(f"gpus_per_worker={gpus_per_worker} asks for GPUs, but use_gpu=False: pass use_gpu=True")
    gpus = float(gpus_per_worker or 1) if use_gpu else 0.0
    if num_hosts is not None:
        bundle = {"CPU": float(cpus_per_worker * num_workers_per_host)}
        if gpus:
            bundle["GPU"] = gpus * num_workers_per_host
        return Request([dict(bundle) for _ in range(num_hosts)], "STRICT_SPREAD", num_workers_per_host,
                       float(cpus_per_worker), gpus)
    bundle = {"CPU": float(cpus_per_worker)}
    if gpus:
        bundle["GPU"] = gpus
    assert num_workers is not None
    return Request([dict(bundle) for _ in range(num_workers)], "PACK", 1, float(cpus_per_worker), gpus)


def shortfall(wanted: Request, nodes: Sequence[Dict[str, Any]]) -> Optional[str]:
    """Why a cluster of ``nodes`` (``ray.nodes()``) can never hold ``wanted``, in one clause; None when it can.

    Counts what the alive nodes have in all (not what is free now: a busy cluster frees its resources later).
    """
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    for resource in ("CPU", "GPU"):
        need = sum(b.get(resource, 0.0) for b in wanted.bundles)
        have = sum(float(r.get(resource, 0.0)) for r in alive)
        if need > have:
            return (f"the job asks for {need:g} {resource}s in all and the cluster's {len(alive)} alive node(s) have"
                    f" {have:g}")
    if wanted.strategy == "STRICT_SPREAD":
        bundle = wanted.bundles[0]
        fit = [r for r in alive if all(float(r.get(k, 0.0)) >= v for k, v in bundle.items())]
        if len(fit) < len(wanted.bundles):
            what = ", ".join(f"{v:g} {k}" for k, v in bundle.items())
            return (f"the job asks for {len(wanted.bundles)} distinct nodes with {what} each, and the cluster has"
                    f" {len(fit)}")
    return None


def ray_command(p: Plan, options: RayOptions) -> str:
    """What the Ray launch asks for (a comment line) and the command that starts it, run on a node of the cluster."""
    wanted = request(p.np, None, 1, options.cpus_per_worker, options.gpus_per_worker > 0,
                     options.gpus_per_worker or None)
    flags = ["--launcher", "ray", "--address", options.address, "--np", str(p.np)]
    if options.cpus_per_worker != 1:
        flags += ["--cpus_per_worker", f"{options.cpus_per_worker:g}"]
    if options.gpus_per_worker:
        flags += ["--gpus_per_worker", f"{options.gpus_per_worker:g}"]
    if options.max_retries != RayOptions.max_retries:
        flags += ["--max_retries", str(options.max_retries)]
    return (f"# asks Ray for {wanted.describe()}; restarts after a lost worker: {options.max_retries}\n"
            + shell(list(TRAIN_MODULE), p.train_args + tuple(flags)))
