"""The training loss: cross-entropy on integer labels and softmax outputs, with optional label smoothing."""
from __future__ import annotations

import tensorflow as tf

from hvdkeras.runtime.compat import keras


def make_loss(num_classes: int, label_smoothing: float = 0.0):
    """Sparse categorical cross-entropy; with ``label_smoothing``, the smoothed one-hot cross-entropy."""
    if not label_smoothing:
        return keras.losses.SparseCategoricalCrossentropy(name="loss")
    smoothed = keras.losses.CategoricalCrossentropy(label_smoothing=label_smoothing)

    def sparse_smoothed_crossentropy(y_true, y_pred):
        labels = tf.one_hot(tf.cast(tf.reshape(y_true, [-1]), tf.int32), num_classes)
        return smoothed(labels, y_pred)

    return sparse_smoothed_crossentropy
