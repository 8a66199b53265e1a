"""Models by name. Every builder returns a Keras model whose output is class probabilities (softmax)."""
from __future__ import annotations

from typing import Tuple

from hvdkeras import compat
from hvdkeras.config import ModelConfig
from hvdkeras.registry import Registry

keras = compat.keras
layers = keras.layers

REGISTRY = Registry("model", "model.name")


def names():
    return REGISTRY.names()


@REGISTRY.register("digits_cnn")
def digits_cnn(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """Two 3x3 convolutions, max-pool, dense: about 0.97 accuracy on the 8x8 digits."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Conv2D(32, 3, padding="same", activation="relu")(inputs)
    x = layers.Conv2D(64, 3, padding="same", activation="relu")(x)
    x = layers.MaxPooling2D(2)(x)
    x = layers.Dropout(cfg.dropout)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(128, activation="relu")(x)
    x = layers.Dropout(cfg.dropout)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="digits_cnn")


@REGISTRY.register("mlp")
def mlp(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """Flatten, one hidden layer of 64: small and fast, for tests."""
    inputs = keras.Input(shape=input_shape)
    x = layers.Flatten()(inputs)
    x = layers.Dense(64, activation="relu")(x)
    x = layers.Dropout(cfg.dropout)(x)
    outputs = layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="mlp")


@REGISTRY.register("resnet50")
def resnet50(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    """ResNet-50 from keras.applications, randomly initialised (no pretrained weights)."""
    return keras.applications.ResNet50(weights=None, input_shape=input_shape, classes=num_classes)


def build(input_shape: Tuple[int, ...], num_classes: int, cfg: ModelConfig) -> keras.Model:
    return REGISTRY.get(cfg.name)(tuple(input_shape), num_classes, cfg)
