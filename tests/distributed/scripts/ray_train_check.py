"""A Ray Train script written for Ray's removed ``HorovodTrainer``, switched by its import; run as a Ray driver.

    python tests/distributed/scripts/ray_train_check.py FOLDER [--fail-at EPOCH] [--elastic [--grow]]

Two workers train a small dense model on the packaged digits (each its own shard), Horovod averaging the
gradients, for three epochs; rank 0 reports a checkpoint after each through ``ray.train.report`` (the others report
their metrics only), and each start resumes from ``ray.train.get_checkpoint()``. With ``--fail-at E`` rank 1's
process exits in the middle of epoch E of the first start: ``FailureConfig(max_failures=1)`` starts the group again.
Rank 0 appends each epoch it begins to ``FOLDER/begun``; each rank writes its final weights' digest to
``FOLDER/digest-<rank>``. Prints ``RESULT {...}``.

With ``--elastic``, the group is elastic (``ScalingConfig(num_workers=(2, 3))``) and trains for longer: each start
takes its batch and learning rate from the trainer's rule for a resized world (``hvdkeras.ray.resized``,
``keep_global_batch``: the global batch of 96 stays, each rank takes ``96 / size``), and rank 0 writes
``epoch size per-rank-batch learning-rate`` to ``FOLDER/begun``. Ray Train's elastic policy looks at the
cluster's nodes every 2 s here (``elastic_resize_monitor_interval_s``), and learns of a new node within 20 s (its
autoscaling coordinator's tick). With ``--grow``, the test starts a third node once epoch 1 has begun on two, and
a group of two waits at the start of epoch 2 (at most 120 s) until Ray Train starts it again, on three, from the
last checkpoint (with ``--fail-at``, a worker of the larger group then exits in that epoch). Without ``--grow``,
epochs last 2 s longer, for a node lost mid-fit by hand (docs/records/lab-runs.md).
"""
import argparse
import json
import os
import sys
import tempfile
import time

import ray.train
from ray.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig

# was: from ray.train.horovod import HorovodConfig, HorovodTrainer
from hvdkeras.ray import HorovodConfig, HorovodTrainer, resized

EPOCHS = 3
ELASTIC_EPOCHS = 8
GROW_EPOCHS = 5
GLOBAL_BATCH = 96


def train_loop(config):
    import hashlib

    import numpy as np
    import tensorflow as tf

    import hvdkeras.keras as hvd
    from hvdkeras.training.data import digits_arrays

    hvd.init()
    epochs, batch, lr = EPOCHS, 32, 0.05
    pixels, target = digits_arrays()
    x = (pixels.reshape(len(pixels), -1) / 16.0).astype("float32")[hvd.rank()::hvd.size()]
    y = target.astype("int64")[hvd.rank()::hvd.size()]
    tf.keras.utils.set_random_seed(7)
    model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(10)])
    start, initial_size = 0, hvd.size()
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as folder:
            model.load_weights(os.path.join(folder, "model.weights.h5"))
            with open(os.path.join(folder, "state.json")) as f:
                state = json.load(f)
            start, initial_size = state["epoch"] + 1, state["initial_size"]
    if config["elastic"]:  # this start's batch and rate, by the trainer's rule for a resized world
        epochs = GROW_EPOCHS if config["grow"] else ELASTIC_EPOCHS
        batch, lr = resized(GLOBAL_BATCH, lr, "keep_global_batch", initial_size, hvd.size())
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(lr)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    folder = config["folder"]
    first_start = not os.path.exists(os.path.join(folder, "failed"))

    class FailHere(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if config["fail_at"] == epoch and first_start and hvd.rank() == 1 and batch == 5:
                open(os.path.join(folder, "failed"), "w").close()
                # Ray Train's controller collects the reports every 2 s: a checkpoint reported less than that before
                # a failure may not be registered, and the restart would begin the epoch before it again.
                time.sleep(5)
                os._exit(1)  # the worker's process is gone, as a lost node takes it

    for epoch in range(start, epochs):
        if hvd.rank() == 0:
            with open(os.path.join(folder, "begun"), "a") as f:
                f.write(f"{epoch} {hvd.size()} {batch} {lr}\n" if config["elastic"] else f"{epoch}\n")
        if config["grow"] and epoch == 2:  # until the node the test starts joins the group
            time.sleep(120 if hvd.size() < 3 else 0)
        elif config["elastic"] and not config["grow"]:
            time.sleep(2)  # an epoch long enough to lose a node in the middle of the fit
        history = model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False,
                            callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), FailHere()])
        with tempfile.TemporaryDirectory() as out:
            saved = None
            if hvd.rank() == 0:
                model.save_weights(os.path.join(out, "model.weights.h5"))
                with open(os.path.join(out, "state.json"), "w") as f:
                    json.dump({"epoch": epoch, "initial_size": initial_size}, f)
                saved = Checkpoint.from_directory(out)
            ray.train.report({"epoch": epoch, "loss": float(history.history["loss"][-1])}, checkpoint=saved)
    digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()
    with open(os.path.join(folder, f"digest-{hvd.rank()}"), "w") as f:
        f.write(digest)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--fail-at", type=int, default=-1)
    parser.add_argument("--elastic", action="store_true")
    parser.add_argument("--grow", action="store_true")
    args = parser.parse_args()
    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=True)
    trainer = HorovodTrainer(
        train_loop, train_loop_config={"folder": args.folder, "fail_at": args.fail_at, "elastic": args.elastic,
                                              "grow": args.grow},
        horovod_config=HorovodConfig(timeout_s=60),
        scaling_config=ScalingConfig(num_workers=(2, 3) if args.elastic else 2, use_gpu=False,
                                     resources_per_worker={"CPU": 1},
                                     **({"elastic_resize_monitor_interval_s": 2.0} if args.elastic else {})),
        run_config=RunConfig(name="digits", storage_path=os.path.join(args.folder, "results"),
                             failure_config=FailureConfig(max_failures=1)))
    result = trainer.fit()
    with open(os.path.join(args.folder, "begun")) as f:
        begun = [line.split() if args.elastic else int(line) for line in f]
    ranks = sorted(name for name in os.listdir(args.folder) if name.startswith("digest-"))
    digests = [open(os.path.join(args.folder, name)).read() for name in ranks]
    print("RESULT " + json.dumps({"metrics": {k: result.metrics[k] for k in ("epoch", "loss")}, "begun": begun,
                                  "digests": digests, "error": repr(result.error) if result.error else None}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
