"""Your own data, model and metric in the config path: three classes from six numbers (no images).

    horovodrun -np 2 -H localhost:2 python -m hvdkeras.train \
        --config examples/own_model_and_data/tabular.yaml --workdir runs/tabular

``tabular.yaml`` names the functions below as ``tabular_task:data``, ``tabular_task:model``
and ``tabular_task:top2``; hvdkeras imports this module from the config file's folder (or
from ``PYTHONPATH``) on every rank and calls each function with the config's ``args``. The
module needs nothing of hvdkeras: the same functions serve a plain ``model.fit``.

* ``data`` returns one pass over the training and the validation examples, unbatched
  ``(features, label)`` pairs of known size; hvdkeras shards them over the ranks,
  shuffles, batches by the global batch and repeats them per epoch.
* ``model`` returns an uncompiled Keras model; hvdkeras compiles it with the distributed
  optimizer, ``trainer.loss`` and ``trainer.metrics``.
"""
import numpy as np
import tensorflow as tf

keras = tf.keras  # Keras 2 on TensorFlow 2.15, Keras 3 from TensorFlow 2.16 on


def data(train_examples=1200, validation_examples=300, features=6, classes=3, seed=0):
    """Gaussian clusters, one per class: ``(train, validation)`` datasets of ``(float32[features], int32)``."""
    rng = np.random.RandomState(seed)
    centers = rng.normal(scale=1.5, size=(classes, features))

    def draw(n):
        labels = rng.randint(classes, size=n)
        points = centers[labels] + rng.normal(size=(n, features))
        return tf.data.Dataset.from_tensor_slices((points.astype(np.float32), labels.astype(np.int32)))

    return draw(train_examples), draw(validation_examples)


def model(features=6, classes=3, hidden=32):
    """A small multilayer perceptron with softmax outputs (for the default loss, sparse cross-entropy)."""
    return keras.Sequential([
        keras.Input((features,)),
        keras.layers.Dense(hidden, activation="relu"),
        keras.layers.Dense(classes, activation="softmax"),
    ])


def top2(y_true, y_pred):
    """A metric of one's own: whether the label is among the two likeliest classes."""
    return keras.metrics.sparse_top_k_categorical_accuracy(y_true, y_pred, k=2)
