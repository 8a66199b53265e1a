"""Run under horovodrun: hvdkeras.callbacks scenarios on real ranks; prints `RESULT <json>` per rank and scenario.

    python callbacks_check.py SCENARIO[,SCENARIO...] OUT_DIR [PHASE]

Scenarios: nan, early_stopping, reduce_lr, uneven_validation, metric_average, warmup, backup, chief_writers,
diverge_perturbed, diverge_plain (last in its job: it leaves with the guard's error, as a script would). Several
run one after the other in the same two processes (one job start instead of several), each from the
same seeds and with a model of its own. The pytest side (test_callbacks_two_ranks.py) checks the results.
"""
import atexit
import gc
import json
import os
import sys
import time

from hvdkeras.runtime import tensorflow_import

tensorflow_import.load()  # first, as the command lines import TensorFlow: quiet, matplotlib at its first use

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

import hvdkeras.keras as hvd_keras
from hvdkeras import DistributedOptimizer
from hvdkeras import callbacks as hc
from hvdkeras.callbacks.divergence import variable_name
from hvdkeras.common.errors import DivergenceError
from hvdkeras.runtime import checkpointing, compat, distributed

atexit.register(gc.freeze)  # skip the interpreter's last garbage collection, over TensorFlow's objects: ~1 s a rank

keras = tf.keras
scenarios, out_dir = sys.argv[1].split(","), sys.argv[2]
phase = sys.argv[3] if len(sys.argv) > 3 else ""
hvd.init()
rank, size = hvd.rank(), hvd.size()
BATCH, STEPS = 8, 5


def model_and_optimizer(lr=0.05, momentum=0.9):
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile(DistributedOptimizer(keras.optimizers.SGD(lr, momentum=momentum)),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def data(n, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 6).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")


class Record(keras.callbacks.Callback):
    """Records epochs, batches, the learning rate seen by each batch, and the final logs."""

    def __init__(self):
        super().__init__()
        self.epochs, self.batches, self.lrs, self.logs, self.epoch = [], [], [], {}, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.epochs.append(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append([self.epoch, batch, float(self.model.optimizer.learning_rate.numpy())])

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append([self.epoch, batch])

    def on_epoch_end(self, epoch, logs=None):
        self.logs = {k: float(v) for k, v in (logs or {}).items()}


class Signal(keras.callbacks.Callback):
    """Puts a per-rank value in the logs: rank 0's rises from epoch 1 on, rank 1's keeps falling."""

    def on_epoch_end(self, epoch, logs=None):
        logs["signal"] = float(epoch) if rank == 0 else -float(epoch)


current = None  # the scenario running now, named in its results


def report(**values):
    print("RESULT " + json.dumps(dict(values, rank=rank, scenario=current)), flush=True)


def weights_fingerprint(model):
    return distributed.fingerprint([v.numpy() for v in model.variables + model.optimizer.variables])


def nan(x, y, train, rec):
    # rank 1's inputs are NaN in epoch 2 (index 1), batch 3, and nowhere else
    if rank == 1:
        x = x.copy()
        x[(STEPS + 3) * BATCH:(STEPS + 4) * BATCH] = np.nan
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat()
    model = model_and_optimizer()
    model.fit(train, steps_per_epoch=STEPS, epochs=4, verbose=0,
              callbacks=[hc.BroadcastGlobalVariablesCallback(0), hc.TerminateOnNaN(), rec])
    report(last_batch=rec.batches[-1], epochs=rec.epochs)


def early_stopping(x, y, train, rec):
    model = model_and_optimizer()
    stopper = hc.EarlyStopping(monitor="signal", patience=0, mode="min")
    model.fit(train, steps_per_epoch=STEPS, epochs=6, verbose=0,
              callbacks=[hc.BroadcastGlobalVariablesCallback(0), Signal(), stopper, rec])
    report(epochs=rec.epochs, stopped_epoch=stopper.stopped_epoch)


def reduce_lr(x, y, train, rec):
    model = model_and_optimizer()
    plateau = hc.ReduceLROnPlateau(monitor="signal", patience=0, factor=0.5, mode="min", min_lr=1e-4)
    model.fit(train, steps_per_epoch=STEPS, epochs=3, verbose=0,
              callbacks=[hc.BroadcastGlobalVariablesCallback(0), Signal(), plateau, rec])
    report(lr=float(model.optimizer.learning_rate.numpy()), lrs=rec.lrs)


def uneven_validation(x, y, train, rec):
    xv, yv = data(12, seed=99)  # the same 12 examples everywhere: rank 0 validates 7, rank 1 the other 5
    mine = slice(0, 7) if rank == 0 else slice(7, 12)
    model = model_and_optimizer()
    model.fit(train, steps_per_epoch=STEPS, epochs=2, verbose=0, validation_data=(xv[mine], yv[mine]),
              validation_batch_size=3,
              callbacks=[hc.BroadcastGlobalVariablesCallback(0), hc.MetricAverageCallback(),
                         hc.ThroughputLogger(), rec])
    single = model.evaluate(xv, yv, batch_size=12, verbose=0, return_dict=True)
    local = model.evaluate(xv[mine], yv[mine], verbose=0, return_dict=True)
    report(logs=rec.logs, single=single, local=local, weights=weights_fingerprint(model))


def metric_average(x, y, train, rec):
    """MetricAverageCallback on uneven shards against one process on all the data (``metric_average_check.py``)."""
    import metric_average_check  # this folder's module

    result = metric_average_check.check()
    result.pop("rank")
    report(**result)


def warmup(x, y, train, rec):
    model = model_and_optimizer(lr=0.4)
    cbs = [hc.BroadcastGlobalVariablesCallback(0),
           hc.LearningRateWarmupCallback(initial_lr=0.4, warmup_epochs=2, verbose=1),
           hc.LearningRateScheduleCallback(0.4, multiplier=lambda e: 0.1 ** int(e >= 3), start_epoch=2), rec]
    model.fit(train, steps_per_epoch=STEPS, epochs=4, verbose=0, callbacks=cbs)
    report(lrs=rec.lrs, weights=weights_fingerprint(model))


def backup(x, y, train, rec):
    backup_dir = os.path.join(out_dir, "backup")
    model = model_and_optimizer()

    class Preempted(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2 and rank == 1:
                # Only rank 0 writes the backup, at the end of epoch 2, and nothing makes rank 1 wait for
                # it: killed at once, rank 1 could take rank 0 down mid-save (the previous backup then
                # stays, as it should, but this scenario is about resuming from epoch 2's). So rank 1 dies
                # once epoch 2's backup is the only one on disk (rank 0, past its save, waits for rank 1
                # in epoch 3's first allreduce), or after 60 s, and the test then shows what was there.
                deadline = time.time() + 60
                def on_disk():
                    return sorted(os.listdir(backup_dir)) if os.path.isdir(backup_dir) else []

                while time.time() < deadline and on_disk() != ["epoch-0002"]:
                    time.sleep(0.05)
                os._exit(3)  # a hard kill of one rank at the start of the third epoch

    if phase == "1":
        model.fit(train, steps_per_epoch=STEPS, epochs=4, verbose=0,
                  callbacks=[hc.BroadcastGlobalVariablesCallback(0), hc.BackupAndRestore(backup_dir), Preempted()])
    else:
        class Snapshot(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.at_start = weights_fingerprint(self.model)
                self.iterations = int(self.model.optimizer.iterations.numpy())

        snap = Snapshot()
        bnr = hc.BackupAndRestore(backup_dir)
        # What was saved, read independently into a fresh model on every rank.
        saved_model = model_and_optimizer()
        saved_model.optimizer.build(saved_model.trainable_variables)
        latest = checkpointing.CheckpointStore(backup_dir).latest()
        checkpointing.CheckpointStore.restore(latest, checkpointing.trackable_for(saved_model))
        model.fit(train, steps_per_epoch=STEPS, epochs=4, verbose=0,
                  callbacks=[hc.BroadcastGlobalVariablesCallback(0), bnr, snap, rec])
        report(at_start=snap.at_start, iterations=snap.iterations, saved=weights_fingerprint(saved_model),
               saved_epoch=latest.epoch, saved_step=latest.meta["global_step"], epochs=rec.epochs,
               final=weights_fingerprint(model))


def chief_writers(x, y, train, rec):
    model = model_and_optimizer()
    xv, yv = data(20, seed=7 + rank)
    d = os.path.join(out_dir, f"rank{rank}")
    cbs = [hc.BroadcastGlobalVariablesCallback(0), hc.MetricAverageCallback(batch_frequency=2),
           hc.ModelCheckpoint(os.path.join(d, "weights-{epoch:02d}.weights.h5"), save_weights_only=True, keep=2),
           hc.ModelCheckpoint(os.path.join(d, "best.keras"), monitor="val_accuracy", save_best_only=True),
           hc.TensorBoard(log_dir=os.path.join(d, "tb"), update_freq=2),
           hc.CSVLogger(os.path.join(d, "log.csv")),
           hc.ProgbarLogger(**compat.progbar_steps_kwargs()), rec]
    if compat.TF_CHECKPOINT_WEIGHTS:  # a weights prefix of several files (Keras 2 only)
        cbs.insert(4, hc.ModelCheckpoint(os.path.join(d, "tf-weights-{epoch:02d}"), save_weights_only=True, keep=1))
    model.fit(train, steps_per_epoch=STEPS, epochs=3, verbose=2, validation_data=(xv, yv), callbacks=cbs)
    report(files=sorted(os.listdir(d)) if os.path.isdir(d) else [], logs=rec.logs)


def diverge_perturbed(x, y, train, rec):
    """Horovod's switched script (its broadcast callback) with hvdkeras' writers; rank 1 moves one weight by 1e-6
    when epoch 2 begins. Every rank stops at the end of epoch 2 naming that weight; nothing of epoch 2 is written."""
    d = os.path.join(out_dir, "perturbed")
    model = model_and_optimizer()
    kernel = model.layers[-1].kernel

    class Perturb(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1 and rank == 1:
                delta = np.zeros(kernel.shape, "float32")
                delta[2, 1] = 1e-6
                kernel.assign_add(delta)

    cbs = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0), Perturb(),
           hc.BackupAndRestore(os.path.join(d, "backup"), delete_checkpoint=False),
           hc.ModelCheckpoint(os.path.join(d, "w-{epoch}.weights.h5"), save_weights_only=True), rec]
    try:
        model.fit(train, steps_per_epoch=STEPS, epochs=3, verbose=0, callbacks=cbs)
        error = None
    except DivergenceError as exc:
        error = str(exc)
    report(error=error, name=variable_name(kernel), epochs=rec.epochs, files=sorted(os.listdir(d)),
           backups=sorted(os.listdir(os.path.join(d, "backup"))))


def diverge_plain(x, y, train, rec):
    """A plain optimizer, not DistributedOptimizer, with the default callbacks and a checkpoint every 3 batches: each
    rank trains alone on its own data. Every rank stops before the first save, with the guard's one line, uncaught."""
    d = os.path.join(out_dir, "plain")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(keras.optimizers.SGD(0.05), "sparse_categorical_crossentropy")
    cbs = hc.default_callbacks(progress=False) + [
        hc.ModelCheckpoint(os.path.join(d, "b-{epoch}-{batch}.weights.h5"), save_weights_only=True, save_freq=3)]
    model.fit(train, steps_per_epoch=STEPS, epochs=2, verbose=0, callbacks=cbs)


SCENARIOS = {f.__name__: f for f in (nan, early_stopping, reduce_lr, uneven_validation, metric_average, warmup, backup,
                                     chief_writers, diverge_perturbed, diverge_plain)}
unknown = [s for s in scenarios if s not in SCENARIOS]
if unknown:
    raise SystemExit(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
for current in scenarios:
    tf.keras.utils.set_random_seed(rank)  # different initial weights per rank: the broadcast must fix them
    x, y = data(STEPS * BATCH * 4, seed=10 + rank)
    SCENARIOS[current](x, y, tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat(), Record())
