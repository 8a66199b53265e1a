"""How near is ``KerasModel.transform`` to the model's own speed? ``python -m benchmarks.spark_transform``.

``[--rows 100000] [--rounds 3] [--batch-size 1024]``. One ``local[2]`` Spark session (its executors run this
Python) and one model (the digits model: 64 features, Dense 64, Dense 10), the same rows three ways, round by
round:

* ``vector``: hvdkeras's ``transform`` on a ``DenseVector`` feature column, forced by a ``noop`` write;
* ``array``: the same on an ``array<double>`` column;
* ``memory``: ``model.predict`` on the same rows already in memory, in this process, on the same two cores.

The DataFrames are cached and counted before the timing, and a first ``transform`` of each (TensorFlow's import and
the model's load in each Python worker) is reported apart as ``first``. Prints each round's rows/s, the medians and
the ratios ``vector / memory`` and ``array / memory`` as JSON. Figures go in docs/performance.md ("A batched
transform").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Dict, List

FEATURES = 64


def build_model() -> Any:
    from hvdkeras.runtime.compat import keras

    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(10, activation="softmax")])


def frames(spark: Any, rows: int) -> Dict[str, Any]:
    """``{"array": df, "vector": df}`` of ``rows`` rows of :data:`FEATURES` random features, cached and counted."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    base = spark.range(rows, numPartitions=4).select(
        "id", F.array(*[F.rand(seed=i) for i in range(FEATURES)]).alias("features"))
    out = {"array": base.cache(), "vector": base.select("id", array_to_vector("features").alias("features")).cache()}
    for df in out.values():
        df.count()
    return out


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import hvdkeras.spark.keras as hvd

    spark = (SparkSession.builder.master("local[2]").appName("hvdkeras-transform-bench")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g").getOrCreate())
    try:
        import numpy as np

        dfs = frames(spark, args.rows)
        model = build_model()
        x = np.asarray([r.features for r in dfs["array"].orderBy("id").collect()], dtype=np.float32)
        keras_model = hvd.KerasModel(model=model, feature_columns=["features"], label_columns=["label"],
                                     outputCols=["label_prob"], predict_batch_size=args.batch_size)

        def transform(kind: str) -> float:
            began = time.monotonic()
            keras_model.transform(dfs[kind]).write.format("noop").mode("overwrite").save()
            return args.rows / (time.monotonic() - began)

        def memory() -> float:
            began = time.monotonic()
            model.predict(x, batch_size=args.batch_size, verbose=0)
            return args.rows / (time.monotonic() - began)

        result: Dict[str, Any] = {"rows": args.rows, "batch_size": args.batch_size,
                                  "first": {"vector": transform("vector"), "array": transform("array")},
                                  "rounds": {"vector": [], "array": [], "memory": []}}
        memory()  # the first predict traces the function
        for _ in range(args.rounds):
            for kind, run in (("vector", lambda: transform("vector")), ("array", lambda: transform("array")),
                              ("memory", memory)):
                result["rounds"][kind].append(round(run()))
        medians = {kind: statistics.median(values) for kind, values in result["rounds"].items()}
        result["median_rows_per_s"] = medians
        result["ratio"] = {kind: round(medians[kind] / medians["memory"], 3) for kind in ("vector", "array")}
        result["first"] = {kind: round(v) for kind, v in result["first"].items()}
        print(json.dumps(result, indent=2))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
