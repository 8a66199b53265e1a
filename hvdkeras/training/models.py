"""Models by name. Every builder returns a Keras model whose output is class probabilities.

The final softmax always computes in float32, so mixed precision leaves the loss
in full precision. ``model.weight_decay`` becomes an L2 regulariser on
convolution and dense kernels only (never batch-norm parameters or biases),
``weight_decay / 2 * ||w||^2``, which adds ``weight_decay * w`` to the gradient:
the "weight decay 1e-4" of the ResNet papers. Images are channels-last (NHWC).
"""
from __future__ import annotations

from typing import Optional, Tuple

import tensorflow as tf

from hvdkeras.common.errors import ConfigError
from hvdkeras.common.registry import Registry
from hvdkeras.config import ModelConfig
from hvdkeras.runtime.compat import keras

layers = keras.layers

REGISTRY = Registry("model", "model.name")

# Batch normalisation as in the reference ResNet v1.5 training recipes.
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


def _l2(cfg: ModelConfig) -> Optional[keras.regularizers.Regularizer]:
    return keras.regularizers.L2(cfg.weight_decay / 2) if cfg.weight_decay else None


def _classifier(x, num_classes: int, cfg: ModelConfig):
    x = layers.Dense(num_classes, kernel_regularizer=_l2(cfg), name="logits")(x)
    return layers.Activation("softmax", dtype="float32", name="probabilities")(x)


@REGISTRY.register("small_cnn")
def small_cnn(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """Two 3x3 convolutions, max-pool, dense: about 0.97 accuracy on the 8x8 digits, 0.99 on MNIST."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Conv2D(32, 3, padding="same", activation="relu", kernel_regularizer=_l2(cfg))(inputs)
    x = layers.Conv2D(64, 3, padding="same", activation="relu", kernel_regularizer=_l2(cfg))(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Dropout(cfg.dropout)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(128, activation="relu", kernel_regularizer=_l2(cfg))(x)
    x = layers.Dropout(cfg.dropout)(x)
    return keras.Model(inputs, _classifier(x, num_classes, cfg), name="small_cnn")


@REGISTRY.register("mlp")
def mlp(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """Flatten, one hidden layer of 64: small and fast, for tests."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Flatten()(inputs)
    x = layers.Dense(64, activation="relu", kernel_regularizer=_l2(cfg))(x)
    x = layers.Dropout(cfg.dropout)(x)
    return keras.Model(inputs, _classifier(x, num_classes, cfg), name="mlp")


def _conv(x, filters: int, kernel: int, stride: int, cfg: ModelConfig, name: str):
    return layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                         kernel_initializer="he_normal", kernel_regularizer=_l2(cfg), name=name)(x)


def _bn(x, name: str, zero_gamma: bool = False):
    return layers.BatchNormalization(momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name,
                                     gamma_initializer="zeros" if zero_gamma else "ones")(x)


def _bottleneck(x, filters: int, stride: int, cfg: ModelConfig, name: str):
    """ResNet v1.5 bottleneck: the stride sits on the 3x3 convolution (v1 puts it on the first 1x1)."""
    shortcut = x
    if stride != 1 or x.shape[-1] != 4 * filters:
        shortcut = _bn(_conv(x, 4 * filters, 1, stride, cfg, f"{name}_proj"), f"{name}_proj_bn")
    x = layers.ReLU()(_bn(_conv(x, filters, 1, 1, cfg, f"{name}_1"), f"{name}_1_bn"))
    x = layers.ReLU()(_bn(_conv(x, filters, 3, stride, cfg, f"{name}_2"), f"{name}_2_bn"))
    x = _bn(_conv(x, 4 * filters, 1, 1, cfg, f"{name}_3"), f"{name}_3_bn", zero_gamma=True)
    return layers.ReLU()(layers.Add()([shortcut, x]))


@REGISTRY.register("resnet50")
def resnet50(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """ResNet-50 v1.5 (He et al. 2016, stride on the 3x3 convolution), randomly initialised.

    The last batch norm of each residual block starts with gamma = 0, so every block
    starts as the identity (Goyal et al. 2017, for large-batch training).
    """
    inputs = keras.Input(shape=input_shape)
    x = layers.ReLU()(_bn(_conv(inputs, 64, 7, 2, cfg, "stem"), "stem_bn"))
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for stage, (filters, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)]):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 0 else 1
            x = _bottleneck(x, filters, stride, cfg, f"stage{stage + 1}_block{block + 1}")
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, _classifier(x, num_classes, cfg), name="resnet50_v1_5")


class ZeroPadChannels(keras.layers.Layer):
    """Appends zero channels: the parameter-free "option A" shortcut of He et al.'s CIFAR ResNets."""

    def __init__(self, extra: int, **kwargs):
        super().__init__(**kwargs)
        self.extra = extra

    def call(self, x):
        """Pads the channel axis with ``extra`` zero channels, split between both sides."""
        return tf.pad(x, [[0, 0], [0, 0], [0, 0], [self.extra // 2, self.extra - self.extra // 2]])

    def get_config(self):
        """The layer's config, with ``extra``."""
        return dict(super().get_config(), extra=self.extra)


def _basic_block(x, filters: int, stride: int, cfg: ModelConfig, name: str):
    shortcut = x
    if stride != 1 or x.shape[-1] != filters:
        shortcut = layers.MaxPooling2D(1, strides=stride, name=f"{name}_subsample")(x)  # take every other pixel
        shortcut = ZeroPadChannels(filters - x.shape[-1], name=f"{name}_pad")(shortcut)
    x = layers.ReLU()(_bn(_conv(x, filters, 3, stride, cfg, f"{name}_1"), f"{name}_1_bn"))
    x = _bn(_conv(x, filters, 3, 1, cfg, f"{name}_2"), f"{name}_2_bn")
    return layers.ReLU()(layers.Add()([shortcut, x]))


def cifar_resnet(depth: int, input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """He et al. 2016 (section 4.2) CIFAR ResNet: 6n + 2 layers, stages of 16/32/64 filters, option A shortcuts."""
    if (depth - 2) % 6:
        raise ValueError(f"a CIFAR ResNet has depth 6n + 2; received: depth={depth}")
    n = (depth - 2) // 6
    inputs = keras.Input(shape=input_shape)
    x = layers.ReLU()(_bn(_conv(inputs, 16, 3, 1, cfg, "stem"), "stem_bn"))
    for stage, filters in enumerate([16, 32, 64]):
        for block in range(n):
            stride = 2 if block == 0 and stage > 0 else 1
            x = _basic_block(x, filters, stride, cfg, f"stage{stage + 1}_block{block + 1}")
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, _classifier(x, num_classes, cfg), name=f"resnet{depth}_cifar")


@REGISTRY.register("resnet56")
def resnet56(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """ResNet-56 for 32x32 images (0.85M parameters; 6.97% CIFAR-10 test error in He et al.)."""
    return cifar_resnet(56, input_shape, num_classes, cfg)


@REGISTRY.register("resnet20")
def resnet20(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """ResNet-20 for 32x32 images (0.27M parameters): the smallest of the family, for quick runs."""
    return cifar_resnet(20, input_shape, num_classes, cfg)


APPLICATIONS_PREFIX = "applications."
_APPLICATIONS = " or applications.<Name> of keras.applications"


def build(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """The model named ``cfg.name``; ``applications.MobileNetV2`` (etc.) builds a ``keras.applications``
    model, randomly initialised, with a float32 softmax over ``num_classes``.

    An unknown name raises a ConfigError listing the registered names."""
    if cfg.name.startswith(APPLICATIONS_PREFIX):
        constructor = getattr(keras.applications, cfg.name[len(APPLICATIONS_PREFIX):], None)
        if not callable(constructor):
            raise ConfigError.for_key(REGISTRY.key, f"be one of {', '.join(REGISTRY.names())}{_APPLICATIONS}",
                                      cfg.name)
        base = constructor(weights=None, include_top=False, input_shape=tuple(input_shape), pooling="avg")
        return keras.Model(base.input, _classifier(base.output, num_classes, cfg), name=base.name)
    return REGISTRY.get(cfg.name, extra=_APPLICATIONS)(tuple(input_shape), num_classes, cfg)
