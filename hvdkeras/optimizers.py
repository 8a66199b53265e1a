"""Optimizers by name, the learning-rate scaling rule, and the Horovod wrapper.

Linear scaling rule (Goyal et al. 2017): when the global batch grows, the
learning rate grows with it. ``optimizer.learning_rate`` in the config is the
single-process rate; the optimizer gets::

    ranks:        scaled_lr = learning_rate * num_ranks
    global_batch: scaled_lr = learning_rate * global_batch_size / base_batch_size
    none:         scaled_lr = learning_rate

Warmup (``schedule.warmup_epochs``) starts from ``scaled_lr / num_ranks``.

:func:`DistributedOptimizer` is the one call that averages gradients over ranks,
the same in user code on both stacks: on Keras 2 it is Horovod's own Keras
``DistributedOptimizer`` (the only place hvdkeras uses Horovod's Keras layer), on
Keras 3 :mod:`hvdkeras.gradient_exchange` (Horovod's ``grouped_allreduce``).
"""
from __future__ import annotations

from hvdkeras import compat
from hvdkeras.config import HorovodConfig, OptimizerConfig
from hvdkeras.registry import Registry

keras = compat.keras

REGISTRY = Registry("optimizer", "optimizer.name")


def names():
    return REGISTRY.names()


def scaled_learning_rate(cfg: OptimizerConfig, num_ranks: int, global_batch_size: int) -> float:
    """The rate after the scaling rule in ``cfg.lr_scaling`` (formulas in the module docstring)."""
    if cfg.lr_scaling == "ranks":
        return cfg.learning_rate * num_ranks
    if cfg.lr_scaling == "global_batch":
        return cfg.learning_rate * global_batch_size / cfg.base_batch_size
    return cfg.learning_rate


def _common(cfg: OptimizerConfig) -> dict:
    return {"clipnorm": cfg.clipnorm} if cfg.clipnorm else {}


@REGISTRY.register("sgd")
def sgd(cfg: OptimizerConfig, lr: float):
    return keras.optimizers.SGD(learning_rate=lr, momentum=cfg.momentum, nesterov=cfg.nesterov, **_common(cfg))


@REGISTRY.register("adam")
def adam(cfg: OptimizerConfig, lr: float):
    return keras.optimizers.Adam(learning_rate=lr, **_common(cfg))


@REGISTRY.register("adamw")
def adamw(cfg: OptimizerConfig, lr: float):
    return keras.optimizers.AdamW(learning_rate=lr, weight_decay=cfg.weight_decay, **_common(cfg))


@REGISTRY.register("rmsprop")
def rmsprop(cfg: OptimizerConfig, lr: float):
    return keras.optimizers.RMSprop(learning_rate=lr, momentum=cfg.momentum, **_common(cfg))


def DistributedOptimizer(optimizer, compression: str = "none", backward_passes_per_step: int = 1,  # noqa: N802
                         average_aggregated_gradients: bool = False, sparse_as_dense: bool = False):
    """``optimizer`` with its gradients averaged over ranks before they are applied.

    Same options and meaning as Horovod's ``DistributedOptimizer``: ``compression``
    ("none" or "fp16", the wire format of the allreduce), ``backward_passes_per_step``
    (local gradient accumulation before one allreduce), ``average_aggregated_gradients``
    (divide the accumulated sum by the passes), ``sparse_as_dense`` (embedding
    gradients averaged as dense tensors).
    """
    if compat.KERAS_3:
        from hvdkeras import gradient_exchange

        return gradient_exchange.distribute(optimizer, compression, backward_passes_per_step,
                                            average_aggregated_gradients, sparse_as_dense)
    import horovod.tensorflow.keras as hvd_keras

    if compression not in ("none", "fp16"):
        raise ValueError(f"compression must be 'none' or 'fp16'; received: {compression!r}")
    return hvd_keras.DistributedOptimizer(
        optimizer,
        compression=hvd_keras.Compression.fp16 if compression == "fp16" else hvd_keras.Compression.none,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        sparse_as_dense=sparse_as_dense,
    )


def distributed_optimizer(optimizer, cfg: HorovodConfig):
    """:func:`DistributedOptimizer` with the options of the config's ``horovod`` section."""
    return DistributedOptimizer(optimizer, compression=cfg.compression,
                                backward_passes_per_step=cfg.backward_passes_per_step,
                                average_aggregated_gradients=cfg.average_aggregated_gradients,
                                sparse_as_dense=cfg.sparse_as_dense)


def build(cfg: OptimizerConfig, horovod: HorovodConfig, num_ranks: int, global_batch_size: int):
    """(distributed optimizer at the scaled rate, scaled rate)."""
    lr = scaled_learning_rate(cfg, num_ranks, global_batch_size)
    return distributed_optimizer(REGISTRY.get(cfg.name)(cfg, lr), horovod), lr


def use_xla_gradients(model) -> None:
    """XLA-compiles the forward and backward pass of ``model``'s training step.

    Keras' own ``jit_compile=True`` compiles the whole step, Horovod's allreduce
    included, which only Horovod's GPU build with XLA ops can do. This step
    compiles loss and gradients, then averages the gradients with the
    ``DistributedOptimizer``'s own allreduce (same compression, grouping and
    options) outside XLA, and applies them through the optimizer (so loss scaling
    and gradient accumulation behave as without XLA).
    """
    import tensorflow as tf

    from hvdkeras import gradient_exchange

    optimizer = model.optimizer
    # hvdkeras' own distributed optimizer (Keras 3) averages, then unscales, inside apply(). Horovod's
    # (Keras 2, perhaps inside Keras' LossScaleOptimizer) averages when it computes gradients, which
    # this step does itself: its allreduce and the unscaling are called here, outside XLA.
    averages_in_apply = gradient_exchange.is_distributed(optimizer)
    horovod_optimizer = getattr(optimizer, "inner_optimizer", optimizer)
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
        if not averages_in_apply:
            grads = horovod_optimizer._allreduce(grads, variables)  # Horovod's own averaging, outside XLA
            grads = compat.unscaled_gradients(optimizer, grads)
        optimizer.apply_gradients(zip(grads, variables))
        return model.compute_metrics(x, y, y_pred, sample_weight)

    model.train_step = train_step
