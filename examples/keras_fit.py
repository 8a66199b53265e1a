"""A plain Keras script made distributed with hvdkeras.callbacks (the changed lines are marked).

    horovodrun -np 2 -H localhost:2 --gloo python examples/keras_fit.py --epochs 5 --checkpoints /tmp/ckpts
"""
import argparse

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

import horovod.tensorflow.keras as hvd  # HVD: Horovod's Keras layer, for the optimizer only
from hvdkeras import callbacks  # HVD: rank-correct callbacks

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--checkpoints", default=None)
args = parser.parse_args()

hvd.init()  # HVD

digits = load_digits()
x = (digits.images / 16.0).astype("float32")[..., None]
y = digits.target.astype("int32")
x_train, y_train, x_val, y_val = x[:1400], y[:1400], x[1400:], y[1400:]
# HVD: each rank trains on, and validates, its own shard
x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
x_val, y_val = x_val[hvd.rank()::hvd.size()], y_val[hvd.rank()::hvd.size()]
batch = 32
steps = (1400 // hvd.size()) // batch  # HVD: the same number of steps on every rank
train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2000, seed=1).repeat().batch(batch)

model = tf.keras.Sequential([
    tf.keras.Input((8, 8, 1)),
    tf.keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(10, activation="softmax"),
])
lr = 0.05 * hvd.size()  # HVD: linear scaling rule
model.compile(hvd.DistributedOptimizer(tf.keras.optimizers.SGD(lr, momentum=0.9)),  # HVD
              "sparse_categorical_crossentropy", metrics=["accuracy"])

cbs = [
    callbacks.BroadcastGlobalVariablesCallback(0),  # HVD: same start on every rank
    callbacks.AverageModelStatisticsCallback(),  # HVD: batch-norm statistics agree (no-op here)
    callbacks.MetricAverageCallback(),  # HVD: metrics over all ranks' examples
    callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=1),  # HVD
]
if hvd.rank() == 0:  # HVD: rank 0 prints and writes
    cbs.append(tf.keras.callbacks.ProgbarLogger(count_mode="steps"))
    if args.checkpoints:
        cbs.append(callbacks.EpochCheckpoint(args.checkpoints, keep=2))
history = model.fit(train, steps_per_epoch=steps, epochs=args.epochs, validation_data=(x_val, y_val),
                    callbacks=cbs, verbose=2 if hvd.rank() == 0 else 0)  # HVD: verbose on rank 0
if hvd.rank() == 0:
    print(f"final val_accuracy={history.history['val_accuracy'][-1]:.4f}")
