"""Run under horovodrun or mpirun: MetricAverageCallback on uneven shards equals one process on all the data.

Rank r evaluates 7 + 23 * r examples (uneven on purpose). Every rank also computes
the expected values by evaluating all ranks' examples itself. Exits 1 on mismatch.
:func:`check` is also the ``metric_average`` scenario of ``callbacks_check.py``.
"""
import atexit
import gc
import json
import sys

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from hvdkeras.callbacks import MetricAverageCallback
from hvdkeras.callbacks.metric_average import global_results
from hvdkeras.runtime import distributed

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

keras = tf.keras


def shard(r, offset):
    rng = np.random.RandomState(100 * r + offset)
    n = 7 + 23 * r
    return rng.randn(n, 5).astype("float32"), rng.randint(0, 4, n).astype("int32")


def whole(parts):
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def check() -> dict:
    """The averaged logs of this rank next to the values one process computes on all the data (Horovod initialised)."""
    size, rank = hvd.size(), hvd.rank()
    tf.random.set_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="softmax")])
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy",
                  metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    distributed.broadcast_variables(model.variables, root_rank=0)

    train_all = [shard(r, 0) for r in range(size)]
    val_all = [shard(r, 1) for r in range(size)]
    expected_train = model.evaluate(*whole(train_all), batch_size=1000, verbose=0, return_dict=True)
    expected_val = model.evaluate(*whole(val_all), batch_size=1000, verbose=0, return_dict=True)

    cb = MetricAverageCallback()
    cb.set_model(model)
    cb.set_params({"epochs": 1, "steps": 1, "verbose": 0})
    cb.on_epoch_begin(0)
    local_train = model.evaluate(*train_all[rank], verbose=0, return_dict=True)  # the epoch's training states
    cb.on_test_begin()
    local_val = model.evaluate(*val_all[rank], batch_size=5, verbose=0, return_dict=True)
    logs = {"loss": local_train["loss"], "accuracy": local_train["accuracy"],
            "val_loss": local_val["loss"], "val_accuracy": local_val["accuracy"], "lr": 0.1 * (rank + 1)}
    cb.on_epoch_end(0, logs)

    standalone = global_results(model.metrics, name="standalone")  # current states are the validation ones
    mean_of_means = np.mean(hvd.allgather_object(local_val["loss"]))
    return {"rank": rank, "logs": logs, "expected_train": expected_train, "expected_val": expected_val,
            "standalone": standalone, "mean_of_means_val_loss": float(mean_of_means),
            "mean_lr": float(np.mean([0.1 * (r + 1) for r in range(size)]))}


def exact(result) -> bool:
    logs, expected_train, expected_val = result["logs"], result["expected_train"], result["expected_val"]
    return bool(np.isclose(logs["loss"], expected_train["loss"], rtol=1e-5)
                and np.isclose(logs["accuracy"], expected_train["accuracy"], rtol=1e-6)
                and np.isclose(logs["val_loss"], expected_val["loss"], rtol=1e-5)
                and np.isclose(logs["val_accuracy"], expected_val["accuracy"], rtol=1e-6)
                and np.isclose(result["standalone"]["loss"], expected_val["loss"], rtol=1e-5)
                and np.isclose(logs["lr"], result["mean_lr"]))


if __name__ == "__main__":
    hvd.init()
    result = check()
    print("RESULT " + json.dumps(result), flush=True)
    sys.exit(0 if exact(result) else 1)
