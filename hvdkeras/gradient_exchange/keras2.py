"""Keras 2: gradient averaging by Horovod's own Keras ``DistributedOptimizer`` (``horovod.tensorflow.keras``).

Horovod 0.28.1's Keras layer works with Keras 2 (``tf.keras`` of TensorFlow 2.15)
only; this module is the one place hvdkeras uses it. The wrapped optimizer averages
the gradients when they are computed (``get_gradients`` / ``_compute_gradients``),
before a ``LossScaleOptimizer`` around it unscales and checks them.

What Horovod 0.28.1's Keras optimizer does with ``groups=0`` (its default): one
``hvd.allreduce`` per gradient, each inside a ``tf.cond`` on "more than one rank",
created in variable (forward) order inside the compiled train step. The ops are
asynchronous and not stateful, so TensorFlow starts each as soon as its gradient
exists: the requests leave in backward order and overlap the backward pass, and
Horovod's background thread fuses whatever is ready each cycle. ``groups=k`` splits
the gradients, in forward order, into ``k`` ``grouped_allreduce`` requests.
"""
from __future__ import annotations

from typing import List, Sequence

import horovod.tensorflow.keras as hvd_keras

from hvdkeras.gradient_exchange.compression import horovod_compression


def distribute(optimizer, compression: str = "none", backward_passes_per_step: int = 1,
               average_aggregated_gradients: bool = False, sparse_as_dense: bool = False, groups: int = 0):
    """Horovod's Keras ``DistributedOptimizer`` around ``optimizer``, with the same options."""
    if groups < 0:
        raise ValueError(f"groups must be >= 0 (0: one request per gradient); received: {groups}")
    return hvd_keras.DistributedOptimizer(
        optimizer, compression=horovod_compression(compression), backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, sparse_as_dense=sparse_as_dense,
        groups=groups or None)


def allreduce_outside_xla(optimizer, grads: Sequence, variables: Sequence) -> List:
    """For an XLA-compiled gradient step: the average Horovod's optimizer would have computed, unscaled.

    Horovod's Keras optimizer averages inside ``_compute_gradients``, which a custom
    step does not call. Its ``_allreduce`` (private in Horovod 0.28.1, the last
    release) applies the optimizer's own compression, grouping, sparse handling and
    gradient accumulation; it is called here, outside XLA, and nowhere else. Under a
    ``LossScaleOptimizer`` the averaged gradients are then unscaled, as its
    ``get_gradients`` would.
    """
    horovod_optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    averaged = list(horovod_optimizer._allreduce(list(grads), list(variables)))
    if hasattr(optimizer, "get_unscaled_gradients"):
        averaged = optimizer.get_unscaled_gradients(averaged)
    return averaged
