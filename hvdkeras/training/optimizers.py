"""Optimizers by name, built at the scaled learning rate and wrapped for data-parallel training.

The rate is :func:`hvdkeras.common.scaling.scaled_learning_rate` (the linear scaling rule);
the wrapper is :func:`hvdkeras.gradient_exchange.DistributedOptimizer` with the
options of the config's ``horovod`` section. :data:`V1` is the same names as
``tf.compat.v1.train`` optimizers, for the Estimator path (:mod:`hvdkeras.tf_estimator`):
a name added here reaches both.
"""
from __future__ import annotations

from hvdkeras.common.errors import ConfigError
from hvdkeras.common.registry import Registry
from hvdkeras.common.scaling import scaled_learning_rate
from hvdkeras.config import DataConfig, HorovodConfig, OptimizerConfig
from hvdkeras.gradient_exchange import DistributedOptimizer
from hvdkeras.runtime import compat
from hvdkeras.runtime.compat import keras

REGISTRY = Registry("optimizer", "optimizer.name")


def _common(cfg: OptimizerConfig) -> dict:
    return {"clipnorm": cfg.clipnorm} if cfg.clipnorm else {}


@REGISTRY.register("sgd")
def sgd(cfg: OptimizerConfig, lr: float):
    """Keras SGD with the config's momentum, Nesterov flag and clipnorm, at ``lr``."""
    return keras.optimizers.SGD(learning_rate=lr, momentum=cfg.momentum, nesterov=cfg.nesterov, **_common(cfg))


@REGISTRY.register("adam")
def adam(cfg: OptimizerConfig, lr: float):
    """Keras Adam with the config's clipnorm, at ``lr``."""
    return keras.optimizers.Adam(learning_rate=lr, **_common(cfg))


@REGISTRY.register("adamw")
def adamw(cfg: OptimizerConfig, lr: float):
    """Keras AdamW with the config's weight decay and clipnorm, at ``lr``."""
    return keras.optimizers.AdamW(learning_rate=lr, weight_decay=cfg.weight_decay, **_common(cfg))


@REGISTRY.register("rmsprop")
def rmsprop(cfg: OptimizerConfig, lr: float):
    """Keras RMSprop with the config's momentum and clipnorm, at ``lr``."""
    return keras.optimizers.RMSprop(learning_rate=lr, momentum=cfg.momentum, **_common(cfg))


# The Estimator path's optimizers: the same names and settings, as tf.compat.v1.train optimizers (no clipping, no
# weight decay there: the config rules refuse optimizer.clipnorm, and adamw is not offered).
V1 = Registry("optimizer", "optimizer.name")


@V1.register("sgd")
def sgd_v1(cfg: OptimizerConfig, lr):
    """``tf.compat.v1.train.MomentumOptimizer`` with the config's momentum and Nesterov flag, at ``lr``."""
    return compat.tf.compat.v1.train.MomentumOptimizer(lr, momentum=cfg.momentum, use_nesterov=cfg.nesterov)


@V1.register("adam")
def adam_v1(cfg: OptimizerConfig, lr):
    """``tf.compat.v1.train.AdamOptimizer`` at ``lr``."""
    return compat.tf.compat.v1.train.AdamOptimizer(lr)


@V1.register("rmsprop")
def rmsprop_v1(cfg: OptimizerConfig, lr):
    """``tf.compat.v1.train.RMSPropOptimizer`` with the config's momentum, at ``lr``."""
    return compat.tf.compat.v1.train.RMSPropOptimizer(lr, momentum=cfg.momentum)


def build_v1(cfg: OptimizerConfig, lr):
    """The ``tf.compat.v1.train`` optimizer ``optimizer.name`` names, at ``lr`` (a float or a graph tensor)."""
    if cfg.name in REGISTRY.names() and cfg.name not in V1.names():
        raise ConfigError(f"optimizer.name={cfg.name!r} has no tf.compat.v1 optimizer for the Estimator path;"
                          f" use {', '.join(V1.names())}")
    return V1.get(cfg.name)(cfg, lr)


def distribute(optimizer, cfg: HorovodConfig):
    """:func:`DistributedOptimizer` with the options of the config's ``horovod`` section."""
    return DistributedOptimizer(optimizer, compression=cfg.compression,
                                backward_passes_per_step=cfg.backward_passes_per_step,
                                average_aggregated_gradients=cfg.average_aggregated_gradients,
                                sparse_as_dense=cfg.sparse_as_dense, groups=cfg.groups)


def build(cfg: OptimizerConfig, horovod: HorovodConfig, data: DataConfig, global_batch_size: int):
    """(distributed optimizer at the rate scaled to ``global_batch_size``, that rate)."""
    lr = scaled_learning_rate(cfg, data, global_batch_size)
    return distribute(REGISTRY.get(cfg.name)(cfg, lr), horovod), lr
