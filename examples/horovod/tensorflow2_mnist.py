"""Horovod's ``examples/tensorflow2/tensorflow2_mnist.py``, switched to hvdkeras by its import line.

    horovodrun -np 2 -H localhost:2 python examples/horovod/tensorflow2_mnist.py

A custom training loop: ``DistributedGradientTape``, a plain optimizer, and
``broadcast_variables`` after the first step. On Keras 3 Horovod's own tape stops at the
first step with ``'Variable' object has no attribute 'ref'`` (horovod#4290).

Changed from Horovod's script: ``import hvdkeras.tensorflow as hvd`` (was ``import
horovod.tensorflow as hvd``); the data come from ``offline_mnist`` (no download); Keras
3's own migration (``opt.variables`` is a list there, a method on Keras 2);
``--steps`` (Horovod's 10000 is the default, before dividing by the number of ranks),
``--checkpoint-dir``, and a last line with the loss of the last step and a checksum of
the weights, which every rank prints.
"""
import argparse
import os
import sys

import tensorflow as tf

import hvdkeras.tensorflow as hvd  # was: import horovod.tensorflow as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_mnist


def optimizer_variables(opt):
    return opt.variables() if callable(opt.variables) else opt.variables  # Keras 2: a method; Keras 3: a list


def main():
    parser = argparse.ArgumentParser(description="TensorFlow 2 MNIST example")
    parser.add_argument("--steps", type=int, default=10000, help="before dividing by the number of ranks")
    parser.add_argument("--checkpoint-dir", default="./checkpoints")
    args = parser.parse_args()

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
    loss = tf.keras.losses.SparseCategoricalCrossentropy()

    # Horovod: adjust learning rate based on number of GPUs.
    opt = tf.keras.optimizers.Adam(0.001 * hvd.size())

    checkpoint_dir = args.checkpoint_dir
    checkpoint = tf.train.Checkpoint(model=mnist_model, optimizer=opt)

    @tf.function
    def training_step(images, labels, first_batch):
        with tf.GradientTape() as tape:
            probs = mnist_model(images, training=True)
            loss_value = loss(labels, probs)

        # Horovod: add Horovod Distributed GradientTape.
        tape = hvd.DistributedGradientTape(tape)

        grads = tape.gradient(loss_value, mnist_model.trainable_variables)
        opt.apply_gradients(zip(grads, mnist_model.trainable_variables))

        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        # This is necessary to ensure consistent initialization of all workers when
        # training is started with random weights or restored from a checkpoint.
        #
        # Note: broadcast should be done after the first gradient step to ensure optimizer
        # initialization.
        if first_batch:
            hvd.broadcast_variables(mnist_model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer_variables(opt), root_rank=0)

        return loss_value

    # Horovod: adjust number of steps based on number of GPUs.
    for batch, (images, labels) in enumerate(dataset.take(args.steps // hvd.size())):
        loss_value = training_step(images, labels, batch == 0)

        if batch % 10 == 0 and hvd.rank() == 0:
            print("Step #%d\tLoss: %.6f" % (batch, loss_value))

    # Horovod: save checkpoints only on worker 0 to prevent other workers from
    # corrupting it.
    if hvd.rank() == 0:
        checkpoint.save(os.path.join(checkpoint_dir, "ckpt"))
    checksum = sum(float(tf.reduce_sum(tf.abs(v))) for v in mnist_model.trainable_variables)
    print("Last loss: %.6f, weights checksum: %.6f" % (float(loss_value), checksum))


if __name__ == "__main__":
    main()
