"""Every path a Keras user applies gradients by, trained on this rank's slice of the same global batches.

Imported by ``same_training.py`` (run on 1 and on 2 ranks): each case trains the same small
model from the same weights for ``STEPS`` batches of the global batch of 64 (1 x 64 or
2 x 32) and returns its weights. Data-parallel training is right on a path when two ranks
end with one process's weights (``model.fit``'s own step is ``same_training.py``'s part 2). The
cases, with ``hvdkeras.keras as hvd``:

* ``apply_gradients``: keras.io's custom ``train_step`` (its own tape, then
  ``self.optimizer.apply_gradients``), also with ``backward_passes_per_step=2``
  (``apply_gradients_accumulated``) and under a ``LossScaleOptimizer`` (``apply_gradients_loss_scale``);
* ``apply``: Keras 3 only, a ``train_step`` that calls ``self.optimizer.apply(grads, variables)``;
* ``minimize``: Keras 2 only (Keras 3 optimizers have no ``minimize``),
  ``self.optimizer.minimize(loss, var_list, tape=tape)``; each of the two also
  ``_accumulated`` and ``_loss_scale``;
* ``tape``: Horovod's TensorFlow 2 loop: ``hvd.DistributedGradientTape`` and a plain
  optimizer in a ``tf.function``; ``tape_eager``: the same loop without ``tf.function``;
  ``tape_loss_scale``: with a (plain) ``LossScaleOptimizer``;
* ``tape_and_optimizer``: the tape feeding a distributed optimizer with ``op=hvd.Sum``:
  averaged once, the weights are one process's; averaged twice (the sum of two equal
  averages), the step would be twice as long;
* ``tape_and_accumulating_optimizer``: the tape feeding a distributed optimizer with
  ``backward_passes_per_step=2``.

The ``LossScaleOptimizer`` case runs in float32 with a dynamic
scale, so its scaling and unscaling are exact and the result is comparable bit for bit.
"""
from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import numpy as np
import tensorflow as tf

import hvdkeras.keras as hvd
from hvdkeras.runtime import compat
from hvdkeras.training import data as data_lib

keras = compat.keras
STEPS = 6
GLOBAL_BATCH = 64
LR = 0.1


def _batches(rank, size):
    pixels, labels = data_lib.digits_arrays()
    x_all = (pixels / 16.0).astype("float32")
    order = np.random.RandomState(5).permutation(len(x_all))[: STEPS * GLOBAL_BATCH].reshape(STEPS, GLOBAL_BATCH)
    per_rank = GLOBAL_BATCH // size
    mine = order[:, rank * per_rank:(rank + 1) * per_rank]
    return [(tf.constant(x_all[rows]), tf.constant(labels[rows].astype("int32"))) for rows in mine]


def _layers():
    keras.utils.set_random_seed(7)  # the same initial weights on every rank and in every case
    return [keras.Input((64,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(10)]


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _loss_scale(optimizer):
    if compat.KERAS_3:
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return keras.mixed_precision.LossScaleOptimizer(optimizer)


class CustomStep(keras.Model):
    """keras.io's "Customizing what happens in fit()" model, applying its gradients by ``how``."""

    how = "apply_gradients"

    def train_step(self, data):
        x, y = data
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            loss = LOSS(y, self(x, training=True))
            if self.how == "minimize":
                pass
            elif hasattr(self.optimizer, "get_scaled_loss"):  # Keras 2's LossScaleOptimizer
                scaled = self.optimizer.get_scaled_loss(loss)
            elif hasattr(self.optimizer, "scale_loss"):  # Keras 3's
                scaled = self.optimizer.scale_loss(loss)
            else:
                scaled = loss
        if self.how == "minimize":
            self.optimizer.minimize(loss, variables, tape=tape)
            return {"loss": loss}
        grads = tape.gradient(scaled, variables)
        if hasattr(self.optimizer, "get_unscaled_gradients"):
            grads = self.optimizer.get_unscaled_gradients(grads)
        if self.how == "apply":
            self.optimizer.apply(grads, variables)
        else:
            self.optimizer.apply_gradients(zip(grads, variables))
        return {"loss": loss}


def _custom_step(batches, how, optimizer):
    inputs, *layers = _layers()
    outputs = inputs
    for layer in layers:
        outputs = layer(outputs)
    model = CustomStep(inputs, outputs)
    model.how = how
    model.compile(optimizer=optimizer)
    model.fit(_dataset(batches), epochs=1, steps_per_epoch=STEPS, verbose=0)
    return model


def _dataset(batches):
    xs, ys = (tf.stack(t) for t in zip(*batches))
    return tf.data.Dataset.from_tensor_slices((xs, ys))


def _tape_loop(batches, optimizer, eager=False, **tape_args):
    model = keras.Sequential(_layers())

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = LOSS(y, model(x, training=True))
            if hasattr(optimizer, "get_scaled_loss"):  # Keras 2's LossScaleOptimizer
                loss = optimizer.get_scaled_loss(loss)
            elif hasattr(optimizer, "scale_loss"):  # Keras 3's
                loss = optimizer.scale_loss(loss)
        tape = hvd.DistributedGradientTape(tape, **tape_args)
        grads = tape.gradient(loss, model.trainable_variables)
        if hasattr(optimizer, "get_unscaled_gradients"):
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = step if eager else tf.function(step)
    for x, y in batches:
        step(x, y)
    return model


def run(rank, size):
    """{case: [weights]} after ``STEPS`` batches on this rank's slices, and the weights they start from ("initial")."""
    batches = _batches(rank, size)
    sgd = keras.optimizers.SGD
    cases = {
        "apply_gradients": lambda: _custom_step(batches, "apply_gradients", hvd.DistributedOptimizer(sgd(LR))),
        "apply_gradients_accumulated": lambda: _custom_step(
            batches, "apply_gradients", hvd.DistributedOptimizer(sgd(LR), backward_passes_per_step=2)),
        "tape": lambda: _tape_loop(batches, sgd(LR)),
        "tape_eager": lambda: _tape_loop(batches, sgd(LR), eager=True),
        "tape_and_optimizer": lambda: _tape_loop(batches, hvd.DistributedOptimizer(sgd(LR), op=hvd.Sum)),
        "tape_and_accumulating_optimizer": lambda: _tape_loop(
            batches, hvd.DistributedOptimizer(sgd(LR), backward_passes_per_step=2)),
    }
    if compat.KERAS_3:
        # Keras 3: the loss-scale optimizer is made distributed, so the allreduce precedes its overflow check.
        def scaled(**kwargs):
            return hvd.DistributedOptimizer(_loss_scale(sgd(LR)), **kwargs)
        own = "apply"  # Keras 3's own way to apply, besides apply_gradients
    else:
        # Keras 2: compile's own wrapping, around the distributed optimizer.
        def scaled(**kwargs):
            return _loss_scale(hvd.DistributedOptimizer(sgd(LR), **kwargs))
        own = "minimize"  # Keras 2's, which Keras 3 optimizers do not have
    cases.update({
        "apply_gradients_loss_scale": lambda: _custom_step(batches, "apply_gradients", scaled()),
        own: lambda: _custom_step(batches, own, hvd.DistributedOptimizer(sgd(LR))),
        f"{own}_accumulated": lambda: _custom_step(
            batches, own, hvd.DistributedOptimizer(sgd(LR), backward_passes_per_step=2)),
        f"{own}_loss_scale": lambda: _custom_step(batches, own, scaled()),
        "tape_loss_scale": lambda: _tape_loop(batches, _loss_scale(sgd(LR))),
    })
    out = {"initial": [v.numpy() for v in keras.Sequential(_layers()).trainable_variables]}
    out.update({name: [v.numpy() for v in make().trainable_variables] for name, make in cases.items()})
    return out
