"""Horovod's TensorFlow API (``horovod.tensorflow``) on Keras 2 and Keras 3 variables.

A Horovod TensorFlow 2 script switches with its import line::

    import hvdkeras.tensorflow as hvd      # was: import horovod.tensorflow as hvd

Horovod's TensorFlow ops work on both stacks, but Horovod's gradient tape, its Keras
optimizer and its elastic Keras state fail on Keras 3 variables (horovod#4290:
``'Variable' object has no attribute 'ref'``). Here:

* the process state, reduction ops, ``Compression`` and process sets are Horovod's own;
* the collectives (``allreduce``, ``allgather``, ``broadcast``, their grouped forms,
  ``alltoall``, ``reducescatter``, ``broadcast_variables``) are Horovod's, given the
  ``tf.Variable`` behind a Keras 3 variable;
* :func:`DistributedGradientTape` and :func:`PartialDistributedGradientTape` are hvdkeras'
  (:mod:`hvdkeras.gradient_exchange.tape`): Horovod's arguments, and the gradients they
  average are not averaged again by a distributed optimizer;
* :func:`DistributedOptimizer` is Horovod's for a ``tf.compat.v1`` optimizer and
  :func:`hvdkeras.gradient_exchange.DistributedOptimizer` for a Keras optimizer;
* :mod:`~hvdkeras.tensorflow.elastic` is hvdkeras' elastic state and ``run``;
* ``SyncBatchNormalization`` is Horovod's on Keras 2 and raises on Keras 3 (Horovod's
  layer would train there without synchronizing anything).

``docs/migrating.md`` lists each name and what differs.
"""
from __future__ import annotations

import functools

from hvdkeras.runtime import distributed as _distributed  # noqa: F401  first: Horovod that does not load is one line

# isort: split
import horovod.tensorflow as _hvd
from horovod.tensorflow import (  # noqa: F401  (Horovod's own, re-exported)
    Adasum,
    Average,
    Max,
    Min,
    ProcessSet,
    Product,
    Sum,
    add_process_set,
    allgather_object,
    broadcast_object,
    broadcast_object_fn,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    global_process_set,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    join,
    local_rank,
    local_rank_op,
    local_size,
    local_size_op,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    process_set_included_op,
    rank,
    rank_op,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
    size_op,
    start_timeline,
    stop_timeline,
)
from horovod.tensorflow.compression import Compression  # noqa: F401

from hvdkeras import gradient_exchange as _gradient_exchange
from hvdkeras.gradient_exchange.tape import (  # noqa: F401
    DistributedGradientTape,
    PartialDistributedGradientTape,
)
from hvdkeras.runtime import compat
from hvdkeras.tensorflow import elastic  # noqa: F401


def _tf_values(value):
    """``value`` with every Keras 3 variable in it (also in a list or tuple) replaced by its ``tf.Variable``."""
    if isinstance(value, (list, tuple)):
        return type(value)(_tf_values(v) for v in value)
    return compat.tf_variables([value])[0]


def _on_tf_values(horovod_function):
    """Horovod's collective, given ``tf.Variable`` where the caller passed Keras 3 variables."""
    @functools.wraps(horovod_function)
    def collective(values, *args, **kwargs):
        return horovod_function(_tf_values(values), *args, **kwargs)

    return collective


# TensorFlow 1's graph-mode names, where this TensorFlow still has them (2.15: yes; 2.16 and later: no).
if hasattr(_hvd, "broadcast_global_variables"):
    broadcast_global_variables = _hvd.broadcast_global_variables
if hasattr(_hvd, "BroadcastGlobalVariablesHook"):
    BroadcastGlobalVariablesHook = _hvd.BroadcastGlobalVariablesHook

if compat.KERAS_3:
    def SyncBatchNormalization(*args, **kwargs):  # noqa: N802
        """Horovod's layer subclasses Keras 2's batch normalization; on Keras 3 it would not synchronize. Raises."""
        raise NotImplementedError(
            "SyncBatchNormalization is Horovod's Keras 2 layer: on Keras 3 its statistics would not be synchronized "
            "across ranks. Use keras.layers.BatchNormalization (hvdkeras' AverageModelStatisticsCallback averages the "
            "moving statistics at each epoch end), or the keras2 stack")
else:
    # Horovod's layer where Keras 3 has the function above (one name, two kinds: mypy's no-redef).
    from horovod.tensorflow import SyncBatchNormalization  # type: ignore[no-redef]  # noqa: F401

allreduce = _on_tf_values(_hvd.allreduce)
grouped_allreduce = _on_tf_values(_hvd.grouped_allreduce)
allgather = _on_tf_values(_hvd.allgather)
grouped_allgather = _on_tf_values(_hvd.grouped_allgather)
broadcast = _on_tf_values(_hvd.broadcast)
broadcast_ = _on_tf_values(_hvd.broadcast_)
alltoall = _on_tf_values(_hvd.alltoall)
reducescatter = _on_tf_values(_hvd.reducescatter)
grouped_reducescatter = _on_tf_values(_hvd.grouped_reducescatter)
broadcast_variables = _on_tf_values(_hvd.broadcast_variables)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",  # noqa: N802
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """``optimizer`` with its gradients averaged over ranks before they are applied (Horovod's arguments).

    A ``tf.compat.v1.train.Optimizer`` gets Horovod's own optimizer (``use_locking`` and
    ``op=Adasum`` apply to it only); a Keras optimizer gets
    :func:`hvdkeras.gradient_exchange.DistributedOptimizer`, on Keras 2 and Keras 3.
    """
    if isinstance(optimizer, compat.tf.compat.v1.train.Optimizer):
        return _hvd.DistributedOptimizer(
            optimizer, name=name, use_locking=use_locking, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            backward_passes_per_step=backward_passes_per_step, op=op,
            gradient_predivide_factor=gradient_predivide_factor,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients)
    if op == Adasum:
        raise ValueError("op=hvd.Adasum applies to tf.compat.v1 optimizers only (as in Horovod); a Keras optimizer "
                         "takes hvd.Average or hvd.Sum. Received: op=Adasum")
    return _gradient_exchange.DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)
