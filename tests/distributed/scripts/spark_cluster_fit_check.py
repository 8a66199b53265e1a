"""Run by test_spark_cluster.py: a KerasEstimator fit on the standalone cluster, one rank killed in the middle.

``spark_cluster_fit_check.py STORE`` (STORE on the filesystem both hosts share). Two ranks, one per
host, train a small model; a callback SIGKILLs rank 1's process at the third batch of epoch 2, once
(a marker file in the store remembers). The first fit must end in one line; a second fit with the
same run_id resumes from the store's checkpoint and trains to the end; its model predicts.

Prints ``RESULT {"killed": {...}, "resumed": {...}, "transformed": N}``.
"""
import json
import os
import signal
import sys
import time

import numpy as np
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession

import hvdkeras.spark.keras as hvd
from hvdkeras.common.errors import HvdkerasError
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.store import Store

STORE = sys.argv[1]


class KillRankOnce(keras.callbacks.Callback):
    """SIGKILLs rank 1's process at the third batch of the second epoch, once."""

    def __init__(self, marker):
        super().__init__()
        self.marker, self.epoch = marker, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        import horovod.tensorflow as hvd_tf

        if self.epoch == 1 and batch == 2 and hvd_tf.rank() == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(3, activation="softmax")])


rng = np.random.default_rng(0)
labels = rng.integers(0, 3, 192)
features = rng.normal(size=(192, 16)) + labels[:, None]
session = SparkSession.builder.appName("hvdkeras-spark-cluster-fit").getOrCreate()
try:
    df = session.createDataFrame([(Vectors.dense(features[i].tolist()), int(labels[i])) for i in range(192)],
                                 ["features", "label"])
    store = Store.create(STORE)
    marker = os.path.join(STORE, "killed-once")

    def fit():
        return hvd.KerasEstimator(num_proc=2, store=store, model=make_model(), optimizer=keras.optimizers.SGD(0.1),
                                  loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                                  feature_cols=["features"], label_cols=["label"], batch_size=16, epochs=3,
                                  random_seed=1, verbose=0, run_id="killed",
                                  callbacks=[KillRankOnce(marker)]).fit(df)

    began = time.time()
    try:
        fit()
        error = None
    except HvdkerasError as exc:
        error = str(exc)
    checkpoints = os.path.join(STORE, "runs", "killed", "checkpoints")
    report = {"killed": {"error": error, "seconds": time.time() - began,
                         "checkpoints": sorted(os.listdir(checkpoints))}}
    model = fit()
    report["resumed"] = {"epochs": len(model.getHistory()["loss"]), "checkpoints": sorted(os.listdir(checkpoints))}
    report["transformed"] = model.transform(df.limit(10)).count()
    print("RESULT " + json.dumps(report), flush=True)
finally:
    session.stop()
sys.exit(0)
