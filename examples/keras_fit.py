"""A plain Keras script made distributed with hvdkeras.callbacks.

Every line that differs from the single-process script ends with ``# HVD`` (eleven
lines). It runs unchanged on both stacks (Keras 2 on TF 2.15, Keras 3 on TF 2.21):
``hvdkeras.DistributedOptimizer`` is Horovod's on Keras 2 and hvdkeras' own on Keras 3.
Run it with

    horovodrun -np 2 -H localhost:2 --gloo python examples/keras_fit.py --epochs 5 --backup /tmp/backup
"""
import argparse

import horovod.tensorflow as hvd  # HVD: Horovod's plain TensorFlow API (works with Keras 2 and 3)
import tensorflow as tf

from hvdkeras import DistributedOptimizer  # HVD
from hvdkeras.callbacks import default_callbacks  # HVD
from hvdkeras.training.data import digits_arrays  # the 8x8 digits, shipped with hvdkeras (no download)

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--backup", default=None, help="resume from and back up to this directory")
args = parser.parse_args()
hvd.init()  # HVD

pixels, target = digits_arrays()
x = (pixels.reshape(-1, 8, 8) / 16.0).astype("float32")[..., None]
y = target.astype("int32")
x_train, y_train, x_val, y_val = x[:1400], y[:1400], x[1400:], y[1400:]
x_train, y_train, x_val, y_val = (a[hvd.rank()::hvd.size()] for a in (x_train, y_train, x_val, y_val))  # HVD: shard
steps = (1400 // hvd.size()) // 32  # HVD: the same number of steps on every rank
train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2000, seed=1).repeat().batch(32)

model = tf.keras.Sequential([
    tf.keras.Input((8, 8, 1)),
    tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(10, activation="softmax"),
])
lr = 0.05 * hvd.size()  # HVD: linear scaling rule
model.compile(DistributedOptimizer(tf.keras.optimizers.SGD(lr, momentum=0.9)),  # HVD
              "sparse_categorical_crossentropy", metrics=["accuracy"])
history = model.fit(train, steps_per_epoch=steps, epochs=args.epochs, validation_data=(x_val, y_val), verbose=2,
                    callbacks=default_callbacks(initial_lr=lr, warmup_epochs=1, backup=args.backup))  # HVD
if hvd.rank() == 0:  # HVD: print once
    print(f"final val_accuracy={history.history['val_accuracy'][-1]:.4f}")
