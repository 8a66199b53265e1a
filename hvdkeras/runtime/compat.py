"""Version differences between the Keras stacks, kept in one place.

Two stacks are tested (see ``stacks/``): ``keras2`` (TensorFlow 2.15, Keras 2 as
``tf.keras``, ``tf.estimator``) and ``keras3`` (TensorFlow 2.21, Keras 3.15). Code
elsewhere imports ``keras`` from here and goes through these helpers wherever the
two differ. Besides this module, only :mod:`hvdkeras.gradient_exchange` reads the
version, to choose between its ``keras2`` and ``keras3`` modules; the estimator
(Keras 2 only) asks :func:`estimator_unavailable`.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
from typing import Any, Callable, List, Optional

import numpy as np
import tensorflow as tf  # the command lines import it first, quietly: hvdkeras.runtime.tensorflow_import.load()

if int(tf.__version__.split(".")[1]) >= 16:  # TF 2.16+: Keras 3 is `keras` (tf.keras points at it too)
    import keras
else:
    keras = tf.keras

KERAS_VERSION = importlib.metadata.version("keras")
KERAS_3 = int(KERAS_VERSION.split(".")[0]) >= 3
STACK = "keras3" if KERAS_3 else "keras2"
# Horovod 0.28.1's Keras layer (horovod.tensorflow.keras) works with Keras 2 only; its TensorFlow ops with both.
HOROVOD_KERAS_LAYER = not KERAS_3
# Keras 2's save_weights also writes TensorFlow checkpoint prefixes (name.index, name.data-*); Keras 3 only .weights.h5.
TF_CHECKPOINT_WEIGHTS = not KERAS_3
# TensorFlow 2.20+ no longer installs tensorboard, which tf.summary needs to write anything.
TENSORBOARD_INSTALLED = importlib.util.find_spec("tensorboard") is not None
# Keras 3's model.fit fails under tf.distribute.MultiWorkerMirroredStrategy (keras-team/keras#20585).
FIT_UNDER_MULTI_WORKER_STRATEGY = not KERAS_3


def _float(value) -> float:
    return float(np.asarray(value))


def get_learning_rate(optimizer) -> float:
    """The optimizer's current learning rate as a Python float.

    Raises TypeError when the optimizer was built with a ``LearningRateSchedule``:
    hvdkeras' learning-rate callbacks own the rate and need a plain value.
    """
    # The public property evaluates a schedule at the current step; the stored value tells. A loss-scale
    # optimizer's rate is its inner optimizer's (Keras 3's keeps an unused rate of 0 of its own).
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    lr = getattr(optimizer, "_learning_rate", None)
    lr = optimizer.learning_rate if lr is None else lr
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
        raise TypeError(
            "the optimizer's learning_rate is a LearningRateSchedule; hvdkeras' learning-rate callbacks need a "
            f"float learning rate (build the optimizer with learning_rate=<float>). Received: {lr!r}"
        )
    return _float(lr)


def set_learning_rate(optimizer, value: float) -> None:
    """Sets the optimizer's learning rate in place (the compiled train step reads the variable)."""
    get_learning_rate(optimizer)  # same check and error as above
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    lr = optimizer.learning_rate
    if hasattr(lr, "assign"):
        lr.assign(value)
    else:
        optimizer.learning_rate = value


def build_optimizer(optimizer, variables) -> None:
    """Creates the optimizer's slot variables now instead of at the first step."""
    optimizer.build(variables)
    optimizer.built = True  # Keras 3 sets this in apply(), not in build()


def optimizer_built(optimizer) -> bool:
    """Whether the optimizer's variables are built (Keras 2 and Keras 3 attributes)."""
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

    Keras 2 reads ``model._training_state`` right after ``on_train_begin``, Keras 3
    ``model._initial_epoch``; their own BackupAndRestore callbacks use the same hooks.
    """
    if KERAS_3:
        model._initial_epoch = epoch
    else:
        model._training_state = _ResumeAt(epoch)


def clear_fit_start(model) -> None:
    """Undoes :func:`start_fit_at_epoch`: the next ``model.fit`` starts where its arguments say."""
    if KERAS_3:
        model._initial_epoch = None
    elif isinstance(getattr(model, "_training_state", None), _ResumeAt):
        model._training_state = None


def set_mixed_precision(policy: str) -> None:
    """Sets Keras' global dtype policy ("none" restores float32) before models are built."""
    keras.mixed_precision.set_global_policy("float32" if policy == "none" else policy)


@contextlib.contextmanager
def mixed_precision(policy: str):
    """Keras' global dtype policy set to ``policy`` inside the block only (models built there keep it)."""
    previous = keras.mixed_precision.global_policy()
    set_mixed_precision(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def optimizer_variables(optimizer) -> list:
    """Every variable of the optimizer's state: step counter, slots, and the learning-rate variable.

    Keras 2's ``optimizer.variables`` leaves out the learning rate, which a checkpoint
    restores and the learning-rate callbacks read; a broadcast must include it.
    """
    variables = list(optimizer.variables)
    if KERAS_3:  # the step counter and the learning rate are among them
        return variables
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    lr = getattr(inner, "_learning_rate", None)
    if isinstance(lr, tf.Variable) and not any(v is lr for v in variables):
        variables.append(lr)
    return variables


def tf_variables(variables) -> list:
    """The ``tf.Variable`` behind each Keras variable (Keras 3 wraps them), for Horovod's ops."""
    if not KERAS_3:
        return list(variables)
    return [v.value if isinstance(v, keras.Variable) else v for v in variables]


def variable_key(variable):
    """A hashable identity of a variable, the same for a Keras 3 variable and the ``tf.Variable`` behind it."""
    if KERAS_3 and isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.ref() if hasattr(variable, "ref") else id(variable)


def dtype(variable) -> tf.DType:
    """The ``tf.DType`` of a variable or tensor (Keras 3 variables give their dtype as a string)."""
    return tf.as_dtype(variable.dtype)


def metric_results(metric) -> dict:
    """``{log key: value}`` of one metric of ``model.metrics``, as ``fit`` writes them to the logs.

    Keras 3 puts all compiled metrics into one metric whose result is a dict (and
    which has no result before its first update); Keras 2 lists each metric.
    """
    if KERAS_3 and not metric.variables and not metric.built:
        return {}
    result = metric.result()
    return dict(result) if isinstance(result, dict) else {metric.name: result}


def output_names(model) -> Optional[list]:
    """The names ``compile`` addresses the model's outputs by (in a loss, metrics or loss-weights mapping, and in
    the labels): the keys of the mapping a functional model returns, else its output layers' names, in the order
    of its outputs; None when the outputs are not known before a first call (a subclassed model).

    Both stacks compile a model returning a mapping by its keys, but Keras 2 names the metrics of
    ``metrics.jsonl`` by the output layers' (``<layer>_loss``) and Keras 3 by the keys: a layer named as its key
    gives the same names on both.
    """
    struct = getattr(model, "_outputs_struct" if KERAS_3 else "_nested_outputs", None)
    if isinstance(struct, dict):
        return sorted(struct)
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):
        return None
    if not outputs:
        return None
    return [tensor._keras_history[0].name for tensor in outputs]


def count_examples_in_output_losses(model) -> None:
    """Makes each output's loss metric (``<output>_loss``) count examples, as the total ``loss`` does.

    Keras 3 (3.15) weighs a batch's loss of an output by the batch's static size, and a batch
    whose size is not static (the last, smaller one of a validation pass) by 1, as if it were
    one example: over batches of several sizes ``val_<output>_loss`` is then not the loss over
    the examples, on one process as over ranks. Here every batch counts by its size (Keras 2
    does so). Idempotent; nothing on Keras 2 or for a model with one loss.
    """
    compile_loss = getattr(model, "_compile_loss", None) if KERAS_3 else None
    if compile_loss is None or getattr(compile_loss, "_hvdkeras_counts_examples", False):
        return
    sizes: List[Any] = []  # the size of the batch whose loss is being computed (traced)
    call, build = compile_loss.call, compile_loss.build

    def count(metric):
        update = metric.update_state

        def update_state(values, sample_weight=None):
            if sample_weight is None and sizes:
                sample_weight = sizes[-1]
            return update(values, sample_weight=sample_weight)

        metric.update_state = update_state

    def sized_call(y_true, y_pred, sample_weight=None):
        sizes.append(tf.cast(tf.shape(tf.nest.flatten(y_pred)[0])[0], tf.float32))
        try:
            return call(y_true, y_pred, sample_weight)
        finally:
            sizes.pop()

    def counting_build(y_true, y_pred):
        build(y_true, y_pred)
        for metric in compile_loss.metrics:
            count(metric)

    if compile_loss.built:  # steps already traced keep the old count: trace them again
        for metric in compile_loss.metrics:
            count(metric)
        model.train_function = model.test_function = None
    compile_loss.call, compile_loss.build = sized_call, counting_build
    compile_loss._hvdkeras_counts_examples = True


def steps_per_execution(model) -> int:
    """How many batches one call of ``model``'s compiled train step runs (Keras' ``steps_per_execution``)."""
    value = getattr(model, "steps_per_execution" if KERAS_3 else "_steps_per_execution", 1)
    return int(value.numpy() if hasattr(value, "numpy") else value or 1)


_COUNTED = "_hvdkeras_counted"  # on a train function wrapped by count_steps: the function it wraps


def count_steps(model, on_step: Callable[[], object]) -> bool:
    """Calls ``on_step()`` each time the running ``fit``'s train function returns, before any callback's hook.

    Call from ``on_train_begin``: Keras 2 and 3 both make ``model.train_function`` before it and
    call it once per step. A step that raises is not counted. :func:`uncount_steps` undoes it; a
    later call wraps the function again, not the wrapper.

    Returns:
        False when ``model`` has no train function to wrap (nothing is counted).
    """
    current = getattr(model, "train_function", None)
    if current is None:
        return False
    inner = getattr(current, _COUNTED, current)

    def train_function(*args, **kwargs):
        logs = inner(*args, **kwargs)
        on_step()
        return logs

    setattr(train_function, _COUNTED, inner)
    model.train_function = train_function
    return True


def uncount_steps(model) -> None:
    """Undoes :func:`count_steps`: ``model``'s train function is Keras' own again."""
    inner = getattr(getattr(model, "train_function", None), _COUNTED, None)
    if inner is not None:
        model.train_function = inner


def progbar_steps_kwargs() -> dict:
    """``ProgbarLogger`` arguments for a bar counting steps (Keras 3 counts steps and has no ``count_mode``)."""
    return {} if KERAS_3 else {"count_mode": "steps"}


def check_save_path(filepath: str, save_weights_only: bool) -> None:
    """Raises ValueError, as Keras' own ``ModelCheckpoint`` does, for a file name this Keras cannot save to.

    Keras 3 saves weights to ``*.weights.h5`` and models to ``*.keras`` (or legacy
    ``*.h5``) only; Keras 2 also writes TensorFlow checkpoints and SavedModels.
    """
    if not KERAS_3:
        return
    path = str(filepath)
    if save_weights_only and not path.endswith(".weights.h5"):
        raise ValueError("with save_weights_only=True the filepath must end in `.weights.h5` on Keras 3 "
                         f"({KERAS_VERSION}). Received: filepath={path}")
    if not save_weights_only and not path.endswith((".keras", ".h5")):
        raise ValueError(f"the filepath must end in `.keras` (or `.h5`) on Keras 3 ({KERAS_VERSION}). "
                         f"Received: filepath={path}")


def unpack_batch(data):
    """(x, y, sample_weight) of one batch as ``Model.fit`` passes it to ``train_step``."""
    return keras.utils.unpack_x_y_sample_weight(data)


def compute_loss(model, x, y, y_pred, sample_weight):
    """The model's training loss for one batch, with the Keras 2 or Keras 3 signature of ``compute_loss``."""
    if KERAS_3:
        return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
    return model.compute_loss(x, y, y_pred, sample_weight)


def scaled_loss(optimizer, loss):
    """The loss a custom train step differentiates: times the loss scale under a loss-scale optimizer."""
    if hasattr(optimizer, "get_scaled_loss"):  # Keras 2's LossScaleOptimizer
        return optimizer.get_scaled_loss(loss)
    if hasattr(optimizer, "scale_loss"):  # Keras 3: every optimizer; the identity without loss scaling
        return optimizer.scale_loss(loss)
    return loss


def loss_scale(optimizer) -> Optional[float]:
    """The current dynamic loss scale of a ``LossScaleOptimizer`` (Keras 2 or 3); None for any other optimizer."""
    scale = getattr(optimizer, "dynamic_scale", None)  # Keras 3
    if scale is None and hasattr(optimizer, "get_scaled_loss"):  # Keras 2's LossScaleOptimizer
        scale = optimizer.loss_scale
    if scale is None:
        return None
    return float(scale.numpy() if hasattr(scale, "numpy") else scale)


def track_loss(model, loss, x) -> None:
    """Records a custom train step's loss in the model's ``loss`` metric, weighted by the batch size.

    Keras 2's ``compute_loss`` does it itself; Keras 3's built-in ``train_step`` does
    it after calling ``compute_loss``, so a replacement step must too.
    """
    if KERAS_3:
        model._loss_tracker.update_state(loss, sample_weight=tf.shape(tf.nest.flatten(x)[0])[0])


def estimator_unavailable() -> str:
    """Why ``tf.estimator`` cannot be used here, or "" when it can."""
    if not KERAS_3 and hasattr(getattr(tf, "estimator", None), "Estimator"):
        return ""
    return (f"tf.estimator is not available on this stack (TensorFlow {tf.__version__}, Keras {KERAS_VERSION}); "
            "the Estimator API needs the keras2 stack: make install STACK=keras2 (the default) and run there")


def trace_horovod_without_autograph() -> None:
    """Lets a traced step call Horovod's Python code as it is, without autograph's rewrite of it.

    Horovod's TensorFlow functions were written for graph mode (TF1 sessions): their
    branches on tensors are explicit ``tf.cond``, so autograph's conversion adds
    nothing to the graph. It still costs time at every job's start: on Keras 2 the
    traced step reaches Horovod's ``allreduce_grads``, ``allreduce`` and their helpers,
    and converting them is a noticeable part of a short job
    (docs/performance.md#figures-behind-defaults). The rule is added to autograph's table (``CONVERSION_RULES``, where
    TensorFlow lists its own and Keras' modules) once; a TensorFlow without that table
    is left as it is.
    """
    try:
        from tensorflow.python.autograph.core import config as autograph_config
    except ImportError:
        return
    rules = tuple(getattr(autograph_config, "CONVERSION_RULES", ()))
    if not rules or any(isinstance(rule, autograph_config.DoNotConvert) and rule.matches("horovod")
                        for rule in rules):
        return
    autograph_config.CONVERSION_RULES = (autograph_config.DoNotConvert("horovod"),) + rules


def export_saved_model(model, path: str) -> None:
    """``model.export(path)``: a SavedModel with a serving signature, quietly. Keras 3 prints the signature
    unless told ``verbose=False``; Keras 2's takes no such argument and prints it to stdout.

    A functional model taking a mapping of inputs is served from that mapping on both stacks
    (``serve({"basket": ..., "visitor": ...})``): Keras 2's ``export`` would flatten it to a list.
    """
    if KERAS_3:
        model.export(path, verbose=False)
        return
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        inputs = getattr(model, "_nested_inputs", None)
        if not isinstance(inputs, dict):
            model.export(path)
            return
        archive = keras.export.ExportArchive()
        archive.track(model)
        spec = {name: tf.TensorSpec(tensor.shape, tensor.dtype, name=name) for name, tensor in inputs.items()}
        archive.add_endpoint("serve", model.__call__, [spec])
        archive.write_out(path)
