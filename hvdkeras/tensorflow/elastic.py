"""Horovod's ``horovod.tensorflow.elastic``: ``run``, ``TensorFlowKerasState``, ``TensorFlowState``, ``ObjectState``.

:func:`run` is :func:`hvdkeras.elastic.run` (every failed Horovod collective is a reset);
:class:`TensorFlowKerasState` is :class:`hvdkeras.elastic.KerasState` with Horovod's
``backend`` argument; :class:`TensorFlowState` takes Keras 3 variables as well as
``tf.Variable``.
"""
from __future__ import annotations

from horovod.common.elastic import ObjectState
from horovod.tensorflow import elastic as _horovod_elastic

from hvdkeras.runtime import compat
from hvdkeras.runtime.elastic_state import KerasState, run

__all__ = ["ObjectState", "TensorFlowKerasState", "TensorFlowState", "run"]


class TensorFlowKerasState(KerasState):
    """A Keras model's and optimizer's variables plus ``kwargs``, committed, restored and synced as one state.

    Horovod's arguments: ``model`` (built), ``optimizer`` (default: the model's),
    ``backend`` (TensorFlow 1's Keras backend; TensorFlow 2 runs eagerly and needs none),
    and keyword attributes such as ``batch=0, epoch=0``.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.backend = backend
        super().__init__(model, optimizer, **kwargs)


class TensorFlowState(_horovod_elastic.TensorFlowState):
    """Horovod's state of a list of variables (``tf.Variable`` or Keras 3 variables), plus ``kwargs``."""

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is not None:
            variables = compat.tf_variables(variables)
        super().__init__(variables, session, **kwargs)
