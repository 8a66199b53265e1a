"""Horovod's ``examples/tensorflow2/tensorflow2_keras_mnist.py``, switched to hvdkeras by its import line.

    horovodrun -np 2 -H localhost:2 python examples/horovod/tensorflow2_keras_mnist.py

Changed from Horovod's script: ``import hvdkeras.keras as hvd`` (was ``import
horovod.tensorflow.keras as hvd``); the data come from ``offline_mnist`` (no
download); Keras 3's own migration (``compile`` has no ``experimental_run_tf_function``,
checkpoints are ``.keras`` files, ``tf.keras.optimizers`` and ``tf.keras.losses``
spelled out); ``--epochs`` and ``--steps-per-epoch`` (Horovod's values are the
defaults) and a last line with the test accuracy. The model is still a ``Sequential``
without ``Input``: its weights are created by the first step.
"""
import argparse
import os
import sys

import tensorflow as tf

import hvdkeras.keras as hvd  # was: import horovod.tensorflow.keras as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_mnist


def main():
    parser = argparse.ArgumentParser(description="TensorFlow 2 Keras MNIST example")
    parser.add_argument("--epochs", type=int, default=24)
    parser.add_argument("--steps-per-epoch", type=int, default=500, help="before dividing by the number of ranks")
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

    (mnist_images, mnist_labels), (test_images, test_labels) = offline_mnist.load_data(
        path="mnist-%d.npz" % hvd.rank())

    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(mnist_images[..., tf.newaxis] / 255.0, tf.float32), tf.cast(mnist_labels, tf.int64)))
    dataset = dataset.repeat().shuffle(10000).batch(128)

    mnist_model = tf.keras.Sequential([
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

    mnist_model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(), optimizer=opt, metrics=["accuracy"])

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: average metrics among workers at the end of every epoch.
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: warm the learning rate up from 0.001 to 0.001 * size over three epochs.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0:
        checkpoint = os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(checkpoint))

    # Horovod: write logs on worker 0.
    verbose = 1 if hvd.rank() == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of GPUs.
    mnist_model.fit(dataset, steps_per_epoch=args.steps_per_epoch // hvd.size(), callbacks=callbacks,
                    epochs=args.epochs, verbose=verbose)

    _, accuracy = mnist_model.evaluate(test_images[..., None] / 255.0, test_labels, verbose=0)
    if hvd.rank() == 0:
        print(f"Test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
