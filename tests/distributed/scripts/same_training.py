"""Run under horovodrun on 1 or 2 ranks: data-parallel training is the same training as one process.

    python same_training.py OUT_DIR WORKDIR

1. **The trainer**, with its defaults on ``configs/digits.yaml``: dropout off, 2 epochs of
   10 steps at the global batch of 64 (1 x 64 or 2 x 32). The digits pipeline gives
   every number of ranks the same global batches, the rate is a function of the
   global batch, and the exchange is exact float32 averaging (the default).
2. **A user's ``model.fit``**: ``hvdkeras.DistributedOptimizer`` and
   ``hvdkeras.callbacks.default_callbacks`` (a warmup from 0.05 to 0.1 over the first
   epoch), each rank feeding its slice of the same 20 global batches of 64.
3. **Every path a Keras user applies gradients by** (``training_paths.py``): ``fit``, a
   custom ``train_step`` with ``apply_gradients`` (also accumulating, and under loss
   scaling), ``apply`` (Keras 3), ``minimize`` (Keras 2), ``DistributedGradientTape`` in a
   custom loop, alone or feeding a distributed optimizer.
4. **On 2 ranks, mixed precision with fp16 compression** (the trainer's
   ``compile_model``): at step 3 only rank 1's batch overflows in float16. The loss
   scale is applied around the allreduce, so both ranks must skip that step alike:
   rank 0, whose own batch is finite, halves its loss scale at that step too.

Rank 0 writes OUT_DIR/<size>.npz (trainer_<i>, trainer_initial_<i>, fit_<i>,
fit_initial_<i>, path_<case>_<i>) and every rank OUT_DIR/<size>-rank<r>.json (part 4's loss scale
before and after each step, and a digest of its weights; a digest of each path's weights).
"""
import atexit
import gc
import hashlib
import json
import os
import sys

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import numpy as np
import tensorflow as tf

import hvdkeras
from hvdkeras import callbacks as hvd_callbacks
from hvdkeras import config as config_lib
from hvdkeras.runtime import compat
from hvdkeras.training import assembly
from hvdkeras.training import data as data_lib
from hvdkeras.training import trainer as trainer_lib

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import training_paths  # this directory's module

keras = compat.keras
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
out_dir, workdir = sys.argv[1:3]
SETS = ["model.dropout=0", "trainer.steps_per_epoch=10", "trainer.epochs=2", "trainer.verbose=0",
        "trainer.validation_freq=0", "checkpoint.enabled=false"]


def weights(model):
    return [v.numpy() for v in model.weights]


def digest_of(arrays):
    return hashlib.sha256(b"".join(np.ascontiguousarray(w).tobytes() for w in arrays)).hexdigest()


# 1. the trainer
cfg = config_lib.load(os.path.join(REPO, "configs", "digits.yaml"), SETS)
trainer = trainer_lib.Trainer.from_config(cfg, workdir)
rank, size = trainer.process.rank, trainer.process.size
saved = {f"trainer_initial_{i}": w for i, w in enumerate(weights(trainer.model))}
trainer.fit()
saved.update({f"trainer_{i}": w for i, w in enumerate(weights(trainer.model))})

# 2. a user's model.fit: the same 20 global batches of 64, rank r feeding rows [32 r, 32 r + 32) of each
pixels, labels = data_lib.digits_arrays()
x_all = (pixels / 16.0).astype("float32")
order = np.random.RandomState(3).permutation(len(x_all))[: 20 * 64].reshape(20, 64)
per_rank = 64 // size
mine = order[:, rank * per_rank:(rank + 1) * per_rank].reshape(-1)
dataset = tf.data.Dataset.from_tensor_slices((x_all[mine], labels[mine].astype("int32"))).batch(per_rank)
keras.utils.set_random_seed(11)  # rank 0's initial weights; the broadcast callback gives them to every rank
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(10, activation="softmax")])
saved.update({f"fit_initial_{i}": w for i, w in enumerate(weights(model))})
model.compile(optimizer=hvdkeras.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
              loss="sparse_categorical_crossentropy")
callbacks = hvd_callbacks.default_callbacks(initial_lr=0.1, warmup_epochs=1, warmup_start_lr=0.05,
                                            steps_per_epoch=10, progress=False)
model.fit(dataset.repeat(), epochs=2, steps_per_epoch=10, callbacks=callbacks, verbose=0)
saved.update({f"fit_{i}": w for i, w in enumerate(weights(model))})

# 3. every path a Keras user applies gradients by (training_paths.py)
paths = training_paths.run(rank, size)
for case, values in paths.items():
    saved.update({f"path_{case}_{i}": w for i, w in enumerate(values)})
if rank == 0:
    np.savez(os.path.join(out_dir, f"{size}.npz"), **saved)

# 4. mixed precision, fp16 compression, one rank overflowing
report = {"paths": {case: digest_of(values) for case, values in paths.items()}}
if size > 1:
    mixed = config_lib.load(os.path.join(REPO, "configs", "digits.yaml"),
                            SETS + ["runtime.mixed_precision=mixed_float16", "horovod.compression=fp16"])
    model3, _ = assembly.compile_model(mixed, trainer.data, size)
    optimizer = model3.optimizer
    initial_scale = compat.loss_scale(optimizer)
    batches = list(trainer.data.train(0, 1).take(6))
    blown = 3  # rank 1's batch 3 is scaled beyond float16's range (65504): its gradients are not finite
    xs = [x * (6e4 if (rank == 1 and i == blown) else 1.0) for i, (x, _) in enumerate(batches)]
    ds = tf.data.Dataset.from_tensor_slices((tf.stack(xs), tf.stack([y for _, y in batches])))
    scales = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: scales.append(compat.loss_scale(optimizer)))
    model3.fit(ds, epochs=1, steps_per_epoch=6, verbose=0,
               callbacks=[hvd_callbacks.BroadcastGlobalVariablesCallback(0), record])
    report.update({"initial_scale": initial_scale, "scales": scales, "digest": digest_of(weights(model3)),
                   "finite": bool(all(np.isfinite(w).all() for w in weights(model3)))})
with open(os.path.join(out_dir, f"{size}-rank{rank}.json"), "w") as f:
    json.dump(report, f)
print(f"rank {rank}/{size}: done", flush=True)
