"""Run under horovodrun: checks hvdkeras' DistributedOptimizer against gradients computed by hand.

    python gradient_check.py [WORKDIR]

For a dense model and an embedding model (sparse gradients), each rank computes its
own gradient on its own batch; the ranks exchange them with ``allgather_object``
(pickled numpy: no allreduce involved) and compute their mean. One SGD step at
learning rate 1 through the distributed optimizer must then move each weight by
exactly minus that mean (one ``model.fit`` step), with one request per gradient (the
default, ``groups=0``) and with one and two grouped requests. Then ``backward_passes_per_step=2``: the weights change on
every second batch only, to the same values on every rank.

Horovod's other arguments, through ``hvdkeras.keras`` (Horovod's Keras API): ``op=Sum``
moves by minus the sum; ``gradient_predivide_factor`` keeps the mean; ``groups`` as a
list of variable lists; ``compression=hvd.Compression.fp16`` (within fp16's precision);
``PartialDistributedOptimizer`` leaves a local layer's gradient unsent, divided by the
number of ranks. Prints one ``RESULT <json>`` line per rank.

With WORKDIR, the same two processes then train the default digits job (6 of its 15 epochs) with fp16 compression
(``horovod.compression=fp16``, through ``hvdkeras.Trainer``, no checkpoints) in WORKDIR and print a
second ``RESULT`` per rank, ``{"part": "fp16_default_job", "final": ..., "weights": <digest>}``; the job
that does this sets its processes up as the trainer does first (``trainer_process.py``).
"""
import atexit
import gc
import hashlib
import json
import os
import sys

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

import hvdkeras.keras as hvd_keras
from hvdkeras import DistributedOptimizer
from hvdkeras.runtime import compat

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

keras = compat.keras
hvd.init()
rank, size = hvd.rank(), hvd.size()


def dense_model():
    keras.utils.set_random_seed(7)  # the same initial weights on every rank
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(3)])


def embedding_model():
    keras.utils.set_random_seed(7)
    return keras.Sequential([keras.Input((4,), dtype="int32"), keras.layers.Embedding(50, 8),
                             keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(3)])


def batch(kind, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(8, 6)).astype("float32") if kind == "dense" else rng.integers(0, 50, (8, 4)).astype("int32")
    return x, rng.integers(0, 3, 8).astype("int32")


def local_gradients(model, x, y):
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    return tape.gradient(loss, model.trainable_variables)


def check_mean(kind, make, sparse_as_dense, groups=0):
    model = make()
    x, y = batch(kind, seed=100 + rank)  # different data on every rank
    grads = local_gradients(model, x, y)
    kinds = [type(g).__name__ for g in grads]
    mine = [tf.convert_to_tensor(g).numpy() for g in grads]
    expected = np.mean(np.array(hvd.allgather_object(mine, name=f"grads.{kind}.{sparse_as_dense}.{groups}"),
                                dtype=object), axis=0)
    before = [v.numpy().copy() for v in model.trainable_variables]
    # One training step the way users train: model.fit with the distributed optimizer.
    model.compile(DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0), sparse_as_dense=sparse_as_dense,
                                       groups=groups),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
    steps = [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
    err = max(float(np.max(np.abs(s - e))) for s, e in zip(steps, expected))
    own = max(float(np.max(np.abs(s - m))) for s, m in zip(steps, mine))  # differs from this rank's own gradient
    return {"max_abs_error": err, "distance_from_local": own, "gradient_types": kinds}


def check_horovod_arguments(case, **kwargs):
    """One SGD step at rate 1 with Horovod's arguments; the step against the sum or mean of the ranks' gradients."""
    model = dense_model()
    x, y = batch("dense", seed=300 + rank)
    mine = [g.numpy() for g in local_gradients(model, x, y)]
    gathered = np.array(hvd.allgather_object(mine, name=f"grads.{case}"), dtype=object)
    summed, mean = np.sum(gathered, axis=0), np.mean(gathered, axis=0)
    expected = summed if kwargs.get("op") is hvd_keras.Sum else mean
    local_layers = kwargs.pop("local_layers", None)
    if kwargs.pop("groups_by_layer", False):
        kwargs["groups"] = [[model.layers[0].kernel, model.layers[1].kernel]]  # the biases: one request each
    if local_layers is not None:
        optimizer = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0),
                                                          local_layers=model.layers[0], **kwargs)
        # the first layer's kernel and bias: this rank's own gradient divided by the number of ranks
        expected = [m / size for m in mine[:2]] + list(mean[2:])
    else:
        optimizer = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0), **kwargs)
    before = [v.numpy().copy() for v in model.trainable_variables]
    model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
    steps = [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
    return {"max_abs_error": max(float(np.max(np.abs(s - e))) for s, e in zip(steps, expected)),
            "scale": max(float(np.max(np.abs(e))) for e in expected)}


def check_accumulation():
    model = dense_model()
    opt = DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.1), backward_passes_per_step=2,
                               average_aggregated_gradients=True)
    model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = batch("dense", seed=200 + rank)
    snapshots = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            snapshots.append(np.concatenate([v.numpy().ravel() for v in model.trainable_variables]))

    start = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    data = tf.data.Dataset.from_tensor_slices((np.repeat(x, 6, 0), np.repeat(y, 6, 0))).batch(8)
    model.fit(data, epochs=1, verbose=0, callbacks=[Record()])
    changed = [bool(np.any(a != b)) for a, b in zip([start] + snapshots[:-1], snapshots)]
    digest = float(np.sum(snapshots[-1] * np.arange(snapshots[-1].size)))
    return {"changed_after_batch": changed, "final_digest": digest}


result = {"rank": rank, "stack": compat.STACK,
          "dense": check_mean("dense", dense_model, sparse_as_dense=False),
          "dense_one_group": check_mean("dense", dense_model, sparse_as_dense=False, groups=1),
          "dense_two_groups": check_mean("dense", dense_model, sparse_as_dense=False, groups=2),
          "embedding_sparse": check_mean("embedding", embedding_model, sparse_as_dense=False),
          "embedding_as_dense": check_mean("embedding", embedding_model, sparse_as_dense=True),
          "accumulation": check_accumulation(),
          "op_sum": check_horovod_arguments("op_sum", op=hvd_keras.Sum),
          "predivide": check_horovod_arguments("predivide", gradient_predivide_factor=2.0, name="predivided"),
          "groups_of_variables": check_horovod_arguments("groups_of_variables", groups_by_layer=True),
          "fp16": check_horovod_arguments("fp16", compression=hvd_keras.Compression.fp16),
          "partial": check_horovod_arguments("partial", local_layers=True)}
print("RESULT " + json.dumps(result), flush=True)

if len(sys.argv) > 1:  # the default job with fp16 compression, in the same processes (one job start for both),
    # for 6 of its 15 epochs (its schedule over those 6): the default job's threshold, 0.90, is passed by epoch 3-4
    from hvdkeras import config as config_lib
    from hvdkeras.training.trainer import Trainer

    keras.backend.clear_session()
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    cfg = config_lib.load(os.path.join(repo, "configs", "digits.yaml"),
                          ["trainer.verbose=0", "trainer.epochs=6", "horovod.compression=fp16",
                           "checkpoint.enabled=false", "trainer.export=false"])
    trainer = Trainer.from_config(cfg, sys.argv[1])
    final = trainer.fit()
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(v.numpy()).tobytes() for v in trainer.model.variables))
    print("RESULT " + json.dumps({"rank": rank, "part": "fp16_default_job", "final": final,
                                  "weights": digest.hexdigest(), "variables": len(trainer.model.variables)}),
          flush=True)
