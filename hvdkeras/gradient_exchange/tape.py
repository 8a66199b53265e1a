"""Horovod's ``DistributedGradientTape`` for Keras 2 and Keras 3 variables: a custom loop's gradients, averaged.

``horovod.tensorflow.DistributedGradientTape`` keys its gradients by ``Variable.ref()``,
which Keras 3 variables do not have (horovod#4290: ``'Variable' object has no attribute
'ref'``). This tape takes Horovod's arguments with Horovod's meaning and averages with
:func:`~hvdkeras.gradient_exchange.allreduce.allreduce_gradients`, keyed by
:func:`hvdkeras.runtime.compat.variable_key`, so it works with ``tf.Variable`` and Keras 2 and 3
variables alike. Executing eagerly, the requests of one call are issued from one traced
function, so Horovod fuses them as in a compiled step.

The gradients it returns are recorded as averaged (:mod:`~hvdkeras.gradient_exchange.averaged`):
a distributed optimizer that applies them does not average them again.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple, Type

import horovod.tensorflow as hvd
import tensorflow as tf

from hvdkeras.gradient_exchange import averaged
from hvdkeras.gradient_exchange.allreduce import allreduce_gradients, keys_of
from hvdkeras.gradient_exchange.options import ExchangeOptions, local_layer_list
from hvdkeras.runtime import compat

# Executing eagerly: one traced exchange per (options, variables, local variables), as Horovod caches its own.
_EAGER_EXCHANGES: Dict[Tuple, Any] = {}
_tape_classes: Dict[type, Type[_Distributed]] = {}


def _options_key(options: ExchangeOptions) -> Tuple:
    groups = options.groups
    if isinstance(groups, list):
        groups = tuple(tuple(compat.variable_key(v) for v in group) for group in groups)
    return (options.name, options.device_dense, options.device_sparse, options.compression, options.sparse_as_dense,
            options.gradient_predivide_factor, options.op, groups, options.process_set.process_set_id,
            options.scale_local_gradients)


def _exchange(grads: List, sources: List, options: ExchangeOptions, local: frozenset) -> List:
    if not tf.executing_eagerly():
        return allreduce_gradients(grads, sources, options, local)
    key = (_options_key(options), tuple(keys_of(sources, len(sources))), local)
    exchange = _EAGER_EXCHANGES.get(key)
    if exchange is None:
        def run(gradients):
            return allreduce_gradients(gradients, sources, options, local)

        exchange = _EAGER_EXCHANGES[key] = tf.function(run, reduce_retracing=True)
    return exchange(grads)


class _Distributed:
    """The methods every distributed tape adds to the class of the tape it wraps."""

    _hvd_base: Any  # the tf.GradientTape class it wraps
    _hvd_options: ExchangeOptions
    _hvd_local: set

    def register_local_source(self, source) -> None:
        """Keeps ``source``'s gradient out of the allreduce (Horovod's ``register_local_source``)."""
        self._hvd_local.add(compat.variable_key(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False, **kwargs):
        """``tf.GradientTape.gradient``, then every gradient averaged over ranks (local sources' kept).

        ``use_generic_names`` is Horovod's (its requests named ``grad_<i>``); here the
        requests are always named by position.
        """
        del use_generic_names
        flat_sources = tf.nest.flatten(sources)
        grads = self._hvd_base.gradient(self, target, flat_sources, output_gradients, **kwargs)
        reduced = _exchange(list(grads), flat_sources, self._hvd_options, frozenset(self._hvd_local))
        averaged.record(flat_sources, reduced)
        return tf.nest.pack_sequence_as(sources, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        """([(source, gradient)] of the local sources, [(source, gradient)] of the others), as Horovod's."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        pairs = list(zip(tf.nest.flatten(sources), tf.nest.flatten(grads)))
        local = [(s, g) for s, g in pairs if compat.variable_key(s) in self._hvd_local]
        return local, [(s, g) for s, g in pairs if compat.variable_key(s) not in self._hvd_local]


def _tape_class(base: type) -> Type[_Distributed]:
    cls = _tape_classes.get(base)
    if cls is None:
        cls = _tape_classes[base] = type(base.__name__, (_Distributed, base), {"_hvd_base": base,
                                                                               "__module__": base.__module__})
    return cls


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                            compression=hvd.Compression.none, sparse_as_dense=False, op=hvd.Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=hvd.global_process_set, scale_local_gradients=True):
    """``gradtape`` (a ``tf.GradientTape`` that has recorded the forward pass) whose ``gradient`` averages over ranks.

    Horovod's arguments, defaults and meaning (``horovod.tensorflow.DistributedGradientTape``):
    ``device_dense``/``device_sparse``, ``compression``, ``sparse_as_dense``, ``op``
    (``Average`` or ``Sum``), ``gradient_predivide_factor``, ``groups`` (``num_groups``,
    its older name), ``process_set`` and ``scale_local_gradients`` (see
    :class:`~hvdkeras.gradient_exchange.options.ExchangeOptions`).

    Returns:
        A tape of ``gradtape``'s class that shares its recording, with
        ``register_local_source`` and ``get_local_and_global_gradients``.
    """
    if num_groups and groups is None:
        groups = num_groups
    options = ExchangeOptions(device_dense=device_dense, device_sparse=device_sparse, compression=compression,
                              sparse_as_dense=sparse_as_dense, op=op,
                              gradient_predivide_factor=gradient_predivide_factor, groups=groups,
                              process_set=process_set, scale_local_gradients=scale_local_gradients,
                              name="DistributedGradientTape")
    cls = _tape_class(type(gradtape))
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)  # the same recording, persistence and watched variables
    tape._hvd_options = options
    tape._hvd_local = set()
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                                   compression=hvd.Compression.none, sparse_as_dense=False, op=hvd.Average,
                                   gradient_predivide_factor=1.0, num_groups=0, groups=None,
                                   process_set=hvd.global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """:func:`DistributedGradientTape` whose ``local_layers``' trainable variables keep their gradients local."""
    local_layers = local_layer_list(local_layers)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for layer in local_layers:
        for variable in layer.trainable_weights:
            tape.register_local_source(variable)
    return tape
