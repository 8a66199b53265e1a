"""Run by test_spark_cluster.py as the driver of lab/spark.py's standalone cluster (its environment: ClusterInfo.env()).

``spark_cluster_check.py STORE`` (STORE on the filesystem both hosts share):
``SparkSession.builder.getOrCreate()`` joins the cluster (the driver's spark-defaults.conf names it), then
KerasEstimator fits of two ranks, one per host, on a small model:

* a quiet fit that nobody disturbs: each rank records where it ran (its rank, an allreduce of every rank, its
  hostname, its address on the lab's link and its network namespace) and the GPU Spark assigned its task (the
  lab's stand-ins) and what it made visible; it keeps its Parquet for a second ``prepare``'s rows;
* the same fit with ``use_gpu=False`` and ``max_retries=2``: the executor JVM under rank 1 is SIGKILLed in epoch
  2 and rank 1 itself in epoch 3; it retries both, resuming from the store's checkpoint, and returns on the quiet
  fit's weights;
* ``num_proc=3`` on the cluster's 2 task slots (``spark.cores.max``): the one-line error and how long it took.

That a fit killed with ``max_retries=0`` ends in one line and the next fit resumes it is test_spark_s3.py's.
One driver (one SparkSession, one set of executors) for every check: each costs 10-20 s to start.
Prints ``RESULT {"ranks": [...], "too_many": {...}, "slots": {...}, "resumed": {...}, "devices": {...},
"transformed": N, "left": [...], "same_files": bool}``.
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


def where(driver_addr):
    """Where this rank runs: its rank, size and local rank, the sum of every rank's rank (one allreduce), its host,
    its address on the lab's link towards ``driver_addr`` and its network namespace."""
    import socket

    import horovod.tensorflow as hvd
    import tensorflow as tf

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


class RecordRank(keras.callbacks.Callback):
    """Each rank writes ``<folder>/devices-<tag>-rank<r>.json`` as the fit begins: the GPU addresses Spark assigned
    its task, the GPUs it made visible, and where it runs (:func:`where`)."""

    def __init__(self, folder, tag, driver_addr):
        super().__init__()
        self.folder, self.tag, self.driver_addr = folder, tag, driver_addr

    def on_train_begin(self, logs=None):
        import socket

        import horovod.tensorflow as hvd_tf

        from hvdkeras.spark.common import gpus

        record = {"rank": hvd_tf.rank(), "host": socket.gethostname(), "assigned": gpus.assigned(),
                  "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "where": where(self.driver_addr)}
        with open(os.path.join(self.folder, f"devices-{self.tag}-rank{hvd_tf.rank()}.json"), "w") as f:
            json.dump(record, f)


def devices(folder, tag):
    return [json.load(open(os.path.join(folder, f"devices-{tag}-rank{r}.json"))) for r in range(2)]


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(3, activation="softmax")])


def quiet_and_retried(session, store_path, driver_addr):
    """A quiet fit, then the same fit retried after its executor and its rank are killed:
    ``{"ranks": [...], "resumed": ..., "devices": ..., "transformed": N, "left": [...], "same_files": bool}``."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 192)
    features = rng.normal(size=(192, 16)) + labels[:, None]
    df = session.createDataFrame([(Vectors.dense(features[i].tolist()), int(labels[i])) for i in range(192)],
                                 ["features", "label"])
    store = Store.create(store_path)

    def fit(run_id, use_gpu=True, max_retries=0, kills=(), **kw):
        return hvd_keras.KerasEstimator(
            num_proc=2, store=store, model=make_model(), optimizer=keras.optimizers.SGD(0.1),
            loss="sparse_categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
            label_cols=["label"], batch_size=16, epochs=3, random_seed=1, verbose=0, run_id=run_id,
            use_gpu=use_gpu, max_retries=max_retries, callbacks=[RecordRank(store_path, run_id, driver_addr), *kills],
            **kw).fit(df)

    def marker(name):
        return os.path.join(store_path, name)

    quiet = fit("quiet", keep_intermediate_data=True)
    report = {"devices": {"use_gpu": devices(store_path, "quiet")}}
    report["ranks"] = [d["where"] for d in report["devices"]["use_gpu"]]
    # The same fit again, from the start: in epoch 2 the executor JVM under rank 1 is SIGKILLed (Spark replaces
    # it, the fit waits and starts the ranks again from epoch 1's checkpoint), in epoch 3 rank 1 itself (again,
    # from epoch 2's): max_retries=2 covers both, and the fit returns.
    began = time.time()
    model = fit("retried", use_gpu=False, max_retries=2,
                kills=[KillRankOnce(marker("executor-once"), epoch=1, executor=True),
                       KillRankOnce(marker("retried-once"), epoch=2)])
    checkpoints = os.path.join(store_path, "runs", "retried", "checkpoints")
    report["resumed"] = {"epochs": len(model.getHistory()["loss"]), "checkpoints": sorted(os.listdir(checkpoints)),
                         "killed": [os.path.exists(marker(m)) for m in ("executor-once", "retried-once")],
                         "seconds": time.time() - began}
    report["devices"]["no_gpu"] = devices(store_path, "retried")
    report["transformed"] = model.transform(df.limit(10)).count()
    report["resumed"]["max_diff_from_quiet"] = float(max(np.abs(a - b).max() for a, b in
                                                         zip(model.getModel().get_weights(),
                                                             quiet.getModel().get_weights())))
    (kept,) = [n for n in os.listdir(store_path) if n.startswith("intermediate_train_data.quiet.")]
    report["left"] = sorted(n for n in os.listdir(store_path)  # the retried fit removed its Parquet
                            if n.startswith("intermediate_") and ".quiet." not in n)
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
    report = {"master": sc.master, "slots": {"at_start": slots(sc)}, "session_s": time.time() - began,
              "driver_netns": os.readlink("/proc/self/ns/net")}
    report.update(quiet_and_retried(session, sys.argv[1], driver_addr))
    report["slots"]["after_run"] = slots(sc)
    before = time.time()
    try:
        hvd_spark.run(where, args=(driver_addr,), num_proc=3, verbose=0)
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    report["too_many"] = {"error": error, "seconds": time.time() - before}
    print("RESULT " + json.dumps(report), flush=True)
finally:
    session.stop()
sys.exit(0)
