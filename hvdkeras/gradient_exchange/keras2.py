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
import tensorflow as tf

from hvdkeras.gradient_exchange import averaged
from hvdkeras.gradient_exchange.allreduce import applied_after, released_together
from hvdkeras.gradient_exchange.options import ExchangeOptions
from hvdkeras.runtime import compat


def distribute(optimizer, options: ExchangeOptions):
    """Horovod's Keras ``DistributedOptimizer`` around ``optimizer``, with the same options, averaging on every path.

    Horovod's optimizer averages when gradients are computed (``minimize``, ``fit``'s own
    step). Here it also averages in ``apply_gradients`` and ``aggregate_gradients`` the
    gradients nobody averaged in this step (:mod:`~hvdkeras.gradient_exchange.averaged`):
    those of a custom ``train_step`` or loop that calls ``apply_gradients`` itself, which
    Horovod's optimizer applies unaveraged, so that each rank trains alone.
    """
    distributed = hvd_keras.DistributedOptimizer(
        optimizer, name=options.name, device_dense=options.device_dense, device_sparse=options.device_sparse,
        compression=options.compression, sparse_as_dense=options.sparse_as_dense,
        gradient_predivide_factor=options.gradient_predivide_factor, op=options.op,
        backward_passes_per_step=options.backward_passes_per_step,
        average_aggregated_gradients=options.average_aggregated_gradients, groups=options.groups,
        process_set=options.process_set, scale_local_gradients=options.scale_local_gradients)
    _average_on_every_path(distributed)
    return distributed


def _average_on_every_path(optimizer) -> None:
    """Makes ``optimizer`` (Horovod's, on Keras 2) average the gradients it is given to apply, once.

    Every average goes through Horovod's ``_allreduce`` (its compression, groups, local
    variables and gradient accumulation) and is recorded; ``apply_gradients`` and
    ``aggregate_gradients`` (which a ``LossScaleOptimizer`` calls before its overflow check,
    so that all ranks check the same gradients) average what is not recorded yet.
    Methods are set on the instance: Horovod's class calls ``super(self.__class__, self)``,
    which a subclass would turn into a recursion.
    """
    horovod_allreduce = optimizer._allreduce

    def _allreduce(grads, variables):
        reduced = released_together(horovod_allreduce(grads, variables))  # a step's updates: all or none
        averaged.record(list(variables), list(reduced))
        return reduced

    def _averaged_once(grads_and_vars):
        pairs = list(grads_and_vars)
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        done = averaged.averaged_keys(variables, grads)
        pending = [g is not None and compat.variable_key(v) not in done for g, v in pairs]
        if not any(pending):
            return pairs, variables
        averaged.refuse_inside_cond()
        if all(pending[i] or pairs[i][0] is None for i in range(len(pairs))):
            reduced = optimizer._allreduce(grads, variables)
        else:  # some were averaged by a tape: only the others go out
            rest = [i for i, p in enumerate(pending) if p]
            part = optimizer._allreduce([grads[i] for i in rest], [variables[i] for i in rest])
            reduced = list(grads)
            for i, g in zip(rest, part):
                reduced[i] = g
        return list(zip(reduced, variables)), variables

    horovod_apply = optimizer.apply_gradients

    def apply_gradients(grads_and_vars, *args, **kwargs):
        pairs, variables = _averaged_once(grads_and_vars)
        try:
            with applied_after([g for g, _ in pairs]):  # the step counter and weight decay too: all or none
                return horovod_apply(pairs, *args, **kwargs)
        finally:
            averaged.clear(variables)

    optimizer._allreduce = _allreduce
    optimizer.apply_gradients = apply_gradients
    for name in ("aggregate_gradients", "_aggregate_gradients"):
        keras_aggregate = getattr(optimizer, name, None)
        if keras_aggregate is not None:
            def aggregate(grads_and_vars, _keras_aggregate=keras_aggregate):
                return _keras_aggregate(_averaged_once(grads_and_vars)[0])

            setattr(optimizer, name, aggregate)


def add_local_layers(optimizer, layers: Sequence) -> None:
    """Registers the layers' trainable variables as local (Horovod's ``register_local_var``) at the first exchange.

    Horovod's ``PartialDistributedOptimizer`` registers them when it is built, which
    misses a layer whose variables the first step creates; here they are registered
    when the gradients are first averaged, in the traced step, after the model is built.
    """
    if not layers:
        return
    averaged_by_horovod = optimizer._allreduce

    def _allreduce(grads, variables):
        for layer in layers:
            for variable in layer.trainable_weights:
                optimizer.register_local_var(variable)
        return averaged_by_horovod(grads, variables)

    optimizer._allreduce = _allreduce


def _loader(cls, options: ExchangeOptions) -> type:
    """What Keras' deserialization finds for the optimizer class ``cls``: its ``from_config`` wraps the result."""

    def from_config(config, custom_objects=None):
        return distribute(cls.from_config(config), options)

    return type(cls.__name__, (), {"from_config": staticmethod(from_config), "__doc__": f"Distributed {cls.__name__}"})


def load_model(filepath, custom_optimizers, custom_objects, options: ExchangeOptions, legacy_opts: bool = False):
    """Horovod's ``load_model``: the saved optimizer wrapped in the distributed optimizer, its state kept.

    Horovod 0.28.1's own finds the optimizer in an HDF5 file only: in a ``.keras`` file
    the class is recorded as ``horovod._keras.Adam`` (say), and Horovod's lower-case
    names are never looked up. Here every optimizer class of ``keras.optimizers`` (of
    ``keras.optimizers.legacy`` with ``legacy_opts``) and of ``custom_optimizers`` is
    also known by its exact name, in both formats; ``custom_objects`` win, as in Horovod.
    """
    module = tf.keras.optimizers.legacy if legacy_opts else tf.keras.optimizers
    base = module.Optimizer
    classes = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, base) and c is not base]
    objects = {cls.__name__: _loader(cls, options) for cls in classes + list(custom_optimizers or [])}
    objects.update(custom_objects or {})
    return hvd_keras.load_model(filepath, custom_optimizers=custom_optimizers, custom_objects=objects,
                                compression=options.compression, legacy_opts=legacy_opts)


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
