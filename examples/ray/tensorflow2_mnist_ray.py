"""Horovod's ``examples/ray/tensorflow2_mnist_ray.py``, switched to hvdkeras by its import lines.

    ray start --head --num-cpus 2 --include-dashboard=false
    python examples/ray/tensorflow2_mnist_ray.py --address auto --num-workers 2 --cpus-per-slot 1

Changed from Horovod's script: ``import hvdkeras.keras as hvd`` and ``from hvdkeras.ray import RayExecutor`` (were
``import horovod.tensorflow.keras as hvd`` and ``from horovod.ray import RayExecutor``); the data come from
``examples/horovod/offline_mnist.py`` (no download; each Ray worker finds it through this file's folder, so every
node needs this checkout at the same path); Keras 3's own migration (``compile`` has no
``experimental_run_tf_function``, checkpoints are ``.keras`` files, ``tf.keras.optimizers`` and ``tf.keras.losses``
spelled out); flags for the placement and the length: ``--num-workers`` (``num_workers=``, Horovod's current
name), ``--num-hosts``, ``--num-slots``, ``--cpus-per-slot``, ``--epochs``, ``--steps-per-epoch`` and
``--checkpoint-dir`` (Horovod's values are the defaults: two hosts of four workers with eight CPUs each), and a last
line with each rank's final loss. ``num_slots`` and ``cpus_per_slot`` are Horovod 0.21's names, which Horovod's
own example still passes (Horovod 0.28.1's ``RayExecutor`` no longer takes them; hvdkeras does).
"""
import argparse
import os
import sys

import ray
import tensorflow as tf

import hvdkeras.keras as hvd  # was: import horovod.tensorflow.keras as hvd
from hvdkeras.ray import RayExecutor  # was: from horovod.ray import RayExecutor

HERE = os.path.dirname(os.path.abspath(__file__))

parser = argparse.ArgumentParser(
    description='Tensorflow Ray example',
    formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--address', type=str, help="Ray cluster address")
parser.add_argument('--num-workers', type=int, default=None,
                    help="this many workers wherever Ray places them (instead of hosts x slots)")
parser.add_argument('--num-hosts', type=int, default=2)
parser.add_argument('--num-slots', type=int, default=4)
parser.add_argument('--cpus-per-slot', type=int, default=8)
parser.add_argument('--epochs', type=int, default=1)
parser.add_argument('--steps-per-epoch', type=int, default=500, help="before dividing by the number of ranks")
parser.add_argument('--checkpoint-dir', default=".")


def train(num_epochs, steps_per_epoch=500, checkpoint_dir="."):
    # Horovod: initialize Horovod.
    hvd.init()

    # Horovod: pin GPU to be used to process local rank (one GPU per process)
    gpus = tf.config.experimental.list_physical_devices('GPU')
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()],
                                                   'GPU')

    sys.path.insert(0, os.path.join(HERE, "..", "horovod"))
    import offline_mnist

    (mnist_images, mnist_labels), _ = \
        offline_mnist.load_data(path='mnist-%d.npz' % hvd.rank())

    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(mnist_images[..., tf.newaxis] / 255.0, tf.float32),
         tf.cast(mnist_labels, tf.int64)))
    dataset = dataset.repeat().shuffle(10000).batch(128)

    mnist_model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(64, [3, 3], activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation='softmax')
    ])

    # Horovod: adjust learning rate based on number of GPUs.
    scaled_lr = 0.001 * hvd.size()
    opt = tf.keras.optimizers.Adam(scaled_lr)

    # Horovod: add Horovod DistributedOptimizer.
    opt = hvd.DistributedOptimizer(opt)

    mnist_model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        optimizer=opt,
        metrics=['accuracy'])

    callbacks = [
        # Horovod: broadcast initial variable states from rank 0 to all other processes.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),

        # Horovod: average metrics among workers at the end of every epoch.
        hvd.callbacks.MetricAverageCallback(),

        # Horovod: scale the learning rate up to `0.001 * hvd.size()` over the first three epochs.
        hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
    ]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if hvd.rank() == 0:
        callbacks.append(
            tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, 'checkpoint-{epoch}.keras')))

    # Horovod: write logs on worker 0.
    verbose = 1 if hvd.rank() == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of GPUs.
    history = mnist_model.fit(
        dataset,
        steps_per_epoch=steps_per_epoch // hvd.size(),
        callbacks=callbacks,
        epochs=num_epochs,
        verbose=verbose)
    return hvd.rank(), history.history["loss"][-1], float(sum(float(tf.reduce_sum(w)) for w in mnist_model.weights))


if __name__ == '__main__':
    args = parser.parse_args()
    ray.init(address=args.address)
    settings = RayExecutor.create_settings(timeout_s=30)
    if args.num_workers:
        executor = RayExecutor(settings, num_workers=args.num_workers, use_gpu=False,
                               cpus_per_worker=args.cpus_per_slot)
    else:
        executor = RayExecutor(
            settings, num_hosts=args.num_hosts, num_slots=args.num_slots, use_gpu=False,
            cpus_per_slot=args.cpus_per_slot)
    executor.start()
    results = executor.run(train, kwargs=dict(num_epochs=args.epochs, steps_per_epoch=args.steps_per_epoch,
                                              checkpoint_dir=os.path.abspath(args.checkpoint_dir)))
    executor.shutdown()
    for rank, loss, weight_sum in results:
        print(f"rank {rank}: final loss {loss:.4f}, sum of weights {weight_sum:.6f}")
