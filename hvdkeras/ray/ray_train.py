"""``HorovodTrainer`` and ``HorovodConfig``, in the place of Ray Train's removed ones, on Ray Train's current API.

A script written for ``ray.train.horovod`` switches by its import (``from hvdkeras.ray import HorovodTrainer,
HorovodConfig``) and keeps the rest: ``ScalingConfig``, ``RunConfig``, ``FailureConfig``, ``ray.train.report`` and
``ray.train.get_checkpoint``. The trainer is Ray Train's ``DataParallelTrainer`` with :class:`HorovodConfig` as its
backend: before the training function runs, every worker of the group is asked what it runs (a worker at other
versions than the driver is one line), the ranks are placed by the nodes the workers landed on as ``horovodrun``
places them (:func:`~hvdkeras.engines.placement.slot_plan`), and Horovod's Gloo rendezvous starts on the trainer's
controller, answering only a new secret, which each worker gets in its environment with its ranks, its node's
network interface and the GPUs Ray gave it (:func:`hvdkeras.ray.executor.start_rendezvous`). Ray Train restarts the
whole group after a lost worker (``FailureConfig(max_failures=...)``); each start sets Horovod up again, and the
training function resumes from ``ray.train.get_checkpoint()``.

Imports Ray (``pip install 'hvdkeras[ray]'``).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Set

import ray
from ray.train.backend import Backend, BackendConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

from hvdkeras.engines.placement import slot_plan
from hvdkeras.ray.executor import Settings, start_rendezvous
from hvdkeras.ray.worker import identity, interface, set_environment
from hvdkeras.ray.worker_checks import check_workers


@dataclasses.dataclass
class HorovodConfig(BackendConfig):
    """Horovod's setup for a Ray Train group, with the fields of Ray's removed ``ray.train.horovod.HorovodConfig``.

    Args:
        nics: the network interfaces the ranks may use (None: the one that holds each node's Ray address).
        verbose: the rendezvous server's verbosity.
        key: accepted for Ray's signature; the rendezvous' secret is new for every start of the group.
        ssh_port: accepted and unused: the ranks meet through Gloo's rendezvous, not ssh.
        ssh_identity_file: accepted and unused.
        ssh_str: accepted and unused (Ray's wrote it to ``ssh_identity_file``; nothing is written here).
        timeout_s: Gloo's timeout for the ranks to meet and for a collective.
        placement_group_timeout_s: accepted for Ray's signature (Ray Train places the workers).
    """

    nics: Optional[Set[str]] = None
    verbose: int = 1
    key: Optional[str] = None
    ssh_port: Optional[int] = None
    ssh_identity_file: Optional[str] = None
    ssh_str: Optional[str] = None
    timeout_s: int = 300
    placement_group_timeout_s: int = 100

    @property
    def backend_cls(self) -> type:
        """The backend Ray Train runs for this config."""
        return _HorovodBackend


class _HorovodBackend(Backend):
    """Sets Horovod up on each start of a Ray Train group, and stops its rendezvous after."""

    share_cuda_visible_devices: bool = False  # each rank sees its node's GPUs in local-rank order (visible_gpus)

    def __init__(self) -> None:
        self._server: Any = None

    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        """Every worker checked, placed and given its Horovod settings, the rendezvous started."""
        assert isinstance(backend_config, HorovodConfig)
        count = len(worker_group)  # Ray Train's groups, old and new, know their size
        found = ray.get([worker_group.execute_single_async(i, identity) for i in range(count)])
        check_workers(found)
        plan = slot_plan([f["ip"] for f in found])
        nics = tuple(backend_config.nics) if backend_config.nics else None
        ifaces = ray.get([worker_group.execute_single_async(i, interface, f["ip"], nics) for i, f in enumerate(found)])
        settings = Settings(timeout_s=backend_config.timeout_s, nics=nics,
                            verbose=max(0, backend_config.verbose - 1))
        self._stop()
        self._server, envs = start_rendezvous(ray.util.get_node_ip_address(), plan, found, ifaces,
                                              any(f["gpus"] for f in found), settings, {"TF_CPP_MIN_LOG_LEVEL": "2"})
        ray.get([worker_group.execute_single_async(i, set_environment, env) for i, env in enumerate(envs)])

    def on_shutdown(self, worker_group: Any, backend_config: BackendConfig) -> None:
        """The rendezvous stopped."""
        self._stop()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class HorovodTrainer(DataParallelTrainer):
    """Ray Train's data-parallel trainer with Horovod's ranks, as Ray's removed ``HorovodTrainer`` took it.

    Args:
        train_loop_per_worker: the training function each worker runs (with ``train_loop_config`` if it takes an
            argument); it calls ``hvd.init()`` (``import hvdkeras.keras as hvd``), reports with
            ``ray.train.report`` and resumes from ``ray.train.get_checkpoint()``.
        train_loop_config: its argument.
        horovod_config: :class:`HorovodConfig` (default: its defaults).
        scaling_config: Ray Train's ``ScalingConfig`` (``num_workers``, ``use_gpu``, ``resources_per_worker``).
        dataset_config, run_config, datasets, metadata, resume_from_checkpoint: Ray Train's own.
    """

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: Optional[Dict[str, Any]] = None,
                 horovod_config: Optional[HorovodConfig] = None, scaling_config: Any = None,
                 dataset_config: Any = None, run_config: Any = None, datasets: Optional[Dict[str, Any]] = None,
                 metadata: Optional[Dict[str, Any]] = None, resume_from_checkpoint: Any = None):
        extra: Dict[str, Any] = {}
        if resume_from_checkpoint is not None:
            extra["resume_from_checkpoint"] = resume_from_checkpoint
        if dataset_config is not None:
            extra["dataset_config"] = dataset_config
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=horovod_config or HorovodConfig(), scaling_config=scaling_config,
                         run_config=run_config, datasets=datasets, metadata=metadata, **extra)
