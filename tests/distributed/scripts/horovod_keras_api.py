"""Run under horovodrun: Horovod's Keras API through ``import hvdkeras.keras as hvd``, as a Horovod script uses it.

    python horovod_keras_api.py WORKDIR

Each check trains or calls the API the way Horovod's scripts do and records what the
test compares across ranks (digests of weights) or against Horovod's documented
values. Every rank runs the same collectives in the same order. Prints one
``RESULT <json>`` line per rank.
"""
import atexit
import gc
import json
import os
import sys

import numpy as np

import hvdkeras.keras as hvd
from hvdkeras.runtime import compat

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

tf, keras = compat.tf, compat.keras
workdir = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()
LOSS = "sparse_categorical_crossentropy"


def digest(arrays) -> str:
    import hashlib

    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a)).tobytes())
    return h.hexdigest()[:16]


def weights_digest(model) -> str:
    return digest(v.numpy() for v in model.variables)


def optimizer_digest(optimizer) -> str:
    return digest(v.numpy() for v in compat.optimizer_variables(optimizer))


def data(seed, n=32, features=6, classes=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32") % classes


class Digests(keras.callbacks.Callback):
    """Digests of the model's weights when the first batch begins and ends."""

    def __init__(self):
        super().__init__()
        self.at = {}

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0 and "first_batch_begin" not in self.at:
            built = self.model.built and self.model.variables
            self.at["first_batch_begin"] = weights_digest(self.model) if built else None

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0 and "first_batch_end" not in self.at:
            self.at["first_batch_end"] = weights_digest(self.model)


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(8, activation="relu")
        self.out = keras.layers.Dense(3)

    def call(self, x):
        return self.out(self.hidden(x))


def lazily_built(kind):
    """Horovod's MNIST example's shape: no Input, weights made by the first step, different on every rank."""
    keras.utils.set_random_seed(10 + rank)
    if kind == "sequential":
        model = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    else:
        model = Subclassed()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)), metrics=["accuracy"])
    recorder = Digests()
    x, y = data(20 + rank)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
                         recorder])
    return {**recorder.at, "final": weights_digest(model), "optimizer": optimizer_digest(model.optimizer)}


def built_model(seed, optimizer=None):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=optimizer or hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
                  metrics=["accuracy"])
    return model


def built_first_step():
    """A built model: every rank starts its first step from rank 0's weights."""
    model = built_model(30 + rank)
    recorder = Digests()
    x, y = data(40 + rank)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), recorder])
    return {**recorder.at, "final": weights_digest(model)}


class Rates(keras.callbacks.Callback):
    """The optimizer's learning rate at every batch, and the epoch logs' ``lr``."""

    def __init__(self):
        super().__init__()
        self.per_batch, self.logged = [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.per_batch.append(compat.get_learning_rate(self.model.optimizer))

    def on_epoch_end(self, epoch, logs=None):
        self.logged.append(float(logs["lr"]))


def learning_rates():
    """Warmup over 2 epochs, then a constant multiplier, then a function of the epoch; 4 steps per epoch."""
    initial = 0.2
    model = built_model(50, hvd.DistributedOptimizer(keras.optimizers.SGD(initial, momentum=0.9)))
    rates = Rates()
    x, y = data(60 + rank)
    model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=initial, warmup_epochs=2),
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=initial, multiplier=0.5, start_epoch=2, end_epoch=3),
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=initial, multiplier=lambda epoch: 0.1, start_epoch=3),
        rates])
    return {"per_batch": rates.per_batch, "logged": rates.logged}


class EpochLogs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.logs = []

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append({k: float(v) for k, v in logs.items()})


def metric_average():
    """Uneven validation shards (8 and 24 examples): the averaged val_accuracy is the exact global one."""
    model = built_model(70)
    x, y = data(80 + rank)
    vx, vy = data(90 + rank, n=8 if rank == 0 else 24)
    logs = EpochLogs()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, validation_data=(vx, vy), validation_batch_size=8,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
                         logs])
    correct = float(np.sum(np.argmax(model.predict(vx, verbose=0), axis=1) == vy))
    totals = hvd.allgather([[correct, float(len(vy))]]).numpy()
    return {"logs": logs.logs[-1], "exact_val_accuracy": float(totals[:, 0].sum() / totals[:, 1].sum()),
            "mean_of_means": float(np.mean(totals[:, 0] / totals[:, 1]))}


def optimizer_config():
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), compression=hvd.Compression.fp16)
    config = opt.get_config()
    again = type(opt).from_config(config)
    return {"class": type(opt).__name__, "is_sgd": isinstance(opt, keras.optimizers.SGD),
            "same_config": again.get_config() == config, "same_class": type(again) is type(opt),
            "learning_rate": compat.get_learning_rate(again),
            "register_local_var": hasattr(again, "register_local_var")}


def saved_and_loaded():
    """Rank 0 saves a model trained with the distributed optimizer; every rank loads it with hvd.load_model."""
    path = os.path.join(workdir, "model.keras")
    model = built_model(100, hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)))
    x, y = data(110 + rank)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    if rank == 0:
        model.save(path)
    hvd.allreduce(0.0, name="saved")  # a barrier: the file exists before anyone loads it
    loaded = hvd.load_model(path)
    iterations = int(loaded.optimizer.iterations.numpy())
    same = digest(v.numpy() for v in loaded.variables) == weights_digest(model) if rank == 0 else None
    loaded.fit(x, y, batch_size=8, epochs=1, verbose=0)  # different data per rank, averaged gradients
    plain = keras.models.load_model(path, compile=False)
    return {"optimizer": type(loaded.optimizer).__name__, "iterations": iterations, "weights_as_saved": same,
            "distributed": hasattr(loaded.optimizer, "register_local_var"), "after_step": weights_digest(loaded),
            "plain_keras_loads": plain is not None}


class Offset(keras.layers.Layer):
    """A layer with one non-trainable value each rank keeps as its own."""

    def build(self, input_shape):
        self.offset = self.add_weight(name="offset", shape=(), initializer="zeros", trainable=False)

    def call(self, x):
        return x + self.offset


def local_variables():
    keras.utils.set_random_seed(120 + rank)
    offset = Offset()
    model = keras.Sequential([keras.Input((6,)), offset, keras.layers.Dense(3)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)))
    offset.offset.assign(float(rank + 1))
    x, y = data(130 + rank)
    broadcast = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[offset.offset])
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[broadcast])
    shared = [v for v in model.variables if v is not offset.offset]
    return {"offset": float(offset.offset.numpy()), "shared": digest(v.numpy() for v in shared)}


def elastic_state():
    """KerasState: sync gives rank 0's weights and attributes; restore rolls back to the last commit."""
    model = built_model(140 + rank)
    state = hvd.elastic.KerasState(model, epoch=5 + rank, batch=0)
    state.sync()
    synced = weights_digest(model)
    epoch_after_sync = state.epoch
    state.commit()
    for v in model.trainable_variables:
        v.assign(tf.zeros_like(v))
    state.batch = 7
    state.restore()
    return {"synced": synced, "epoch_after_sync": epoch_after_sync, "restored": weights_digest(model) == synced,
            "batch_after_restore": state.batch}


def elastic_run():
    """Horovod's elastic recipe under a static launch: trains to the end; the state counts the epochs."""
    model = built_model(150 + rank)
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(1)])
    x, y = data(160 + rank)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)
    callbacks = [hvd.elastic.CommitStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        state.model.fit(dataset, steps_per_epoch=4, epochs=3 - state.epoch, callbacks=callbacks, verbose=0)

    train(state)
    return {"epoch": state.epoch, "batch": state.batch, "resets": len(resets), "final": weights_digest(model)}


def partial_lazily_built():
    """PartialDistributedOptimizer on a model built by its first step: the local layer's weights drift apart."""
    keras.utils.set_random_seed(170)  # the same initial weights everywhere; no broadcast
    local = keras.layers.Dense(8, activation="relu")
    model = keras.Sequential([local, keras.layers.Dense(3)])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[local]))
    x, y = data(180 + rank)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    return {"local": digest(v.numpy() for v in local.variables),
            "shared": digest(v.numpy() for v in model.layers[1].variables)}


def collectives():
    try:
        hvd.broadcast_global_variables(0)
        refused = ""
    except RuntimeError as exc:
        refused = str(exc)
    return {
        "allreduce": float(hvd.allreduce(float(rank + 1)).numpy()),
        "allreduce_sum": float(hvd.allreduce(float(rank + 1), op=hvd.Sum).numpy()),
        "allgather": hvd.allgather([rank]).numpy().tolist(),
        "broadcast": float(hvd.broadcast(float(rank + 7), 0).numpy()),
        "reducescatter": hvd.reducescatter(np.array([[1.0, 2.0], [3.0, 4.0]]) * (rank + 1)).numpy().tolist(),
        "broadcast_global_variables": refused,
        "process": [hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size(),
                    bool(hvd.is_initialized()), bool(hvd.gloo_enabled()), bool(hvd.mpi_enabled()),
                    bool(hvd.gloo_built())],
    }


def best_checkpoint():
    path = os.path.join(workdir, "best.keras")
    model = built_model(190)
    best = hvd.callbacks.BestModelCheckpoint(monitor="loss")
    best.filepath = path
    x, y = data(200 + rank)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), hvd.callbacks.MetricAverageCallback(),
                         best])
    hvd.allreduce(0.0, name="best_saved")
    return {"exists": os.path.exists(path)}


result = {"rank": rank, "stack": compat.STACK,
          "lazy_sequential": lazily_built("sequential"), "lazy_subclassed": lazily_built("subclassed"),
          "built": built_first_step(), "learning_rates": learning_rates(), "metric_average": metric_average(),
          "optimizer_config": optimizer_config(), "load_model": saved_and_loaded(),
          "local_variables": local_variables(), "elastic_state": elastic_state(), "elastic_run": elastic_run(),
          "partial_lazily_built": partial_lazily_built(), "collectives": collectives(),
          "best_checkpoint": best_checkpoint()}
print("RESULT " + json.dumps(result), flush=True)
