"""Horovod's ``examples/elastic/tensorflow2/tensorflow2_keras_mnist_elastic.py``, switched by its import line.

    horovodrun -np 2 --min-np 1 --max-np 2 --host-discovery-script discover_hosts.sh \\
        python examples/horovod/tensorflow2_keras_mnist_elastic.py

Changed from Horovod's script: ``import hvdkeras.keras as hvd`` (was ``import
horovod.tensorflow.keras as hvd``); the data come from ``offline_mnist``; Keras 3's own
migration (``optimizer.learning_rate = ...`` for ``tf.keras.backend.set_value(optimizer.lr,
...)``, no ``experimental_run_tf_function``, ``.keras`` checkpoints, ``tf.keras.*`` spelled
out); ``--epochs`` and ``--steps-per-epoch`` (Horovod's values are the defaults) and a
last line with the epochs the state counted.
"""
import argparse
import os
import sys

import tensorflow as tf

import hvdkeras.keras as hvd  # was: import horovod.tensorflow.keras as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_mnist

parser = argparse.ArgumentParser(description="Tensorflow 2.0 Keras MNIST Example")
parser.add_argument("--use-mixed-precision", action="store_true", default=False,
                    help="use mixed precision for training")
parser.add_argument("--epochs", type=int, default=24)
parser.add_argument("--steps-per-epoch", type=int, default=500, help="before dividing by the number of ranks")
parser.add_argument("--checkpoint-dir", default=".")
args = parser.parse_args()

if args.use_mixed_precision:
    tf.keras.mixed_precision.set_global_policy("mixed_float16")

# Horovod: initialize Horovod.
hvd.init()

# Horovod: pin GPU to be used to process local rank (one GPU per process)
gpus = tf.config.experimental.list_physical_devices("GPU")
for gpu in gpus:
    tf.config.experimental.set_memory_growth(gpu, True)
if gpus:
    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], "GPU")

(mnist_images, mnist_labels), _ = offline_mnist.load_data(path="mnist-%d.npz" % hvd.rank())

dataset = tf.data.Dataset.from_tensor_slices(
    (tf.cast(mnist_images[..., tf.newaxis] / 255.0, tf.float32), tf.cast(mnist_labels, tf.int64)))
dataset = dataset.repeat().shuffle(10000).batch(128)

model = tf.keras.Sequential([
    tf.keras.layers.Conv2D(32, [3, 3], activation="relu"),
    tf.keras.layers.Conv2D(64, [3, 3], activation="relu"),
    tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
    tf.keras.layers.Dropout(0.25),
    tf.keras.layers.Flatten(),
    tf.keras.layers.Dense(128, activation="relu"),
    tf.keras.layers.Dropout(0.5),
    tf.keras.layers.Dense(10, activation="softmax"),
])

# Horovod: adjust learning rate based on number of GPUs.
scaled_lr = 0.001 * hvd.size()
opt = tf.keras.optimizers.Adam(scaled_lr)

# Horovod: add Horovod DistributedOptimizer.
opt = hvd.DistributedOptimizer(opt, backward_passes_per_step=1, average_aggregated_gradients=True)

model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=["accuracy"])

# Horovod: initialize optimizer state so we can synchronize across workers
# Keras has empty optimizer variables() for TF2:
# https://sourcegraph.com/github.com/tensorflow/tensorflow@v2.4.1/-/blob/tensorflow/python/keras/optimizer_v2/optimizer_v2.py#L351:10
model.fit(dataset, steps_per_epoch=1, epochs=1, callbacks=None)

state = hvd.elastic.KerasState(model, batch=0, epoch=0)


def on_state_reset():
    state.model.optimizer.learning_rate = 0.001 * hvd.size()
    # Re-initialize, to join with possible new ranks
    state.model.fit(dataset, steps_per_epoch=1, epochs=1, callbacks=None)


state.register_reset_callbacks([on_state_reset])

callbacks = [
    # Horovod: elastic training callbacks to update and commit state.
    hvd.elastic.UpdateEpochStateCallback(state),
    hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.CommitStateCallback(state),
]

# Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
if hvd.rank() == 0:
    callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")))


@hvd.elastic.run
def train(state):
    # Horovod: adjust number of steps based on number of GPUs.
    state.model.fit(dataset, steps_per_epoch=args.steps_per_epoch // hvd.size(),
                    epochs=args.epochs - state.epoch, callbacks=callbacks, verbose=1 if hvd.rank() == 0 else 0)


train(state)
if hvd.rank() == 0:
    print(f"Finished at epoch {state.epoch}")
