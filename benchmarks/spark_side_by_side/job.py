"""One fit of a Spark KerasEstimator on the 8x8 digits, Horovod's own or hvdkeras's.

Horovod's ``examples/spark/keras/keras_spark_mnist.py`` shape, offline: a DataFrame with a ``features``
DenseVector (64 pixels / 16) and a one-hot ``label_vec`` SparseVector (OneHotEncoder, dropLast=False),
Input(64) -> Dense(64, relu) -> Dense(10, softmax), Adam, categorical cross-entropy, accuracy,
num_proc=2 on local[2], batch_size 32, random_seed=1, validation=0.2, inmemory_cache_all=True.
The test split is fixed in NumPy (the same rows for both), so accuracy is measured on the same
held-out rows: ``transform`` then the argmax of ``label_prob``.

Then, unless ``--transform-rows 0``, the fitted model's ``transform`` of that many rows (the test rows repeated,
cached and counted untimed), forced by a ``noop`` write: the session's first ``transform`` (its Python workers start
and load the model), then the same again; and the model's own ``predict`` on the same rows in memory, in this
process (batches of 1024, hvdkeras's ``predict_batch_size``; the median of three).

Run it with the Python of the venv that has the estimator (the executors run the same Python)::

    python job.py --impl horovod  --data digits.npz --store /tmp/ss-store-h   # horovod.spark.keras
    python job.py --impl hvdkeras --data digits.npz --store /tmp/ss-store-k   # hvdkeras.spark.keras

``digits.npz`` holds ``pixels`` (1797 x 64, 0..16) and ``labels``; ``run.py`` writes it from
``hvdkeras.training.data.digits_arrays()``. The last line printed is ``RESULT {json}`` with the versions,
``fit_seconds`` (wall time of ``fit`` alone), ``accuracy``, the history's last values, ``transform_rows_per_s``
(first, then again), ``predict_rows_per_s`` and ``total_seconds``.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ["PYSPARK_PYTHON"] = sys.executable  # the executors run this venv's Python, which has Horovod
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    start = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["horovod", "hvdkeras"], required=True)
    parser.add_argument("--data", required=True, help="the .npz with pixels and labels")
    parser.add_argument("--store", required=True, help="an empty folder for the estimator's store")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--transform-rows", type=int, default=20_000,
                        help="rows for the timed transforms and predict (0: none)")
    args = parser.parse_args()

    import numpy as np
    import pyspark
    import tensorflow as tf
    from pyspark.ml.feature import OneHotEncoder
    from pyspark.ml.linalg import Vectors
    from pyspark.sql import SparkSession

    if args.impl == "horovod":
        import horovod.spark.keras as hvd_spark_keras
        from horovod.spark.common.store import Store
        from tensorflow import keras
    else:
        import hvdkeras.spark.keras as hvd_spark_keras
        from hvdkeras.runtime.compat import keras
        from hvdkeras.spark.common.store import Store
    import horovod

    data = np.load(args.data)
    pixels, labels = data["pixels"].astype(np.float64) / 16.0, data["labels"].astype(int)
    order = np.random.RandomState(0).permutation(len(labels))
    n_test = int(round(len(labels) * args.test_fraction))
    test_idx, train_idx = order[:n_test], order[n_test:]

    def frame(spark, idx):
        rows = [(int(i), Vectors.dense(pixels[i].tolist()), float(labels[i])) for i in idx]
        return spark.createDataFrame(rows, ["id", "features", "label"])

    def make_model():
        keras.utils.set_random_seed(1)
        return keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                 keras.layers.Dense(10, activation="softmax")])

    spark = (SparkSession.builder.master("local[2]").appName(f"side-by-side-{args.impl}")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    out = {"impl": args.impl}
    try:
        encoder = OneHotEncoder(inputCols=["label"], outputCols=["label_vec"], dropLast=False)
        train_df = frame(spark, train_idx)
        encoder_model = encoder.fit(train_df)
        train_df = encoder_model.transform(train_df)
        test_df = frame(spark, test_idx)
        store_path = os.path.abspath(args.store)
        store = Store.create(store_path if args.impl == "horovod" else "file://" + store_path)
        if args.impl == "horovod":  # Gloo, as hvdkeras.spark.run: a Horovod built with MPI would pick mpirun
            from horovod.spark.common.backend import SparkBackend
            placement = {"backend": SparkBackend(num_proc=2, use_gloo=True)}
        else:
            placement = {"num_proc": 2}
        estimator = hvd_spark_keras.KerasEstimator(
            **placement, store=store, model=make_model(), optimizer=keras.optimizers.Adam(args.lr),
            loss="categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
            label_cols=["label_vec"], batch_size=args.batch_size, epochs=args.epochs, random_seed=1,
            validation=0.2, inmemory_cache_all=True, verbose=0)
        began = time.monotonic()
        keras_model = estimator.fit(train_df)
        out["fit_seconds"] = round(time.monotonic() - began, 2)
        if args.impl == "hvdkeras":  # where the fit's time went (docs/performance.md, "A small fit's fixed cost")
            out["fit_breakdown"] = keras_model.getFitSeconds()
        keras_model = keras_model.setOutputCols(["label_prob"])
        if args.transform_rows:
            out.update(transform_and_predict(spark, keras_model, test_df, pixels[test_idx], args.transform_rows))
        history = keras_model.getHistory()
        out["history_last"] = {k: round(float(v[-1]), 4) for k, v in history.items()}
        out["epochs_run"] = len(history.get("loss", []))
        predicted = keras_model.transform(test_df).select("label", "label_prob").collect()
        out["test_rows"] = len(predicted)
        out["accuracy"] = round(float(np.mean([int(np.argmax(r.label_prob.toArray())) == int(r.label)
                                               for r in predicted])), 4)
        out["train_rows"] = len(train_idx)
    finally:
        spark.stop()
    import keras as keras_package  # tensorflow.keras on TF 2.15 has no __version__

    out["versions"] = {"python": sys.version.split()[0], "tensorflow": tf.__version__,
                       "keras": keras_package.__version__,
                       "pyspark": pyspark.__version__, "horovod": horovod.__version__, "numpy": np.__version__}
    try:
        import pyarrow
        out["versions"]["pyarrow"] = pyarrow.__version__
        if args.impl == "horovod":
            import petastorm
            out["versions"]["petastorm"] = petastorm.__version__
    except ImportError:
        pass
    out["total_seconds"] = round(time.monotonic() - start, 2)
    print("RESULT " + json.dumps(out), flush=True)


def transform_and_predict(spark, keras_model, test_df, test_pixels, rows):
    """The rows/s of ``keras_model``'s first and second ``transform`` of ``rows`` rows (``test_df`` repeated), and of
    its model's ``predict`` on the same rows in memory."""
    import numpy as np

    copies = -(-rows // len(test_pixels))
    big = (test_df.crossJoin(spark.range(copies, numPartitions=1).withColumnRenamed("id", "copy"))
           .limit(rows).repartition(2).cache())
    big.count()

    def rate(run):
        began = time.monotonic()
        run()
        return round(rows / (time.monotonic() - began))

    def transform():
        keras_model.transform(big).write.format("noop").mode("overwrite").save()

    out = {"transform_rows": rows, "transform_rows_per_s": [rate(transform), rate(transform)]}
    big.unpersist()
    model = keras_model.getModel()
    x = np.tile(test_pixels.astype(np.float32), (copies, 1))[:rows]
    model.predict(x[:1024], batch_size=1024, verbose=0)  # the first predict traces it
    out["predict_rows_per_s"] = statistics.median(rate(lambda: model.predict(x, batch_size=1024, verbose=0))
                                                  for _ in range(3))
    return out


if __name__ == "__main__":  # Horovod's launcher starts processes by spawn, which imports this file again
    main()
