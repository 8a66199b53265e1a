"""The Spark estimator through a Spark Connect session: ``SparkSession.builder.remote("local[2]")``.

``spark_connect_check.py WORK`` starts pyspark's own local Connect server and, as a remote client would be, works
without the classic ``SparkContext`` that this local server keeps in the same process: it is hidden from hvdkeras
(``SparkContext._active_spark_context`` is None while the checks run), so any use of it fails. Then:

* the refusals, each one line: no ``num_proc`` (a Connect client cannot count task slots), ``use_mpi=True``, a
  backend not given the session;
* a ``fit`` of two ranks for three epochs, ``max_retries=1``, whose rank 1 exits at epoch 1's third batch in the
  first attempt: the gang starts again and resumes from epoch 0's checkpoint (each attempt's epochs, as rank 0
  began them, are recorded in WORK);
* ``transform`` against the same model's ``predict`` in this process, then ``save`` and ``KerasModel.load``, and the
  loaded model's ``transform``.

Prints ``RESULT {...}``.
"""
import json
import os
import sys
import tempfile

import numpy as np

WORK = sys.argv[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark import SparkContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

spark = SparkSession.builder.remote("local[2]").getOrCreate()
hidden, SparkContext._active_spark_context = SparkContext._active_spark_context, None  # a remote client has none

import keras  # noqa: E402

import hvdkeras.spark.keras as hvd  # noqa: E402
from hvdkeras.common.errors import SetupError  # noqa: E402
from hvdkeras.spark.common.backend import SparkBackend  # noqa: E402
from hvdkeras.spark.common.store import Store  # noqa: E402

EPOCHS_SEEN = os.path.join(WORK, "epochs")


class ExitOnce(keras.callbacks.Callback):
    """Rank 0 records each epoch it begins; rank 1 exits at epoch 1's third batch, in the first attempt only."""

    def on_epoch_begin(self, epoch, logs=None):
        import horovod.tensorflow as hvd_tf

        self.epoch = epoch
        if hvd_tf.rank() == 0:
            with open(EPOCHS_SEEN, "a") as f:
                f.write(f"{epoch}\n")

    def on_train_batch_begin(self, batch, logs=None):
        import horovod.tensorflow as hvd_tf

        marker = os.path.join(WORK, "exited")
        if hvd_tf.rank() == 1 and self.epoch == 1 and batch == 2 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(3)


def one_line(fn):
    try:
        fn()
    except SetupError as exc:
        return str(exc)
    return None


result = {"client": type(spark).__module__}
try:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    df = spark.createDataFrame([(row.tolist(), float(label)) for row, label in zip(x, y)],
                               "features array<float>, label double")
    store = Store.create(os.path.join(WORK, "store"))

    def estimator(**kw):
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1, activation="sigmoid")])
        args = dict(store=store, model=model, optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy",
                    feature_cols=["features"], label_cols=["label"], batch_size=16, epochs=3, random_seed=1,
                    verbose=0)
        args.update(kw)
        return hvd.KerasEstimator(**args)

    result["no_num_proc"] = one_line(lambda: estimator(run_id="refused").fit(df))
    result["mpi"] = one_line(lambda: SparkBackend(num_proc=2, use_mpi=True, session=spark).run(print))
    result["no_session"] = one_line(lambda: SparkBackend(num_proc=2).run(print))  # as fit_on_parquet's default

    fitted = estimator(num_proc=2, max_retries=1, run_id="retried", callbacks=[ExitOnce()]).fit(df)
    with open(EPOCHS_SEEN) as f:
        result["epochs_begun"] = [int(line) for line in f.read().split()]
    result["history_epochs"] = len(fitted.getHistory()["loss"])

    expected = fitted.getModel().predict(x, verbose=0).reshape(-1)
    got = fitted.transform(df).toPandas()
    result["columns"] = list(got.columns)
    result["transform_vs_predict"] = float(np.max(np.abs(np.asarray(got["label__output"], dtype=np.float64)
                                                         - expected)))
    path = os.path.join(tempfile.mkdtemp(dir=WORK), "model")
    fitted.write().save(path)
    loaded = hvd.KerasModel.load(path).transform(df).toPandas()
    result["loaded_vs_predict"] = float(np.max(np.abs(np.asarray(loaded["label__output"], dtype=np.float64)
                                                      - expected)))
finally:
    SparkContext._active_spark_context = hidden
    spark.stop()
print("RESULT " + json.dumps(result), flush=True)
