"""The plan: what a job would run with, resolved without starting it (see :mod:`hvdkeras.launch`).

The hosts and slots come first: ``--hosts a:4,b:4`` and ``--np``, as horovodrun reads them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

from hvdkeras import config as config_lib
from hvdkeras.common import data_sizes, horovod_env, hostnames, scaling
from hvdkeras.common.errors import ConfigError, LaunchError, shown
from hvdkeras.common.horovod_env import ThreadBudget


@dataclasses.dataclass(frozen=True)
class Host:
    """One host of ``--hosts`` and its slots."""

    name: str
    slots: int  # processes on this host


def parse_hosts(text: str) -> Tuple[Host, ...]:
    """``"a:4,b:4"`` -> (Host("a", 4), Host("b", 4)); a host without ``:slots`` has 1 slot (as in horovodrun).

    Each host must be a host name or an address (:func:`hvdkeras.common.hostnames.parse_entry`): Horovod puts them
    unquoted into its ssh commands. Raises LaunchError in one line otherwise.
    """
    hosts: List[Host] = []
    source = f"--hosts {shown(text)}"
    for entry in text.split(","):
        name, slots = hostnames.parse_entry(entry.strip(), source)
        if any(h.name == name for h in hosts):
            raise LaunchError(f"{source} lists {name} twice; give each host once with its slots")
        hosts.append(Host(name, slots or 1))
    return tuple(hosts)


def hosts_text(hosts: Sequence[Host]) -> str:
    """The ``-H`` value: ``a:4,b:4``."""
    return ",".join(f"{h.name}:{h.slots}" for h in hosts)


def world(np_: Optional[int], hosts: Union[None, str, Sequence[Host]]) -> Tuple[int, Tuple[Host, ...]]:
    """The world size and hosts: ``np`` defaults to the hosts' slots (else 1), hosts to ``localhost:np``."""
    parsed = parse_hosts(hosts) if isinstance(hosts, str) and hosts else tuple(hosts or ())
    for h in parsed:  # Host entries given directly are checked as --hosts' are
        if not hostnames.is_host(h.name) or not 1 <= h.slots <= hostnames.MAX_SLOTS:
            raise LaunchError(f"host {shown(h.name)} with {h.slots} slots is not a host name (RFC 1123) or"
                              f" an address with 1-{hostnames.MAX_SLOTS} slots")
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


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything a job would run with, resolved without starting it."""

    config: config_lib.Config
    train_args: Tuple[str, ...]  # the arguments of python -m hvdkeras.train on every rank
    np: int  # world size
    hosts: Tuple[Host, ...]
    gpus_per_host: int  # 0: CPU hosts
    cores_per_host: int
    # Batches (examples per optimizer step).
    global_batch: int
    per_rank_batch: int
    eval_global_batch: int
    eval_per_rank_batch: int
    # Learning rate.
    base_lr: float  # optimizer.learning_rate, the rate of the reference batch
    scaled_lr: float  # what the optimizer gets
    warmup_start_lr: float  # the rate of the first warmup batch
    warmup_epochs: float
    # Steps (None: unknown, see steps_note).
    epochs: int
    steps_per_epoch: Optional[int]
    steps_note: str  # where steps_per_epoch comes from, or why it is unknown
    warmup_steps: Optional[int]
    total_steps: Optional[int]
    # Horovod and threads.
    horovod: config_lib.HorovodConfig  # resolved for the hosts (automatic knobs filled in)
    horovod_env: Dict[str, str]
    threads: Tuple[Tuple[int, ThreadBudget], ...]  # (ranks on a host, its budget), one per distinct count

    @property
    def uniform_slots(self) -> Optional[int]:
        """Processes per host when every host runs the same number, else None."""
        counts = {h.slots for h in self.hosts}
        return counts.pop() if len(counts) == 1 else None


def warmup_steps(warmup_epochs: float, steps_per_epoch: int) -> int:
    """Batches run below the scaled rate: ``ceil(warmup_epochs * steps_per_epoch)``.

    The warmup callback sets the rate of batch ``b`` of epoch ``e`` at the fractional
    epoch ``e + b / steps_per_epoch`` and reaches the scaled rate at ``warmup_epochs``.
    """
    return math.ceil(warmup_epochs * steps_per_epoch)


def total_steps(epochs: int, steps_per_epoch: int) -> int:
    """Optimizer steps of the whole run on every rank: ``epochs * steps_per_epoch``."""
    return epochs * steps_per_epoch


def _steps_per_epoch(cfg: config_lib.Config, np_: int) -> Tuple[Optional[int], str]:
    """(steps per epoch or None, where it comes from or why it is unknown); sizes only
    (:mod:`hvdkeras.common.data_sizes`)."""
    steps, note = data_sizes.steps_per_epoch(cfg, np_)
    if steps == 0:
        examples, source = data_sizes.train_examples(scaling.for_world(cfg.data, np_))
        raise ConfigError(f"data.global_batch_size={scaling.global_batch(cfg.data, np_)} is larger than the"
                          f" {examples} training examples of {source}; use a smaller global batch")
    return steps, note


def plan(config: config_lib.Config, np: Optional[int] = None, hosts: Union[None, str, Sequence[Host]] = None, *,
         gpus_per_host: int = 0, cores_per_host: Optional[int] = None, train_args: Sequence[str] = (),
         workdir: Optional[str] = None) -> Plan:
    """Resolves ``config`` for ``np`` processes on ``hosts`` (``"a:4,b:4"``) without starting anything.

    Args:
        config: The training config.
        np: The number of processes (see :func:`world`).
        hosts: The hosts and their slots, as text (``"a:4,b:4"``) or :class:`Host` entries.
        gpus_per_host: GPUs on each host (0: CPU hosts).
        cores_per_host: Cores on each host; defaults to this machine's cores.
        train_args: The training command's arguments.
        workdir: Places relative timeline and autotune-log paths as the trainer would.

    Raises:
        ConfigError: With one line for anything the trainer would refuse (or :class:`LaunchError`).
    """
    np_, hosts_ = world(np, hosts)
    if gpus_per_host < 0:
        raise LaunchError(f"--gpus_per_host must be >= 0 (0: CPU hosts); received: {gpus_per_host}")
    if gpus_per_host:  # one GPU per process: the trainer's own check, for the first local rank without one
        fullest = max(h.slots for h in hosts_)
        horovod_env.select_local_gpu(list(range(gpus_per_host)), min(fullest, gpus_per_host + 1) - 1)
    cores = cores_per_host if cores_per_host is not None else horovod_env.host_cores()
    if cores < 1:
        raise LaunchError(f"--cores_per_host must be >= 1; received: {cores}")
    cfg = config
    config_lib.validate_for_world(cfg, np_)
    d, o, s = cfg.data, cfg.optimizer, cfg.schedule
    global_batch, eval_global = scaling.global_batch(d, np_), scaling.eval_global_batch(d, np_)
    scaled = scaling.scaled_learning_rate(o, d, global_batch)
    steps, note = _steps_per_epoch(cfg, np_)
    resolved = horovod_env.resolve_horovod(cfg.horovod, multi_host=len(hosts_) > 1)
    threads = tuple((n, horovod_env.thread_budget(cores, n, cfg.runtime.intra_op_threads, cfg.runtime.inter_op_threads))
                    for n in sorted({h.slots for h in hosts_}, reverse=True))
    return Plan(
        config=cfg, train_args=tuple(train_args), np=np_, hosts=hosts_, gpus_per_host=gpus_per_host,
        cores_per_host=cores,
        global_batch=global_batch, per_rank_batch=scaling.per_rank_batch(global_batch, np_),
        eval_global_batch=eval_global, eval_per_rank_batch=scaling.per_rank_batch(eval_global, np_),
        base_lr=o.learning_rate, scaled_lr=scaled,
        warmup_start_lr=scaling.warmup_start_lr(o, scaled),
        warmup_epochs=s.warmup_epochs, epochs=cfg.trainer.epochs, steps_per_epoch=steps, steps_note=note,
        warmup_steps=warmup_steps(s.warmup_epochs, steps) if steps else None,
        total_steps=total_steps(cfg.trainer.epochs, steps) if steps else None,
        horovod=resolved, horovod_env=horovod_env.horovod_environment(resolved, workdir), threads=threads,
    )
