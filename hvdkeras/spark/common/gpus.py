"""The GPU a rank in a Spark task uses: the one Spark assigned to its task, its local rank's, or none.

Where Spark schedules GPUs (``spark.task.resource.gpu.amount``, each worker announcing its own through
``spark.worker.resource.gpu.discoveryScript``), every task is assigned GPU addresses, and the task hands them
to the rank it starts: :mod:`hvdkeras.spark.gang`'s in ``HVDKERAS_SPARK_GPUS``, from its
``TaskContext.resources()``; Horovod's task service (``use_mpi=True``) through
``horovod.spark.task.get_available_devices``. A rank whose task was assigned one makes only that GPU visible
(``CUDA_VISIBLE_DEVICES``) and pins it, whatever its local rank, so two applications on one node never take
the same GPU. Without GPU scheduling each rank pins its local rank's GPU, as Horovod's ranks do; with
``use_gpu=False`` no rank sees a GPU.
"""
from __future__ import annotations

import sys
from typing import List, MutableMapping, Optional, Sequence

VISIBLE = "CUDA_VISIBLE_DEVICES"
GPUS_VAR = "HVDKERAS_SPARK_GPUS"  # the addresses a barrier-stage task hands its rank (hvdkeras.spark.gang)


def assigned() -> List[str]:
    """The GPU addresses Spark assigned to this rank's task (empty outside a Spark task or without GPU scheduling)."""
    import os

    listed = os.environ.get(GPUS_VAR)
    if listed is not None:
        return [address for address in listed.split(",") if address]
    if "horovod.spark.task" not in sys.modules:
        return []  # not a rank that Horovod's task service started: a barrier-stage rank whose task has no GPU
    from horovod.spark.task import get_available_devices

    return [str(address) for address in get_available_devices()]


def choose(use_gpu: bool, addresses: Sequence[str], environ: MutableMapping[str, str]) -> Optional[int]:
    """Makes this rank's GPU the one it sees, before TensorFlow looks for GPUs.

    Args:
        use_gpu: whether the rank may use a GPU; without, it sees none (``CUDA_VISIBLE_DEVICES=-1``).
        addresses: the GPU addresses Spark assigned to the rank's task (:func:`assigned`); the rank takes the
            first.
        environ: the process's environment (``os.environ``; tests pass a dict).

    Returns:
        Which visible GPU the rank pins: 0 when Spark assigned one (the only one it sees), else None (its local
        rank's, :func:`hvdkeras.runtime.distributed.init`).
    """
    if not use_gpu:
        environ[VISIBLE] = "-1"
        return None
    if not addresses:
        return None
    environ[VISIBLE] = addresses[0]
    return 0
