"""Run by test_spark_cluster.py as the driver of lab/spark.py's standalone cluster (its environment: ClusterInfo.env()).

``SparkSession.builder.getOrCreate()`` joins the cluster (the driver's spark-defaults.conf names it), then:

* ``hvdkeras.spark.run(fn, num_proc=2)``: one rank per executor, each allreducing its rank and saying
  where it ran (hostname, its address on the lab's link, its network namespace);
* ``num_proc=3`` on the cluster's 2 task slots (``spark.cores.max``): the one-line error and how long it took;
* with ``STORE`` (``spark_cluster_check.py STORE``, on the filesystem both hosts share): KerasEstimator fits of
  two ranks, one per host, on a small model. The first (``max_retries=0``) has rank 1 SIGKILLed in epoch 2 and
  must end in one line; the second, with the same run_id, resumes from the store's checkpoint, has the executor
  JVM under rank 1 SIGKILLed in epoch 2 and rank 1 itself in epoch 3, retries both and returns; a quiet fit
  that nobody disturbed is the reference for its weights, and its kept Parquet for a second ``prepare``'s rows.
  Each rank records the GPU Spark assigned its task (the lab's stand-ins) and what it made visible.

One driver (one SparkSession, one set of executors) for every check: each costs 10-20 s to start.
Prints ``RESULT {"ranks": [...], "too_many": {...}, "slots": {...}, "killed": {...}, "resumed": {...},
"devices": {...}, "transformed": N, "same_files": bool}``. The estimator's other checks run on local[2]
(test_spark.py), and Horovod's own scenarios on both stacks (test_horovod_spark_keras.py).
"""
import json
import os
import signal
import sys
import time

import numpy as np
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from spark_estimator_check import prepared_twice_alike  # this script's folder is first on sys.path

import hvdkeras.spark.keras as hvd_keras
from hvdkeras import spark as hvd_spark
from hvdkeras.common.errors import HvdkerasError
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.store import Store
from hvdkeras.spark.runner import _registered_slots


def where_and_allreduce(driver_addr):
    import socket

    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    total = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum, name="spark_cluster_check")
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((driver_addr, 9))  # no packet sent: the route picks this host's address on the link
    addr = probe.getsockname()[0]
    probe.close()
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(), "sum": float(total.numpy()),
            "hostname": socket.gethostname(), "addr": addr, "netns": os.readlink("/proc/self/ns/net")}


class KillRankOnce(keras.callbacks.Callback):
    """SIGKILLs rank 1's process (or, with ``executor``, the executor JVM it runs under) at the third batch of epoch
    ``epoch`` (0-based), once: a marker file remembers."""

    def __init__(self, marker, epoch=1, executor=False):
        super().__init__()
        self.marker, self.at_epoch, self.executor, self.epoch = marker, epoch, executor, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        import horovod.tensorflow as hvd_tf
        import psutil

        if self.epoch == self.at_epoch and batch == 2 and hvd_tf.rank() == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            victim = os.getpid()
            if self.executor:
                (victim,) = [p.pid for p in psutil.Process().parents()
                             if "CoarseGrainedExecutorBackend" in " ".join(p.cmdline())]
            os.kill(victim, signal.SIGKILL)


class RecordDevices(keras.callbacks.Callback):
    """Each rank writes ``<folder>/devices-<tag>-rank<r>.json``: the GPU addresses Spark assigned its task and the
    GPUs it made visible, as the fit began."""

    def __init__(self, folder, tag):
        super().__init__()
        self.folder, self.tag = folder, tag

    def on_train_begin(self, logs=None):
        import socket

        import horovod.tensorflow as hvd_tf

        from hvdkeras.spark.common import gpus

        record = {"rank": hvd_tf.rank(), "host": socket.gethostname(), "assigned": gpus.assigned(),
                  "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
        with open(os.path.join(self.folder, f"devices-{self.tag}-rank{hvd_tf.rank()}.json"), "w") as f:
            json.dump(record, f)


def devices(folder, tag):
    return [json.load(open(os.path.join(folder, f"devices-{tag}-rank{r}.json"))) for r in range(2)]


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(3, activation="softmax")])


def killed_and_resumed(session, store_path):
    """The killed fit and the fit that resumes it: ``{"killed": ..., "resumed": ..., "transformed": N}``."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 192)
    features = rng.normal(size=(192, 16)) + labels[:, None]
    df = session.createDataFrame([(Vectors.dense(features[i].tolist()), int(labels[i])) for i in range(192)],
                                 ["features", "label"])
    store = Store.create(store_path)

    def fit(tag, run_id="killed", use_gpu=True, max_retries=0, kills=(), **kw):
        return hvd_keras.KerasEstimator(
            num_proc=2, store=store, model=make_model(), optimizer=keras.optimizers.SGD(0.1),
            loss="sparse_categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
            label_cols=["label"], batch_size=16, epochs=3, random_seed=1, verbose=0, run_id=run_id,
            use_gpu=use_gpu, max_retries=max_retries, callbacks=[RecordDevices(store_path, tag), *kills], **kw).fit(df)

    def marker(name):
        return os.path.join(store_path, name)

    began = time.time()
    try:
        fit("killed", kills=[KillRankOnce(marker("killed-once"))])  # max_retries=0: one line
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    checkpoints = os.path.join(store_path, "runs", "killed", "checkpoints")
    report = {"killed": {"error": error, "seconds": time.time() - began,
                         "checkpoints": sorted(os.listdir(checkpoints))}}
    # Fit again with the same run_id: it resumes after epoch 1. In epoch 2 the executor JVM under rank 1 is
    # SIGKILLed (Spark replaces it, the fit waits and starts the ranks again from epoch 1's checkpoint), in epoch 3
    # rank 1 itself (again, from epoch 2's): max_retries=2 covers both, and the fit returns.
    began = time.time()
    model = fit("resumed", use_gpu=False, max_retries=2,
                kills=[KillRankOnce(marker("executor-once"), epoch=1, executor=True),
                       KillRankOnce(marker("retried-once"), epoch=2)])
    report["resumed"] = {"epochs": len(model.getHistory()["loss"]), "checkpoints": sorted(os.listdir(checkpoints)),
                         "killed": [os.path.exists(marker(m)) for m in ("executor-once", "retried-once")],
                         "seconds": time.time() - began}
    report["devices"] = {"use_gpu": devices(store_path, "killed"), "no_gpu": devices(store_path, "resumed")}
    report["transformed"] = model.transform(df.limit(10)).count()
    report["left"] = sorted(n for n in os.listdir(store_path) if n.startswith("intermediate_"))  # fits remove theirs
    quiet = fit("quiet", run_id="quiet", keep_intermediate_data=True)
    report["resumed"]["max_diff_from_quiet"] = float(max(np.abs(a - b).max() for a, b in
                                                         zip(model.getModel().get_weights(),
                                                             quiet.getModel().get_weights())))
    (kept,) = [n for n in os.listdir(store_path) if n.startswith("intermediate_train_data.quiet.")]
    report["same_files"] = prepared_twice_alike(df, store, f"{store.prefix_path}/{kept}", ["features"], ["label"],
                                                seed=1)
    return report


def slots(sc):
    return {"default_parallelism": sc.defaultParallelism, "registered": _registered_slots(sc)}


driver_addr = os.environ["SPARK_LOCAL_IP"]
began = time.time()
session = SparkSession.builder.appName("hvdkeras-spark-cluster-check").getOrCreate()
sc = session.sparkContext
try:
    report = {"master": sc.master, "slots": {"at_start": slots(sc)}, "session_s": time.time() - began}
    began = time.time()
    report["ranks"] = hvd_spark.run(where_and_allreduce, args=(driver_addr,), num_proc=2, verbose=0)
    report["run_s"] = time.time() - began
    report["slots"]["after_run"] = slots(sc)
    before = time.time()
    try:
        hvd_spark.run(where_and_allreduce, args=(driver_addr,), num_proc=3, verbose=0)
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    report["too_many"] = {"error": error, "seconds": time.time() - before}
    report["driver_netns"] = os.readlink("/proc/self/ns/net")
    if len(sys.argv) > 1:
        report.update(killed_and_resumed(session, sys.argv[1]))
    print("RESULT " + json.dumps(report), flush=True)
finally:
    session.stop()
sys.exit(0)
