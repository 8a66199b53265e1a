"""Version differences between Keras stacks, kept in one place.

Today's stack is TensorFlow 2.15 with Keras 2 (``tf.keras``). Code elsewhere
imports ``keras`` from here and reads or writes optimizer hyperparameters through
these helpers, so supporting another Keras changes this module only.
"""
from __future__ import annotations

import tensorflow as tf

keras = tf.keras


def get_learning_rate(optimizer) -> float:
    """The optimizer's current learning rate as a Python float.

    Raises TypeError when the optimizer was built with a ``LearningRateSchedule``:
    hvdkeras' learning-rate callbacks own the rate and need a plain value.
    """
    # The public property evaluates a schedule at the current step; the stored value tells.
    lr = getattr(optimizer, "_learning_rate", None)
    lr = optimizer.learning_rate if lr is None else lr
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
        raise TypeError(
            "the optimizer's learning_rate is a LearningRateSchedule; hvdkeras' learning-rate callbacks need a "
            f"float learning rate (build the optimizer with learning_rate=<float>). Received: {lr!r}"
        )
    return float(keras.backend.get_value(lr))


def set_learning_rate(optimizer, value: float) -> None:
    """Sets the optimizer's learning rate in place (the compiled train step reads the variable)."""
    get_learning_rate(optimizer)  # same check and error as above
    lr = optimizer.learning_rate
    if hasattr(lr, "assign"):
        lr.assign(value)
    else:
        optimizer.learning_rate = value


def build_optimizer(optimizer, variables) -> None:
    """Creates the optimizer's slot variables now instead of at the first step."""
    optimizer.build(variables)


def optimizer_built(optimizer) -> bool:
    return bool(getattr(optimizer, "built", False)) or bool(getattr(optimizer, "_built", False))


def momentum_buffers(optimizer) -> list:
    """The velocity slots of SGD with momentum (empty for other optimizers or momentum 0).

    Keras' SGD keeps ``velocity = momentum * velocity - learning_rate * grad``: the
    rate is inside the velocity, which is what momentum correction rescales.
    """
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # under a LossScaleOptimizer
    if not isinstance(optimizer, keras.optimizers.SGD) or not getattr(optimizer, "momentum", 0):
        return []
    return list(getattr(optimizer, "momentums", []) or [])


class _ResumeAt:
    """What ``Model.fit`` asks, after ``on_train_begin``, for the epoch to start at."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
        return max(self.epoch, initial_epoch), 0


def start_fit_at_epoch(model, epoch: int) -> None:
    """Makes the running ``model.fit`` continue at ``epoch`` (call from ``on_train_begin``).

    Keras 2 reads ``model._training_state`` right after ``on_train_begin``; its own
    BackupAndRestore uses the same hook.
    """
    model._training_state = _ResumeAt(epoch)


def clear_fit_start(model) -> None:
    if isinstance(getattr(model, "_training_state", None), _ResumeAt):
        model._training_state = None


def set_mixed_precision(policy: str) -> None:
    """Sets Keras' global dtype policy ("none" restores float32) before models are built."""
    keras.mixed_precision.set_global_policy("float32" if policy == "none" else policy)


def optimizer_variables(optimizer) -> list:
    """Every variable of the optimizer's state: step counter, slots, and the learning-rate variable.

    Keras 2's ``optimizer.variables`` leaves out the learning rate, which a checkpoint
    restores and the learning-rate callbacks read; a broadcast must include it.
    """
    variables = list(optimizer.variables)
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    lr = getattr(inner, "_learning_rate", None)
    if isinstance(lr, tf.Variable) and not any(v is lr for v in variables):
        variables.append(lr)
    return variables
