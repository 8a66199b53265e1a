"""How gradients are averaged over ranks: one call, two implementations, chosen here by the Keras major version.

* :mod:`~hvdkeras.gradient_exchange.keras2`: Horovod's own Keras ``DistributedOptimizer``
  (Keras 2, TensorFlow 2.15).
* :mod:`~hvdkeras.gradient_exchange.keras3`: a subclass of the Keras 3 optimizer
  whose ``apply`` first averages with Horovod's TensorFlow ops (Horovod's Keras
  layer does not run on Keras 3).

On both, by default, each gradient is its own request, issued as the backward pass
produces it, so communication overlaps computation and Horovod fuses what is ready.

Both take Horovod's options with Horovod's meaning. This is the only module besides
:mod:`hvdkeras.compat` that reads the Keras version.
"""
from __future__ import annotations

from hvdkeras import compat, distributed
from hvdkeras.gradient_exchange.compression import COMPRESSIONS
from hvdkeras.horovod_env import resolve_compression

if compat.KERAS_3:
    from hvdkeras.gradient_exchange import keras3 as _exchange
else:
    from hvdkeras.gradient_exchange import keras2 as _exchange

IMPLEMENTATION = _exchange.__name__
allreduce_outside_xla = _exchange.allreduce_outside_xla

__all__ = ["COMPRESSIONS", "DistributedOptimizer", "IMPLEMENTATION", "allreduce_outside_xla"]


def DistributedOptimizer(optimizer, compression: str = "none", backward_passes_per_step: int = 1,  # noqa: N802
                         average_aggregated_gradients: bool = False, sparse_as_dense: bool = False,
                         groups: int = 0):
    """``optimizer`` with its gradients averaged over ranks before they are applied.

    Same options and meaning as Horovod's ``DistributedOptimizer``: ``compression``
    ("none" or "fp16", the wire format of the allreduce; "auto": fp16 when the ranks
    span several hosts, else none, see :func:`hvdkeras.horovod_env.resolve_compression`),
    ``backward_passes_per_step`` (local gradient accumulation before one allreduce), ``average_aggregated_gradients``
    (divide the accumulated sum by the passes), ``sparse_as_dense`` (embedding
    gradients averaged as dense tensors), ``groups`` (0: one request per gradient,
    sent as soon as the backward pass produces it; ``k``: ``k`` grouped requests).
    The same call on Keras 2 and Keras 3.
    """
    compression = resolve_compression(compression, multi_host=distributed.spans_hosts())
    return _exchange.distribute(optimizer, compression, backward_passes_per_step, average_aggregated_gradients,
                                sparse_as_dense, groups)
