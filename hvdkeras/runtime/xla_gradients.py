"""An XLA-compiled forward and backward pass with the gradient allreduce outside XLA (``runtime.jit_compile``)."""
from __future__ import annotations

import tensorflow as tf

from hvdkeras import gradient_exchange
from hvdkeras.runtime import compat


def use_xla_gradients(model) -> None:
    """XLA-compiles the forward and backward pass of ``model``'s training step.

    Keras' own ``jit_compile=True`` compiles the whole step, Horovod's allreduce
    included, which only Horovod's GPU build with XLA ops can do. This step
    compiles loss and gradients, then averages the gradients with the
    ``DistributedOptimizer``'s own allreduce (same compression, grouping and
    options) outside XLA, and applies them through the optimizer (so loss scaling
    and gradient accumulation behave as without XLA).
    """
    optimizer = model.optimizer
    variables = model.trainable_variables

    @tf.function(jit_compile=True)
    def loss_and_gradients(x, y, sample_weight):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = compat.compute_loss(model, x, y, y_pred, sample_weight)
            scaled = compat.scaled_loss(optimizer, loss)
        return y_pred, loss, tape.gradient(scaled, variables)

    def train_step(data):
        x, y, sample_weight = compat.unpack_batch(data)
        y_pred, loss, grads = loss_and_gradients(x, y, sample_weight)
        compat.track_loss(model, loss, x)
        grads = gradient_exchange.allreduce_outside_xla(optimizer, grads, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return model.compute_metrics(x, y, y_pred, sample_weight)

    model.train_step = train_step
