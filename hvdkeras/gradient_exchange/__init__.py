"""How gradients are averaged over ranks: one call, two implementations, chosen here by the Keras major version.

* :mod:`~hvdkeras.gradient_exchange.keras2`: Horovod's own Keras ``DistributedOptimizer``
  (Keras 2, TensorFlow 2.15).
* :mod:`~hvdkeras.gradient_exchange.keras3`: a subclass of the Keras 3 optimizer
  whose ``apply`` first averages with Horovod's TensorFlow ops (Horovod's Keras
  layer does not run on Keras 3).

Gradients a custom loop averages itself, with
:func:`~hvdkeras.gradient_exchange.tape.DistributedGradientTape`, are recorded
(:mod:`~hvdkeras.gradient_exchange.averaged`) and not averaged again when applied.

On both, by default, each gradient is its own request, issued as the backward pass
produces it, so communication overlaps computation and Horovod fuses what is ready.

Both take Horovod's arguments with Horovod's meaning (:class:`~hvdkeras.gradient_exchange.options.ExchangeOptions`).
This is the only module besides :mod:`hvdkeras.runtime.compat` that reads the Keras version.
"""
from __future__ import annotations

from types import ModuleType

from hvdkeras.runtime import distributed as _distributed  # noqa: F401  first: Horovod that does not load is one line

# isort: split
import horovod.tensorflow as hvd

from hvdkeras.common.horovod_env import resolve_compression
from hvdkeras.gradient_exchange.compression import COMPRESSIONS
from hvdkeras.gradient_exchange.options import ExchangeOptions, local_layer_list
from hvdkeras.gradient_exchange.tape import DistributedGradientTape, PartialDistributedGradientTape
from hvdkeras.runtime import compat, distributed

_exchange: ModuleType  # keras3 or keras2, by the stack
if compat.KERAS_3:
    from hvdkeras.gradient_exchange import keras3 as _exchange
else:
    from hvdkeras.gradient_exchange import keras2 as _exchange

IMPLEMENTATION = _exchange.__name__
allreduce_outside_xla = _exchange.allreduce_outside_xla
load_model = _exchange.load_model

__all__ = ["COMPRESSIONS", "DistributedGradientTape", "DistributedOptimizer", "ExchangeOptions", "IMPLEMENTATION",
           "PartialDistributedGradientTape", "PartialDistributedOptimizer", "allreduce_outside_xla"]


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802
                         compression=hvd.Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0,
                         op=hvd.Average, backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=hvd.global_process_set,
                         scale_local_gradients=True):
    """``optimizer`` with its gradients averaged over ranks before they are applied.

    Horovod's ``DistributedOptimizer`` (``horovod.tensorflow.keras``): the same arguments,
    defaults and meaning, on Keras 2 and Keras 3.

    Args:
        optimizer: The Keras optimizer to wrap.
        name: Prefix of the allreduce requests (default "Distributed<optimizer class>").
        device_dense: Where the requests of dense gradients are placed.
        device_sparse: Where the requests of sparse gradients are placed.
        compression: The wire format: Horovod's ``hvd.Compression.none`` /
            ``hvd.Compression.fp16`` or hvdkeras' names "none", "fp16" and "auto" (fp16 when the
            ranks span several hosts, else none, see :func:`hvdkeras.common.horovod_env.resolve_compression`).
        sparse_as_dense: Embedding gradients averaged as dense tensors.
        gradient_predivide_factor: See :class:`~hvdkeras.gradient_exchange.options.ExchangeOptions`.
        op: See :class:`~hvdkeras.gradient_exchange.options.ExchangeOptions`.
        backward_passes_per_step: ``N``: gradients summed locally for ``N`` batches, then one
            allreduce and one update.
        average_aggregated_gradients: The ``N`` batches' sum is divided by ``N``.
        num_groups: Horovod's older name of ``groups``.
        groups: ``None`` or 0, one request per gradient sent as soon as the backward pass
            produces it; ``k``: ``k`` grouped requests; a list of lists of variables: one
            request per list.
        process_set: See :class:`~hvdkeras.gradient_exchange.options.ExchangeOptions`.
        scale_local_gradients: See :class:`~hvdkeras.gradient_exchange.options.ExchangeOptions`.

    Returns:
        An instance of the original optimizer's class (a subclass with the same name, so a
        model saved with it loads without hvdkeras).
    """
    if num_groups and groups is None:
        groups = num_groups  # Horovod's deprecated name
    if isinstance(compression, str):
        compression = resolve_compression(compression, multi_host=distributed.spans_hosts())
    options = ExchangeOptions(
        name=name, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step, average_aggregated_gradients=average_aggregated_gradients,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    compat.trace_horovod_without_autograph()
    return _exchange.distribute(optimizer, options)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802
                                compression=hvd.Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=hvd.Average, groups=None,
                                process_set=hvd.global_process_set, local_layers=None, scale_local_gradients=True,
                                backward_passes_per_step=1, average_aggregated_gradients=False):
    """:func:`DistributedOptimizer` whose ``local_layers`` keep their gradients local (``horovod.keras``'s).

    Horovod 0.28.1's arguments in its order; ``backward_passes_per_step`` and
    ``average_aggregated_gradients`` (added to Horovod after its last release) follow.

    The gradients of the trainable variables of ``local_layers`` (one layer or a list)
    are never averaged: each rank applies its own, divided by the number of ranks when
    ``scale_local_gradients`` (Horovod's default). Unlike Horovod's, the layers' variables
    are looked up when the gradients are first applied, so layers built lazily (by the
    first step) are local too.
    """
    local_layers = local_layer_list(local_layers)
    optimizer = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step, average_aggregated_gradients=average_aggregated_gradients,
        groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    _exchange.add_local_layers(optimizer, local_layers)
    return optimizer
