"""One step's gradients averaged over ranks with Horovod's TensorFlow ops, for any Keras version.

This is the exchange of the Keras 3 optimizer (:mod:`~hvdkeras.gradient_exchange.keras3`) and
of :func:`~hvdkeras.gradient_exchange.tape.DistributedGradientTape` on both stacks. With
``groups=None`` every dense gradient gets its own ``hvd.allreduce``, created in backward order
(the last layer's first); Horovod's allreduce op is asynchronous and not stateful, so inside a
traced step each request reaches Horovod's background thread as soon as its gradient exists,
while the backward pass goes on, and that thread fuses whatever is ready each cycle. With
``groups=k`` the gradients, in backward order, are split into ``k`` contiguous groups of nearly
equal count (Horovod's rule), each one ``hvd.grouped_allreduce``.
"""
from __future__ import annotations

import contextlib
from typing import Any, Collection, Iterator, List, Optional, Sequence

import horovod.tensorflow as hvd
import tensorflow as tf

from hvdkeras.gradient_exchange.options import ExchangeOptions
from hvdkeras.runtime import compat


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


def _dense(grad):
    return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad


def keys_of(variables: Optional[Sequence], count: int) -> List[Any]:
    """The identity (:func:`hvdkeras.runtime.compat.variable_key`) of each variable, or ``None`` for each of
    ``count``."""
    if variables is not None and len(variables) == count:
        return [compat.variable_key(v) for v in variables]
    return [None] * count


def allreduce_gradients(grads: Sequence, variables: Optional[Sequence] = None,
                        options: ExchangeOptions = ExchangeOptions(), local: Collection = frozenset(),
                        skip: Collection = frozenset()) -> List:
    """Every gradient combined over the ranks of ``options.process_set`` (``None`` stays ``None``), in backward order.

    Args:
        grads: one gradient per variable: a tensor, ``tf.IndexedSlices`` or ``None``.
        variables: the variables, in the same order (for ``groups`` given as lists of
            variables, and for ``local`` and ``skip``).
        options: Horovod's ``DistributedOptimizer`` arguments. ``groups`` None: one
            request per gradient; ``k``: ``k`` grouped requests of the dense gradients;
            a list of lists of variables: one grouped request per list, every other
            gradient its own. Sparse gradients go through Horovod's sparse allreduce
            unless ``sparse_as_dense``.
        local: keys of variables whose gradients stay local; with
            ``scale_local_gradients`` they are divided by the size of the process set
            (Horovod's rule).
        skip: keys of variables whose gradients were already averaged (by a
            ``DistributedGradientTape``): returned as they are.

    Returns:
        The combined gradients, in the order of ``grads``.
    """
    out: List = [_dense(g) if options.sparse_as_dense else g for g in grads]
    keys = keys_of(variables, len(out))
    prefix = options.name or "hvdkeras"
    prescale, postscale = options.scale_factors
    common = dict(op=options.op, prescale_factor=prescale, postscale_factor=postscale,
                  compression=options.compression, device_dense=options.device_dense,
                  device_sparse=options.device_sparse, process_set=options.process_set)
    sent: List[int] = []
    kept: List[int] = []
    # Backward order: the last variables' gradients are computed first.
    for i in reversed(range(len(out))):
        if out[i] is None or (keys[i] is not None and keys[i] in skip):
            continue
        (kept if keys[i] in local else sent).append(i)
    sparse = [i for i in sent if isinstance(out[i], tf.IndexedSlices)]
    dense = [i for i in sent if not isinstance(out[i], tf.IndexedSlices)]
    for i in sparse:
        out[i] = hvd.allreduce(out[i], name=f"{prefix}.sparse_grad.{i}", **common)
    groups = options.groups
    if groups is None:
        for i in dense:
            out[i] = hvd.allreduce(out[i], name=f"{prefix}.grad.{i}", **common)
    else:
        if isinstance(groups, int):
            runs = split_groups(dense, groups) if dense else []
        else:  # lists of variables (the options made every sequence a list)
            position = {keys[i]: i for i in dense}
            runs = [[position.pop(compat.variable_key(v)) for v in group if compat.variable_key(v) in position]
                    for group in groups]
            runs = [run for run in runs if run] + [[i] for i in dense if i in position.values()]
        for g, members in enumerate(runs):
            reduced = hvd.grouped_allreduce([out[i] for i in members], name=f"{prefix}.grads.{g}", **common)
            for i, r in zip(members, reduced):
                out[i] = r
    if kept and options.scale_local_gradients:
        ranks = tf.cast(options.process_set.size(), tf.float32)
        for i in kept:
            grad = out[i]
            if isinstance(grad, tf.IndexedSlices):
                out[i] = tf.IndexedSlices(grad.values / tf.cast(ranks, grad.values.dtype), grad.indices,
                                          grad.dense_shape)
            else:
                out[i] = grad / tf.cast(ranks, grad.dtype)
    return released_together(out)


def _arrived(grads: Sequence) -> List:
    """The tensors that carry ``grads`` (a sparse gradient's values and indices), ``None`` left out."""
    return [t for g in grads if g is not None
            for t in ((g.values, g.indices) if isinstance(g, tf.IndexedSlices) else (g,))]


def released_together(grads: Sequence) -> List:
    """``grads`` as they are, each released to what uses it only once every one of them has arrived.

    In a traced step. Horovod's allreduce ops are not stateful, so otherwise a variable's update
    runs as soon as its own averaged gradient is back: a step whose exchange fails midway (a
    rank lost or frozen after sending part of its gradients) leaves some variables updated and
    the others not. Released together, a step's updates run all or none, and a rank's variables
    after a failed step are those of its last whole batch, which rank 0 may then save alone
    (:meth:`hvdkeras.callbacks.backup_and_restore.BackupAndRestore.save_alone`). Eagerly, each
    allreduce has returned already: nothing to do. What an optimizer changes without reading a
    gradient waits with :func:`applied_after`.
    """
    out = list(grads)
    if tf.executing_eagerly():
        return out
    arrived = _arrived(out)
    if len(arrived) < 2:
        return out
    with tf.control_dependencies(arrived):
        return [None if g is None
                else tf.IndexedSlices(tf.identity(g.values), tf.identity(g.indices), g.dense_shape)
                if isinstance(g, tf.IndexedSlices) else tf.identity(g) for g in out]


@contextlib.contextmanager
def applied_after(grads: Sequence) -> Iterator[None]:
    """In a traced step, every op created in the block waits until all of ``grads`` have arrived.

    For the optimizer's apply: its step counter (``iterations``) and its weight decay read no
    gradient, so without this they run while the exchange is still under way, and a step whose
    exchange fails leaves the counter one ahead and the weights decayed once. Eagerly, nothing
    to wait for.
    """
    arrived = [] if tf.executing_eagerly() else _arrived(list(grads))
    if not arrived:
        yield
        return
    with tf.control_dependencies(arrived):
        yield
