"""Fit a Spark DataFrame with hvdkeras' KerasEstimator on two Horovod ranks, then predict, save and load the model.

    python examples/spark/keras_spark_digits.py                      # local[2], the store in a new temporary folder
    python examples/spark/keras_spark_digits.py --store s3://bucket/hvdkeras --epochs 5

On a cluster, ``spark-submit`` runs it (docs/spark-cluster.md). The data are the 1,797 8x8 digits that ship
with hvdkeras, as a DataFrame of 64-pixel vectors and one-hot labels; no download. docs/spark.md opens with it.
"""
import argparse
import os
import sys
import tempfile

# On local[N] the executors must run this Python, which has Horovod; spark-submit sets its own.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import numpy as np
from pyspark.ml.feature import OneHotEncoder
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession

import hvdkeras.spark.keras as hvd  # was: import horovod.spark.keras as hvd
from hvdkeras.runtime.compat import keras
from hvdkeras.spark.common.store import Store  # was: from horovod.spark.common.store import Store
from hvdkeras.training.data import digits_arrays


def quick_start(spark, store_url, num_proc=2, epochs=3, batch_size=32):
    """The quick start: a DataFrame of the digits, fit on ``num_proc`` ranks, transform, save and load.

    Returns:
        (the test rows' accuracy, how many test rows, where the model was saved, the loaded model).
    """
    pixels, labels = digits_arrays()
    rows = [(Vectors.dense((p / 16.0).tolist()), int(label)) for p, label in zip(pixels, labels)]
    df = spark.createDataFrame(rows, ["features", "label"])
    df = OneHotEncoder(inputCols=["label"], outputCols=["label_vec"], dropLast=False).fit(df).transform(df)
    train_df, test_df = df.randomSplit([0.9, 0.1], seed=1)

    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(16, 3, activation="relu"),
                              keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")])
    store = Store.create(store_url)  # a folder every executor sees, or s3://bucket/path
    estimator = hvd.KerasEstimator(
        num_proc=num_proc, store=store, model=model, optimizer=keras.optimizers.Adam(0.002),
        loss="categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
        label_cols=["label_vec"], validation=0.1, batch_size=batch_size, epochs=epochs, random_seed=1)
    keras_model = estimator.fit(train_df).setOutputCols(["label_prob"])  # a Spark ML Transformer

    predicted = keras_model.transform(test_df).select("label", "label_prob").collect()
    accuracy = float(np.mean([int(np.argmax(r.label_prob.toArray())) == r.label for r in predicted]))
    path = store.get_run_path(keras_model.getRunId()) + "/model"
    keras_model.save(path)  # Spark ML persistence; a PipelineModel holding it saves too
    loaded = hvd.KerasModel.load(path)
    return accuracy, len(predicted), path, loaded


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default=None, help="Spark's master (default: spark-submit's, else local[2])")
    parser.add_argument("--store", default=None, help="where the Parquet and the checkpoints go (default: a temp dir)")
    parser.add_argument("--num-proc", type=int, default=2, help="Horovod ranks")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="each rank's batch")
    args = parser.parse_args()

    builder = SparkSession.builder.appName("hvdkeras-spark-digits")
    if args.master or "PYSPARK_GATEWAY_PORT" not in os.environ:  # that variable: spark-submit started this driver
        builder = builder.master(args.master or "local[2]")
    spark = builder.getOrCreate()
    try:
        accuracy, rows, path, loaded = quick_start(spark, args.store or tempfile.mkdtemp(prefix="hvdkeras-spark-"),
                                                   args.num_proc, args.epochs, args.batch_size)
        print(f"test accuracy {accuracy:.3f} on {rows} rows; the model saved in {path} and loaded"
              f" ({type(loaded).__name__}, outputs {loaded.getOutputCols()})")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
