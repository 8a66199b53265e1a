"""One attempt of the Spark soak's job: a ``KerasEstimator`` fit of the digits on the Spark cluster the environment
names (``--spark``: :mod:`lab.spark`'s two hosts), with a fixed ``run_id`` so that a rerun resumes.

    python -m benchmarks.soak.spark_fit --store STORE --run-id soak --epochs 40

It is what a user's retry of a failed Spark job runs again: ``SparkSession.builder.getOrCreate()``, the digits as a
DataFrame (64 pixel values in a vector column, the label), a small dense model, and ``fit`` on 2 ranks. The ranks'
lines (``resuming after ...``, ``final validation ...``) reach this process's output, where the soak reads them,
through Horovod's launcher (``SparkBackend(stdout=sys.stdout)``; on a cluster they would go to the executors' logs).
Each rank's environment has ``HVDKERAS_SOAK_MARK`` set to the run's folder in the store (the estimator's
``backend_env``), by which the soak finds the rank processes (their command line does not name it).
Exit status 0 when ``fit`` returned, 1 with hvdkeras's one line when it stopped.
"""
from __future__ import annotations

import argparse
import gzip
import os
import sys
from typing import List, Optional

MARK = "HVDKERAS_SOAK_MARK"  # the rank processes' environment variable the soak finds them by
DIGITS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "hvdkeras",
                      "resources", "digits.csv.gz")


def digits(session):
    """The digits as a DataFrame: ``features`` (64 values, 0 to 1) and ``label``."""
    from pyspark.ml.linalg import Vectors

    with gzip.open(DIGITS, "rt") as f:
        rows = [[float(v) for v in line.split(",")] for line in f if line.strip()]
    return session.createDataFrame([(Vectors.dense([v / 16.0 for v in r[:-1]]), int(r[-1])) for r in rows],
                                   ["features", "label"])


def run_path(store: str, run_id: str) -> str:
    """The run's folder in the store (its ``checkpoints`` and ``metrics.jsonl``), as the estimator names it."""
    from hvdkeras.spark.common.store import Store

    return Store.create(store).get_localized_path(Store.create(store).get_run_path(run_id))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak.spark_fit", description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True, help="a folder every executor sees")
    parser.add_argument("--run-id", default="soak")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1, help="the model's and the estimator's seed")
    parser.add_argument("--master", default=None, help="e.g. local[2] (default: the one spark-defaults.conf names)")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    import hvdkeras.spark.keras as hvd_keras
    from hvdkeras.common.errors import HvdkerasError
    from hvdkeras.runtime.compat import keras
    from hvdkeras.spark.common.backend import SparkBackend
    from hvdkeras.spark.common.store import Store

    builder = SparkSession.builder.appName(f"hvdkeras-soak-{args.run_id}")
    builder = builder.config("spark.ui.showConsoleProgress", "false")  # its bar would glue itself to a rank's line
    session = (builder.master(args.master) if args.master else builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        keras.utils.set_random_seed(args.seed)
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10, activation="softmax")])
        # The ranks' output streamed to this driver (on a cluster it would go to the executors' logs), where the soak
        # reads it: Horovod's launcher passes it back when given a stream.
        backend = SparkBackend(num_proc=2, stdout=sys.stdout, stderr=sys.stdout)
        estimator = hvd_keras.KerasEstimator(
            backend=backend, store=Store.create(args.store), model=model, optimizer=keras.optimizers.SGD(0.05),
            loss="sparse_categorical_crossentropy", metrics=["accuracy"], feature_cols=["features"],
            label_cols=["label"], validation=0.2, batch_size=32, epochs=args.epochs, random_seed=args.seed,
            verbose=0, run_id=args.run_id, backend_env={MARK: run_path(args.store, args.run_id)})
        try:
            estimator.fit(digits(session))
        except HvdkerasError as exc:
            print(f"hvdkeras: error: {str(exc).splitlines()[0]}", flush=True)
            return 1
        return 0
    finally:
        session.stop()


if __name__ == "__main__":
    sys.exit(main())
