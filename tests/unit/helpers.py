"""Helpers shared by the unit tests (plain functions and classes; fixtures live in conftest.py).

TensorFlow and Keras are imported inside the functions that need them, so tests of
the pure modules (config, launch plans, build_horovod) can import this module cheaply.
"""
import glob
import os
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(REPO, "configs")
SCRIPTS = os.path.join(REPO, "tests", "distributed", "scripts")


def config_file(name):
    """The path of a shipped config, e.g. ``config_file("digits.yaml")``."""
    return os.path.join(CONFIGS, name)


def write_yaml(tmp_path, text, name="c.yaml"):
    """Writes dedented ``text`` to ``tmp_path/name``; returns the path as a string."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# --------------------------------------------------------------------------- build_horovod


def cpu_build_plan():
    """A CPU (Gloo-only) Horovod build plan for TensorFlow 2.21 on Python 3.11."""
    from hvdkeras.build_horovod import build_plan as plans

    return plans.BuildPlan(tf_distribution="tensorflow-cpu", tf_version="2.21.0", python_tag="py311", mpi=False,
                           gpu=False,
                           include_dirs=("/v/lib/python3.11/site-packages/tensorflow/include/external/highwayhash",
                                         "/usr/lib/llvm-14/include"),
                           compiler="g++ (Debian 12.2.0-14) 12.2.0")


# --------------------------------------------------------------------------- Keras models and data


def small_bn_model(seed=0):
    """Dense -> BatchNormalization -> softmax over 3 classes on 4 features; SGD with momentum, accuracy metric."""
    import tensorflow as tf

    from hvdkeras.runtime.compat import keras

    tf.random.set_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.BatchNormalization(), keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.SGD(0.1, momentum=0.9), "sparse_categorical_crossentropy",
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model


def xy(n, seed):
    """``n`` random examples of 4 features and labels in 0..2."""
    import numpy as np

    rng = np.random.RandomState(seed)
    return rng.randn(n, 4).astype("float32"), rng.randint(0, 3, n).astype("int32")


def model_and_data(lr=0.1, momentum=0.9, n=32):
    """A one-layer softmax model (SGD with momentum, accuracy) and ``n`` examples for it."""
    import numpy as np

    from hvdkeras.runtime.compat import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.SGD(lr, momentum=momentum), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    rng = np.random.RandomState(0)
    return model, rng.randn(n, 4).astype("float32"), rng.randint(0, 3, n).astype("int32")


def regression_model(lr=0.1, optimizer=None):
    """Dense(2) on 3 features with mse; SGD with momentum 0.9 at ``lr`` unless ``optimizer`` is given."""
    from hvdkeras.runtime.compat import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=optimizer or keras.optimizers.SGD(learning_rate=lr, momentum=0.9), loss="mse")
    return model


def lr_of(model):
    return float(model.optimizer.learning_rate.numpy())


def attach(cb, model, epochs=3, steps=2):
    """``cb`` with its model and params set as ``model.fit`` would."""
    cb.set_model(model)
    cb.set_params({"epochs": epochs, "steps": steps, "verbose": 0})
    return cb


def drive(callbacks, model, epochs, steps, initial_epoch=0):
    """Calls the hooks as model.fit would; returns the rate seen by every batch and the ``lr`` logged per epoch."""
    for cb in callbacks:
        attach(cb, model, epochs, steps)
        cb.on_train_begin()
    per_batch, per_epoch = [], []
    for epoch in range(initial_epoch, epochs):
        for cb in callbacks:
            cb.on_epoch_begin(epoch)
        for batch in range(steps):
            for cb in callbacks:
                cb.on_train_batch_begin(batch)
            per_batch.append((epoch, batch, lr_of(model)))
            for cb in callbacks:
                cb.on_train_batch_end(batch)
        logs = {}
        for cb in callbacks:
            cb.on_epoch_end(epoch, logs)
        per_epoch.append(logs["lr"])
    return per_batch, per_epoch


def epoch_recorder():
    """A Keras callback recording the epochs ``fit`` runs, in ``.epochs``."""
    from hvdkeras.runtime.compat import keras

    class SeenEpochs(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.epochs = []

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append(epoch)

    return SeenEpochs()


def tensorboard_scalars(directory):
    """{tag: {step: value}} of the scalar summaries in the event files of ``directory``."""
    import tensorflow as tf

    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "scalars":
                    found.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    return found


# --------------------------------------------------------------------------- the trainer


def process_info(rank=0, size=1, local_rank=0, local_size=1):
    """A :class:`hvdkeras.runtime.distributed.ProcessInfo` for a CPU process, without Horovod."""
    from hvdkeras.common.horovod_env import ThreadBudget
    from hvdkeras.runtime.distributed import ProcessInfo

    return ProcessInfo(rank=rank, size=size, local_rank=local_rank, local_size=local_size,
                       threads=ThreadBudget(intra_op=1, inter_op=1), gpu=None, threads_applied=False)


def hand_built_trainer(cfg, workdir, size=1, scaled_lr=0.1, backup=None):
    """A :class:`hvdkeras.training.trainer.Trainer` from stand-in parts: no collective, no file, no model.

    Enough for what depends on the config alone (the callback list).
    """
    from hvdkeras.runtime.position import RunPosition
    from hvdkeras.training import assembly, tasks
    from hvdkeras.training.trainer import Trainer

    process = process_info(size=size, local_size=size)
    job = assembly.JobConfig(requested=cfg, resolved=cfg, auto={}, initial_size=size)
    position = backup.position if backup is not None else RunPosition()
    return Trainer(assembly.Parts(job=job, workdir=workdir, process=process, task=tasks.for_config(cfg),
                                  data=object(), model=None, scaled_lr=scaled_lr, position=position, backup=backup))


def callback_names(callbacks):
    return [type(c).__name__ for c in callbacks]
