"""Horovod's elastic state and run for Keras: :class:`KerasState` (a model's and optimizer's variables and keyword
attributes, committed, restored and synced as one), :class:`RunState` (the same with a run's position) and
:func:`run` (every failed Horovod collective a reset).

The user's API is :mod:`hvdkeras.elastic` (and ``hvd.elastic`` of :mod:`hvdkeras.keras`); the config path's
elastic driver (:mod:`hvdkeras.training.drivers.elastic`) uses :class:`RunState` and :func:`run` from here.
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

import numpy as np
import tensorflow as tf
from horovod.common.elastic import ObjectState, run_fn
from horovod.common.exceptions import HorovodInternalError

from hvdkeras.runtime import compat, distributed
from hvdkeras.runtime.position import RunPosition


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """``hvd.elastic.run`` (horovod.tensorflow), with every failed Horovod collective a reset.

    Horovod 0.28.1 turns a failed op into a reset only when its error names
    ``HorovodAllreduce``, ``HorovodAllgather`` or ``HorovodBroadcast``, and returns
    ``None`` for any other ``UnknownError``: a peer lost during a grouped allreduce
    (``HorovodGroupedAllreduce``, how :mod:`hvdkeras.gradient_exchange` averages on
    Keras 3) ended training early as if it had finished. Nor does the op in flight
    when a peer dies always name Horovod: it can fail with Gloo's text alone
    (``Read error ...: Connection reset by peer`` at ``{{node hvdkeras.grad.6}}``).
    Here any Horovod op's error (:func:`hvdkeras.runtime.distributed.is_horovod_op_failure`)
    resets and every other error propagates.
    """
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.UnknownError as exc:
            if distributed.is_horovod_op_failure(exc):
                raise HorovodInternalError(exc) from exc
            raise

    return run_fn(wrapper, distributed.reinit)


class KerasState(ObjectState):
    """Horovod's ``hvd.elastic.KerasState``: a model's and its optimizer's variables, plus ``kwargs``, kept in step.

    ``commit()`` copies them in memory on every rank (and checks for new hosts);
    after a lost rank, ``restore()`` rolls every rank back to the last commit; after a
    reset, ``sync()`` gives every rank rank 0's state (new workers included). The
    keyword arguments (``epoch=0, batch=0``) become attributes, committed and synced
    the same way.

    Unlike Horovod's (whose copy of the optimizer state is taken when the state is
    made and then misses the slots the first step creates), each commit records the
    variables that exist at that moment, and ``sync`` first creates the optimizer's
    slots, so a state made before ``fit`` covers the whole optimizer on Keras 2 and 3.
    The model must be built (Horovod's rule), or the variables to sync do not exist yet.
    """

    def __init__(self, model: Any, optimizer: Any = None, **kwargs: Any):
        if not getattr(model, "built", True) or not model.variables:
            raise ValueError("KerasState needs a built model, so there are weights to keep: add keras.Input(shape) "
                             "as the first layer or call model.build(input_shape) first. "
                             f"Received: model={getattr(model, 'name', model)!r} with no variables")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else model.optimizer
        self._saved: List[Tuple[Any, np.ndarray]] = []  # (Keras or TensorFlow variable, its value)
        super().__init__(bcast_object=lambda obj: distributed.broadcast_object(obj, name="hvdkeras.elastic"),
                         get_rank=distributed.rank, **kwargs)
        self._save_variables()

    def _variables(self):
        optimizer = [] if self.optimizer is None else compat.optimizer_variables(self.optimizer)
        return list(self.model.variables) + optimizer

    def _save_variables(self):
        self._saved = [(v, v.numpy()) for v in self._variables()]

    def save(self):
        """Copies the model's and optimizer's variables, and the keyword attributes, in memory (``commit()`` calls
        it, then checks for new hosts)."""
        self._save_variables()
        super().save()

    def restore(self):
        """Rolls the variables and the keyword attributes back to the last commit."""
        for variable, value in self._saved:
            variable.assign(value)
        super().restore()

    def sync(self):
        """Gives every rank rank 0's variables and attributes (the optimizer's slots created first), and keeps a
        copy of them, as :meth:`save` does."""
        if self.optimizer is not None and not compat.optimizer_built(self.optimizer):
            compat.build_optimizer(self.optimizer, self.model.trainable_variables)
        distributed.broadcast_variables(self._variables())
        self._save_variables()
        super().sync()


class RunState(KerasState):
    """A :class:`KerasState` whose position is a run's :class:`hvdkeras.runtime.position.RunPosition`.

    The position stays there, moved by the ``fit``'s
    :class:`~hvdkeras.callbacks.position_tracker.PositionTracker`; this state keeps no copy of it to keep up. A
    commit records it with the weights, and a rollback (``restore``) or a ``sync`` puts the committed one back
    (:meth:`~hvdkeras.runtime.position.RunPosition.place`).

    Args:
        model: the built model.
        position: the run's position, where the state starts (rank 0's is synced to the others).
    """

    def __init__(self, model: Any, position: RunPosition):
        self.position = position
        super().__init__(model, committed_at=position.here)

    def save(self):
        """Records the variables and the position."""
        self.committed_at = self.position.here
        super().save()

    def restore(self):
        """Rolls the variables and the position back to the last commit."""
        super().restore()
        self.position.place(*self.committed_at)

    def sync(self):
        """Gives every rank rank 0's committed variables and position."""
        super().sync()
        self.position.place(*self.committed_at)
