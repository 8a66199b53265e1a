"""hvdkeras.training.losses.make_loss: sparse cross-entropy, and its label-smoothed form on integer labels."""
import numpy as np
import pytest
import tensorflow as tf

from hvdkeras.runtime.compat import keras
from hvdkeras.training.losses import make_loss


def test_without_smoothing_it_is_keras_sparse_cross_entropy():
    loss = make_loss(3)
    assert isinstance(loss, keras.losses.SparseCategoricalCrossentropy) and loss.name == "loss"


def test_label_smoothing_on_integer_labels():
    probs = tf.constant([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    labels = tf.constant([0, 2])
    smoothed = float(make_loss(3, label_smoothing=0.3)(labels, probs))
    expected = float(keras.losses.CategoricalCrossentropy(label_smoothing=0.3)(tf.one_hot(labels, 3), probs))
    assert smoothed == pytest.approx(expected, rel=1e-6)
    plain = float(make_loss(3)(labels, probs))
    assert plain == pytest.approx(-np.mean(np.log([0.7, 0.8])), rel=1e-5) and smoothed != pytest.approx(plain)
