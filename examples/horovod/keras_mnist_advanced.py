"""Horovod's ``examples/keras/keras_mnist_advanced.py``, switched to hvdkeras by its import line.

    horovodrun -np 2 -H localhost:2 python examples/horovod/keras_mnist_advanced.py --epochs 2

Changed from Horovod's script: ``import hvdkeras.keras as hvd`` (was ``import
horovod.keras as hvd``); the data come from ``offline_mnist``; the TensorFlow 1
session setup is gone (TensorFlow 2 has no session; GPU pinning as in the TF2
examples); Keras 3's own migration (``learning_rate=`` for ``lr=``, ``fit`` for
``fit_generator``, preprocessing layers for ``ImageDataGenerator``, ``.keras``
checkpoints); ``--steps-per-epoch`` caps the epoch for quick runs, and the last lines
print the test loss and accuracy as Horovod's does.
"""
import argparse
import math
import os
import sys

import keras
import tensorflow as tf
from keras.layers import Conv2D, Dense, Dropout, Flatten, MaxPooling2D
from keras.models import Sequential

import hvdkeras.keras as hvd  # was: import horovod.keras as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_mnist

parser = argparse.ArgumentParser(description="Keras MNIST Example")
parser.add_argument("--batch-size", type=int, default=128, metavar="N", help="input batch size for training")
parser.add_argument("--epochs", type=int, default=24, metavar="N", help="number of epochs to train")
parser.add_argument("--lr", type=float, default=1.0, metavar="LR", help="learning rate")
parser.add_argument("--steps-per-epoch", type=int, default=None, help="at most this many steps per epoch")
parser.add_argument("--checkpoint-dir", default=".")
args = parser.parse_args()

# Horovod: initialize Horovod.
hvd.init()

# Horovod: pin GPU to be used to process local rank (one GPU per process)
gpus = tf.config.experimental.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

batch_size = args.batch_size
num_classes = 10

# Enough epochs to demonstrate learning rate warmup and the reduction of
# learning rate when training plateaues.
epochs = args.epochs

# Input image dimensions
img_rows, img_cols = 28, 28

# The data, shuffled and split between train and test sets
(x_train, y_train), (x_test, y_test) = offline_mnist.load_data()

# Determine how many batches are there in train and test sets
train_batches = math.ceil(len(x_train) / batch_size)
test_batches = math.ceil(len(x_test) / batch_size)

x_train = x_train.reshape(x_train.shape[0], img_rows, img_cols, 1).astype("float32") / 255
x_test = x_test.reshape(x_test.shape[0], img_rows, img_cols, 1).astype("float32") / 255
input_shape = (img_rows, img_cols, 1)
if hvd.rank() == 0:
    print("x_train shape:", x_train.shape)

# Convert class vectors to binary class matrices
y_train = keras.utils.to_categorical(y_train, num_classes)
y_test = keras.utils.to_categorical(y_test, num_classes)

model = Sequential()
model.add(Conv2D(32, kernel_size=(3, 3), activation="relu", input_shape=input_shape))
model.add(Conv2D(64, (3, 3), activation="relu"))
model.add(MaxPooling2D(pool_size=(2, 2)))
model.add(Dropout(0.25))
model.add(Flatten())
model.add(Dense(128, activation="relu"))
model.add(Dropout(0.5))
model.add(Dense(num_classes, activation="softmax"))

# Horovod: adjust learning rate based on number of GPUs.
scaled_lr = args.lr * hvd.size()
opt = keras.optimizers.Adadelta(learning_rate=scaled_lr)

# Horovod: add Horovod Distributed Optimizer.
opt = hvd.DistributedOptimizer(opt)

model.compile(loss=keras.losses.categorical_crossentropy, optimizer=opt, metrics=["accuracy"])

callbacks = [
    # Horovod: broadcast initial variable states from rank 0 to all other processes.
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    # Horovod: average metrics among workers at the end of every epoch.
    # Note: This callback must be in the list before the ReduceLROnPlateau,
    # TensorBoard, or other metrics-based callbacks.
    hvd.callbacks.MetricAverageCallback(),
    # Horovod: warm the learning rate up over the first five epochs.
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=min(5, epochs), verbose=1),
    # Reduce the learning rate if training plateaues.
    keras.callbacks.ReduceLROnPlateau(patience=10, verbose=1),
]

# Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
if hvd.rank() == 0:
    callbacks.append(keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")))

# Data augmentation for the training images. Keras 3 has no ImageDataGenerator: its
# migration is preprocessing layers in a tf.data pipeline (the same rotation, shifts and
# zoom; Keras has no shear layer). Like ImageDataGenerator.flow, both streams shuffle and repeat.
augment = keras.Sequential([keras.layers.RandomRotation(8 / 360), keras.layers.RandomTranslation(0.08, 0.08),
                            keras.layers.RandomZoom(0.08)])
train_flow = (tf.data.Dataset.from_tensor_slices((x_train, y_train)).repeat().shuffle(len(x_train))
              .batch(batch_size).map(lambda x, y: (augment(x, training=True), y)))
test_flow = tf.data.Dataset.from_tensor_slices((x_test, y_test)).repeat().shuffle(len(x_test)).batch(batch_size)

steps = train_batches // hvd.size()
if args.steps_per_epoch:
    steps = min(steps, args.steps_per_epoch)

# Train the model.
# Horovod: the training will randomly sample 1 / N batches of training data and
# 3 / N batches of validation data on every worker, where N is the number of workers.
# Over-sampling of validation data helps to increase probability that every validation
# example will be evaluated.
model.fit(train_flow,
          steps_per_epoch=steps,
          callbacks=callbacks,
          epochs=epochs,
          verbose=1 if hvd.rank() == 0 else 0,
          validation_data=test_flow,
          validation_steps=3 * test_batches // hvd.size())

score = hvd.allreduce(model.evaluate(x_test, y_test, verbose=0))
if hvd.rank() == 0:
    print("Test loss:", float(score[0]))
    print("Test accuracy:", float(score[1]))
