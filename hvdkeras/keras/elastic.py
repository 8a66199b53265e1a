"""Horovod's ``horovod.tensorflow.keras.elastic``: ``KerasState``, its three callbacks and ``run``.

:class:`~hvdkeras.elastic.KerasState` keeps the model's and optimizer's variables and any
keyword attributes (``epoch``, ``batch``); :func:`~hvdkeras.elastic.run` re-runs the
training function after a reset, with the state synced from rank 0 (every failed
Horovod collective is a reset, also the grouped allreduce Horovod's own ``run`` lets
through). Launch with ``horovodrun --min-np ... --host-discovery-script ...``.
"""
from hvdkeras.callbacks.elastic_commits import (  # noqa: F401
    CommitStateCallback,
    UpdateBatchStateCallback,
    UpdateEpochStateCallback,
)
from hvdkeras.runtime.elastic_state import KerasState, run  # noqa: F401

__all__ = ["CommitStateCallback", "KerasState", "UpdateBatchStateCallback", "UpdateEpochStateCallback", "run"]
