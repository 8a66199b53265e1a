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

import dataclasses
from typing import Any, List, Optional, Sequence

import keras
import tensorflow as tf

from hvdkeras.gradient_exchange import averaged
from hvdkeras.gradient_exchange.allreduce import allreduce_gradients, applied_after
from hvdkeras.gradient_exchange.options import ExchangeOptions
from hvdkeras.runtime import compat

_MARK = "_hvdkeras_distributed"


def is_distributed(optimizer) -> bool:
    """Whether the optimizer is one of :func:`distributed_class`'s (its gradients are already combined)."""
    return bool(getattr(optimizer, _MARK, False))


def distributed_class(base: Any, options: ExchangeOptions = ExchangeOptions()) -> Any:
    """The subclass of the Keras 3 optimizer class ``base`` whose ``apply`` first combines the gradients over ranks.

    It has ``base``'s name and module (Horovod's convention), so a model saved with it
    records the plain optimizer and loads without hvdkeras, and ``from_config`` of its
    ``get_config`` gives the same distributed optimizer.
    """
    passes = int(options.backward_passes_per_step)
    average = bool(options.average_aggregated_gradients)

    def init(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        self._hvd_local = set()
        self._hvd_local_layers = []

    def local_keys(self):
        return frozenset(self._hvd_local) | frozenset(
            compat.variable_key(v) for layer in self._hvd_local_layers for v in layer.trainable_weights)

    def register_local_var(self, var):
        """Keeps ``var``'s gradient out of the allreduce (Horovod's ``register_local_var``)."""
        self._hvd_local.add(compat.variable_key(var))

    def exchange(self, grads, variables, skip, accumulated=False):
        opts = dataclasses.replace(options, sparse_as_dense=True) if accumulated else options
        return allreduce_gradients(grads, variables, opts, local_keys(self), skip)

    def build(self, variables):
        base.build(self, variables)
        if passes > 1:
            # One accumulator per trainable variable and a local batch counter; both are
            # optimizer variables, so they are broadcast and checkpointed with the rest.
            self._hvd_accumulators = [self.add_variable_from_reference(v, name="hvd_accumulator") for v in variables]
            self._hvd_pass = self.add_variable(shape=(), dtype="int64", initializer="zeros", name="hvd_local_pass")

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = list(getattr(self, "_trainable_variables", None) or [] if trainable_variables is None
                         else trainable_variables)
        # Gradients a DistributedGradientTape averaged in this step are applied as they are.
        skip = averaged.averaged_keys(variables, grads) if len(variables) == len(grads) else set()
        if any(g is not None for g in grads) and len(skip) < sum(g is not None for g in grads):
            averaged.refuse_inside_cond()
        try:
            return _apply(self, grads, variables, trainable_variables, skip)
        finally:
            averaged.clear(variables)

    def _apply(self, grads, variables, trainable_variables, skip):
        if passes == 1:
            exchanged = exchange(self, grads, variables, skip)
            with applied_after(exchanged):  # the step counter and weight decay too: all or none
                return base.apply(self, exchanged, trainable_variables)
        if not self.built:
            self.build(variables)
            self.built = True
        for acc, grad in zip(self._hvd_accumulators, grads):
            if grad is not None:
                acc.assign_add(tf.cast(tf.convert_to_tensor(grad), acc.dtype))
        self._hvd_pass.assign_add(1)

        def exchange_and_apply():
            summed: List[Optional[tf.Tensor]] = [
                None if g is None else tf.convert_to_tensor(acc) / passes if average else tf.convert_to_tensor(acc)
                for acc, g in zip(self._hvd_accumulators, grads)]
            exchanged = exchange(self, summed, variables, skip, accumulated=True)
            with applied_after(exchanged):
                base.apply(self, exchanged, trainable_variables)
            for acc in self._hvd_accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        # Every rank counts the same batches, so every rank takes the same branch.
        tf.cond(tf.equal(self._hvd_pass % passes, 0), exchange_and_apply, lambda: tf.constant(False))

    return type(base.__name__, (base,), {
        _MARK: True, "__init__": init, "build": build, "apply": apply,
        "register_local_var": register_local_var, "__module__": base.__module__,
        "__qualname__": base.__qualname__, "hvd_options": options,
    })


def distribute(optimizer, options: ExchangeOptions = ExchangeOptions()):
    """A copy of the Keras 3 ``optimizer``, made from its config (as Horovod does), of :func:`distributed_class`."""
    if is_distributed(optimizer):
        raise ValueError(f"the optimizer is already distributed; received: {optimizer!r}")
    policy = keras.config.dtype_policy().name
    if policy == "mixed_float16" and not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)  # so the allreduce comes first (see above)
    passes = int(options.backward_passes_per_step)
    if passes > 1 and isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        raise ValueError("backward_passes_per_step > 1 with loss scaling (mixed_float16) is not supported on Keras 3; "
                         f"use mixed_bfloat16 or backward_passes_per_step=1. Received: {passes}")
    return distributed_class(type(optimizer), options).from_config(optimizer.get_config())


def load_model(filepath, custom_optimizers, custom_objects, options: ExchangeOptions, legacy_opts: bool = False):
    """``keras.models.load_model`` with the saved optimizer made distributed, its state kept (Horovod's ``load_model``).

    Every optimizer of ``keras.optimizers`` (and each of ``custom_optimizers``) is
    replaced, by its name, with its :func:`distributed_class`; ``custom_objects`` come last
    and win, as in Horovod.
    """
    if legacy_opts:
        raise ValueError("legacy_opts=True loads Keras 2's tf.keras.optimizers.legacy optimizers, which Keras 3 does "
                         "not have; load without it (Keras 3 reads the optimizer the model was saved with)")
    classes = [c for c in vars(keras.optimizers).values()
               if isinstance(c, type) and issubclass(c, keras.optimizers.Optimizer)]
    classes += list(custom_optimizers or [])
    objects = {}
    for cls in classes:
        distributed = distributed_class(cls, options)
        objects[cls.__name__] = objects[cls.__name__.lower()] = distributed
    objects.update(custom_objects or {})
    return keras.models.load_model(filepath, custom_objects=objects)


def add_local_layers(optimizer, layers: Sequence) -> None:
    """Makes the layers' trainable variables local; they are looked up at each exchange (lazily built layers too)."""
    optimizer._hvd_local_layers.extend(layers)


def allreduce_outside_xla(optimizer, grads: Sequence, variables: Sequence) -> List:
    """For an XLA-compiled gradient step: nothing to do, this optimizer averages inside ``apply``."""
    del optimizer, variables
    return list(grads)
