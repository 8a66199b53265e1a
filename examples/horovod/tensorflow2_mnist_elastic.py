"""Horovod's ``examples/elastic/tensorflow2/tensorflow2_mnist_elastic.py``, switched to hvdkeras by its import line.

    horovodrun -np 2 --min-np 1 --max-np 2 --network-interface lo \\
        --host-discovery-script "python -m hvdkeras.discover_hosts" \\
        python examples/horovod/tensorflow2_mnist_elastic.py

Changed from Horovod's script: ``import hvdkeras.tensorflow as hvd`` (was ``import
horovod.tensorflow as hvd``); the data come from ``offline_mnist`` (no download); Keras
3's own migration (``opt.learning_rate`` for ``opt.lr``); ``--steps`` (Horovod's 100 is the
default, before dividing by the number of ranks), ``--checkpoint-dir``, and a last line
with the batch reached; the ``horovod.run`` entry of Horovod's script is left out.
"""
import argparse
import os
import sys

import tensorflow as tf

import hvdkeras.tensorflow as hvd  # was: import horovod.tensorflow as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline_mnist


def main():
    parser = argparse.ArgumentParser(description="TensorFlow 2 elastic MNIST example")
    parser.add_argument("--steps", type=int, default=100, help="before dividing by the number of ranks")
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
    lr = 0.001
    opt = tf.keras.optimizers.Adam(lr * hvd.size())

    @tf.function
    def training_step(images, labels, allreduce=True):
        with tf.GradientTape() as tape:
            probs = mnist_model(images, training=True)
            loss_value = loss(labels, probs)

        # Horovod: add Horovod Distributed GradientTape.
        if allreduce:
            tape = hvd.DistributedGradientTape(tape)

        grads = tape.gradient(loss_value, mnist_model.trainable_variables)
        opt.apply_gradients(zip(grads, mnist_model.trainable_variables))
        return loss_value

    # Horovod: initialize model and optimizer state so we can synchronize across workers
    for _batch_idx, (images, labels) in enumerate(dataset.take(1)):
        training_step(images, labels, allreduce=False)

    @hvd.elastic.run
    def train(state):
        start_batch = state.batch

        # Horovod: adjust number of steps based on number of GPUs.
        for batch_idx, (images, labels) in enumerate(dataset.skip(state.batch).take(args.steps // hvd.size())):
            state.batch = start_batch + batch_idx
            loss_value = training_step(images, labels)

            if state.batch % 10 == 0 and hvd.rank() == 0:
                print("Step #%d\tLoss: %.6f" % (state.batch, loss_value))

            # Horovod: commit state at the end of each batch
            state.commit()

    def on_state_reset():
        opt.learning_rate.assign(lr * hvd.size())

    state = hvd.elastic.TensorFlowKerasState(mnist_model, opt, batch=0)
    state.register_reset_callbacks([on_state_reset])

    train(state)

    checkpoint_dir = args.checkpoint_dir
    checkpoint = tf.train.Checkpoint(model=mnist_model, optimizer=opt)

    # Horovod: save checkpoints only on worker 0 to prevent other workers from
    # corrupting it.
    if hvd.rank() == 0:
        checkpoint.save(os.path.join(checkpoint_dir, "ckpt"))
        print("Finished at batch %d" % state.batch)


if __name__ == "__main__":
    main()
