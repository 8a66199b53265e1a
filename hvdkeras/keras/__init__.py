"""Horovod's Keras API (``horovod.tensorflow.keras``, ``horovod.keras``) on Keras 2 and Keras 3.

A Horovod script switches with its import line::

    import hvdkeras.keras as hvd          # was: import horovod.tensorflow.keras as hvd

Every public name of Horovod 0.28.1's ``horovod.tensorflow.keras`` is here, with
Horovod's signatures, defaults and meaning: the process state (``init``, ``rank``,
``size``, ..., the ``*_built`` and ``*_enabled`` functions), ``Average``, ``Sum``,
``Compression``, process sets, :func:`DistributedOptimizer`,
:func:`PartialDistributedOptimizer` (``horovod.keras``'s), ``broadcast_global_variables``,
``allreduce``, ``allgather``, ``broadcast``, ``reducescatter``, :func:`load_model`,
``DistributedGradientTape`` and ``PartialDistributedGradientTape`` (``horovod.tensorflow``'s,
for a custom loop or ``train_step``; what they average is not averaged again),
:mod:`~hvdkeras.keras.callbacks` and :mod:`~hvdkeras.keras.elastic`. On Keras 2 the
gradient exchange is Horovod's own Keras optimizer; on Keras 3 (where Horovod's Keras
layer fails) it is hvdkeras', on Horovod's TensorFlow ops. ``docs/migrating.md`` lists
each name and what differs.
"""
from __future__ import annotations

from hvdkeras.runtime import distributed as _distributed  # noqa: F401  first: Horovod that does not load is one line

# isort: split
import horovod.tensorflow as _hvd
from horovod.tensorflow import (  # noqa: F401  (the process state, as Horovod's Keras module re-exports it)
    Average,
    Sum,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
    start_timeline,
    stop_timeline,
)
from horovod.tensorflow.compression import Compression  # noqa: F401
from horovod.tensorflow.mpi_ops import (  # noqa: F401
    ProcessSet,
    add_process_set,
    global_process_set,
    remove_process_set,
)

from hvdkeras import gradient_exchange as _gradient_exchange
from hvdkeras.gradient_exchange import (  # noqa: F401
    DistributedGradientTape,
    DistributedOptimizer,
    PartialDistributedGradientTape,
    PartialDistributedOptimizer,
)
from hvdkeras.gradient_exchange.options import ExchangeOptions as _ExchangeOptions
from hvdkeras.keras import callbacks, elastic  # noqa: F401
from hvdkeras.runtime import compat

_tf = compat.tf


def broadcast_global_variables(root_rank):
    """Horovod's TensorFlow 1 broadcast of the global variable collection; TensorFlow 2 has no such collection.

    Raises, as Horovod's does under eager execution, naming what to use instead.
    """
    raise RuntimeError(
        "broadcast_global_variables() needs TensorFlow 1's global variables, which TensorFlow 2 does not keep; "
        f"use hvd.callbacks.BroadcastGlobalVariablesCallback({root_rank}) in fit(callbacks=...), or "
        f"horovod.tensorflow.broadcast_variables(model.variables, root_rank={root_rank}) after the model is built")


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """``value`` (anything ``tf.constant`` takes) reduced over all ranks (default ``op``: ``Average``); a tensor."""
    return _hvd.allreduce(_tf.constant(value, name=name), average=average, prescale_factor=prescale_factor,
                          postscale_factor=postscale_factor, op=op, compression=compression)


def allgather(value, name=None):
    """``value`` of every rank, concatenated along the first dimension (which may differ between ranks)."""
    return _hvd.allgather(_tf.constant(value, name=name))


def broadcast(value, root_rank, name=None):
    """Rank ``root_rank``'s ``value`` on every rank."""
    return _hvd.broadcast(_tf.constant(value, name=name), root_rank)


def reducescatter(value, name=None, op=Average):
    """``value`` reduced over all ranks, each rank keeping its slice of the first dimension."""
    return _hvd.reducescatter(_tf.constant(value, name=name), op=op)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               legacy_opts=False):
    """Loads a saved Keras model with its optimizer wrapped in :func:`DistributedOptimizer`, its state kept.

    Horovod's ``load_model``: every optimizer of ``keras.optimizers`` is recognised by
    name; other optimizer classes go in ``custom_optimizers``; ``custom_objects`` as in
    Keras. On Keras 3 a model saved with a distributed optimizer also loads with plain
    ``keras.models.load_model`` (the optimizer then is the plain one).
    """
    return _gradient_exchange.load_model(filepath, custom_optimizers, custom_objects,
                                         _ExchangeOptions(compression=compression), legacy_opts)
