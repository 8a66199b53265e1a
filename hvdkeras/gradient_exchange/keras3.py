"""Keras 3: gradient averaging for Keras 3 optimizers through Horovod's TensorFlow ops.

Horovod 0.28.1's Keras layer (``horovod.tensorflow.keras``) does not work with
Keras 3, but its TensorFlow ops do. :func:`distribute` gives a Keras 3 optimizer
the behaviour of Horovod's ``DistributedOptimizer``: before the optimizer applies
anything, the gradients are averaged over ranks by Horovod's ops; Horovod moves
the bytes.

Overlap with the backward pass: ``apply`` runs inside the compiled train step, where
TensorFlow executes by data flow, not by line order. With ``groups=0`` (the
default) every dense gradient gets its own ``hvd.allreduce``, created in backward
order (the last layer's first); Horovod's allreduce op is asynchronous and not
stateful, so each request is handed to Horovod's background thread as soon as its
gradient exists, while the backward pass goes on, and that thread fuses whatever is
ready each cycle (``HOROVOD_CYCLE_TIME``) into buffers of up to
``HOROVOD_FUSION_THRESHOLD`` bytes. With ``groups=k`` the gradients, in backward
order, are split into ``k`` contiguous groups of nearly equal count (Horovod's
rule) and each group is one ``hvd.grouped_allreduce``, which leaves only when its
last gradient exists (``groups=1``: one request after the whole backward pass).

Options, as in Horovod's ``DistributedOptimizer``:

* ``compression``: ``"fp16"`` sends float32 gradients as float16 (Horovod's
  ``Compression.fp16``); ``"none"`` sends them as they are.
* ``sparse_as_dense``: embedding gradients (``tf.IndexedSlices``) are made dense
  and averaged with the others; otherwise they go through Horovod's sparse
  allreduce (an allgather of rows and indices, values divided by the size).
* ``backward_passes_per_step = N``: gradients are summed locally for ``N``
  batches into accumulator variables; on every ``N``-th batch the sum (divided by
  ``N`` when ``average_aggregated_gradients``) is averaged over ranks and applied
  once, then the accumulators are zeroed. The weights change on batches
  ``N, 2N, ...`` only.

Loss scaling under ``mixed_float16``: the ``LossScaleOptimizer`` itself is
wrapped, so the allreduce runs before its overflow check; every rank sees the same
reduced gradients and skips the same steps (no rank waits in an allreduce the
others skipped).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import horovod.tensorflow as hvd
import keras
import tensorflow as tf

from hvdkeras.gradient_exchange.compression import horovod_compression

_MARK = "_hvdkeras_distributed"


def is_distributed(optimizer) -> bool:
    return bool(getattr(optimizer, _MARK, False))


def split_groups(items: Sequence, groups: int) -> List[List]:
    """``items`` in ``groups`` contiguous runs whose lengths differ by at most one (Horovod's ``split_list``).

    >>> split_groups([1, 2, 3, 4, 5], 2)
    [[1, 2, 3], [4, 5]]
    """
    if groups < 1:
        raise ValueError(f"groups must be >= 1 to split; received: {groups}")
    groups = min(groups, len(items)) or 1
    size, extra = divmod(len(items), groups)
    bounds = [i * size + min(i, extra) for i in range(groups + 1)]
    return [list(items[bounds[i]:bounds[i + 1]]) for i in range(groups)]


def allreduce_gradients(grads: Sequence, compression: str = "none", sparse_as_dense: bool = False,
                        groups: int = 0) -> List:
    """Every gradient averaged over ranks (``None`` stays ``None``), in backward order.

    ``groups=0``: one request per dense gradient; ``groups=k``: ``k`` grouped requests
    (see the module docstring). Sparse gradients go through Horovod's sparse allreduce
    unless ``sparse_as_dense``.
    """
    if groups < 0:
        raise ValueError(f"groups must be >= 0 (0: one request per gradient); received: {groups}")
    codec = horovod_compression(compression)
    out: List = list(grads)
    dense_at = []
    # Backward order: the last variables' gradients are computed first.
    for i in reversed(range(len(out))):
        grad = out[i]
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            if not sparse_as_dense:
                out[i] = hvd.allreduce(grad, op=hvd.Average, name=f"hvdkeras.sparse_grad.{i}")
                continue
            out[i] = tf.convert_to_tensor(grad)
        dense_at.append(i)
    if groups == 0:
        for i in dense_at:
            out[i] = hvd.allreduce(out[i], op=hvd.Average, compression=codec, name=f"hvdkeras.grad.{i}")
    elif dense_at:
        for g, members in enumerate(split_groups(dense_at, groups)):
            reduced = hvd.grouped_allreduce([out[i] for i in members], op=hvd.Average, compression=codec,
                                            name=f"hvdkeras.grads.{g}")
            for i, r in zip(members, reduced):
                out[i] = r
    return out


def distribute(optimizer, compression: str = "none", backward_passes_per_step: int = 1,
               average_aggregated_gradients: bool = False, sparse_as_dense: bool = False, groups: int = 0):
    """A copy of the Keras 3 ``optimizer`` whose ``apply`` first averages the gradients over ranks.

    The copy is an instance of a subclass of the optimizer's own class, made from its
    config (as Horovod does), so ``isinstance`` checks, serialization of the
    hyperparameters and the optimizer's variables are those of the original.
    """
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1; received: {backward_passes_per_step}")
    if groups < 0:
        raise ValueError(f"groups must be >= 0 (0: one request per gradient); received: {groups}")
    horovod_compression(compression)
    if is_distributed(optimizer):
        raise ValueError(f"the optimizer is already distributed; received: {optimizer!r}")
    policy = keras.config.dtype_policy().name
    if policy == "mixed_float16" and not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)  # so the allreduce comes first (see above)
    if backward_passes_per_step > 1 and isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError("backward_passes_per_step > 1 with loss scaling (mixed_float16) is not supported on Keras 3; "
                         f"use mixed_bfloat16 or backward_passes_per_step=1. Received: {backward_passes_per_step}")
    base = type(optimizer)
    compression, passes = str(compression), int(backward_passes_per_step)
    average, sparse_as_dense, groups = bool(average_aggregated_gradients), bool(sparse_as_dense), int(groups)

    def build(self, variables):
        base.build(self, variables)
        if passes > 1:
            # One accumulator per trainable variable and a local batch counter; both are
            # optimizer variables, so they are broadcast and checkpointed with the rest.
            self._hvd_accumulators = [self.add_variable_from_reference(v, name="hvd_accumulator") for v in variables]
            self._hvd_pass = self.add_variable(shape=(), dtype="int64", initializer="zeros", name="hvd_local_pass")

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if passes == 1:
            return base.apply(self, allreduce_gradients(grads, compression, sparse_as_dense, groups),
                              trainable_variables)
        if not self.built:
            self.build(list(trainable_variables))
            self.built = True
        for acc, grad in zip(self._hvd_accumulators, grads):
            if grad is not None:
                acc.assign_add(tf.cast(tf.convert_to_tensor(grad), acc.dtype))
        self._hvd_pass.assign_add(1)

        def exchange_and_apply():
            summed: List[Optional[tf.Tensor]] = [
                None if g is None else tf.convert_to_tensor(acc) / passes if average else tf.convert_to_tensor(acc)
                for acc, g in zip(self._hvd_accumulators, grads)]
            base.apply(self, allreduce_gradients(summed, compression, sparse_as_dense=True, groups=groups),
                       trainable_variables)
            for acc in self._hvd_accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        # Every rank counts the same batches, so every rank takes the same branch.
        tf.cond(tf.equal(self._hvd_pass % passes, 0), exchange_and_apply, lambda: tf.constant(False))

    cls = type(f"Distributed{base.__name__}", (base,), {
        _MARK: True, "build": build, "apply": apply, "__module__": base.__module__,
        "hvd_options": dict(compression=compression, backward_passes_per_step=passes,
                            average_aggregated_gradients=average, sparse_as_dense=sparse_as_dense,
                            groups=groups),
    })
    return cls.from_config(optimizer.get_config())


def allreduce_outside_xla(optimizer, grads: Sequence, variables: Sequence) -> List:
    """For an XLA-compiled gradient step: nothing to do, this optimizer averages inside ``apply``."""
    del optimizer, variables
    return list(grads)
