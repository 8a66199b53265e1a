"""How near is ``KerasModel.transform`` to the model's own speed, cold and warm?

``python -m benchmarks.spark_transform [--rows 100000] [--rounds 3] [--batch-size 1024] [--record FILE
[--allow-busy]]``. One model (the digits model: 64 features, Dense 64, Dense 10) and the same rows, round by
round; each round, for each column kind in turn (the order alternates from round to round):

* a fresh ``local[2]`` Spark session (its executors run this Python), the rows cached and counted untimed;
* ``cold``: the session's first ``transform``, forced by a ``noop`` write: its Python workers start, import
  TensorFlow and load the model;
* ``warm``: the same ``transform`` again, on the workers the first one left;
* ``memory``: ``model.predict`` on the same rows already in memory, in this process, on the same two cores (the
  median of ``MEMORY_RUNS``);
* ``floor``: the same transform with the model taken out (its UDF reads each Arrow batch's features as the model's
  input and returns zeros of its output, both converted in the JVM as the transform's are), on the warm workers:
  what Spark's side of the transform costs, the fastest any model could go through it;
* ``jvm``: the features converted to arrays and written, in the JVM alone (no Python);
* ``cold_floor``: in another fresh session, its first job the transform without the model: what the cold
  ``transform`` would cost with a model that took no time to import, load or run (its Python workers' start, Spark's
  first job). The two fresh sessions of a kind alternate their order from round to round.

``vector`` is a ``DenseVector`` feature column, ``array`` an ``array<double>`` one. The ratios are each kind's median
``cold``, ``warm``, ``floor``, ``jvm`` and ``cold_floor`` over the median ``memory`` of the same rounds.

Other work on the machine skews the ratios (``predict`` uses both cores and loses most to it), so each round also
measures the CPU that processes outside this benchmark's own (its Spark JVM, its Python workers) used meanwhile, in
cores (``others_cores``). ``--record FILE`` writes the JSON there, and refuses in one line when a round saw more than
``BUSY_CORES`` of other work, unless ``--allow-busy``, which marks the record ``"busy": true``. Figures go in
docs/performance.md ("A batched transform").
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, Iterator, List, Optional

FEATURES = 64
KINDS = ("vector", "array")
BUSY_CORES = 0.2  # other processes' CPU, in cores, over which a round is too busy for a figure of record
MEMORY_RUNS = 3  # predict's rate varies most from run to run (up to 3x in one session): its median of these


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


def others_cpu() -> Dict[int, float]:
    """CPU seconds so far of every process outside this one and its descendants, by pid."""
    import psutil

    me = psutil.Process()
    ours = {me.pid} | {p.pid for p in me.children(recursive=True)}
    found: Dict[int, float] = {}
    for proc in psutil.process_iter(["pid", "cpu_times"]):
        times = proc.info.get("cpu_times")
        if proc.info["pid"] not in ours and times is not None:
            found[proc.info["pid"]] = times.user + times.system
    return found


def others_cores(before: Dict[int, float], after: Dict[int, float], seconds: float) -> float:
    """The cores other processes kept busy between two :func:`others_cpu` samples ``seconds`` apart."""
    used = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
    return round(max(used, 0.0) / max(seconds, 1e-9), 3)


def session(master: str = "local[2]") -> Any:
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(master).appName("hvdkeras-transform-bench")
            .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g").getOrCreate())


def rate(rows: int, run: Callable[[], Any]) -> int:
    began = time.monotonic()
    run()
    return round(rows / (time.monotonic() - began))


OUTPUTS = 10  # the model's output values per row


def without_the_model(df: Any) -> None:
    """The transform's path through Spark without the model: the features as ``KerasModel.transform`` sends them
    to Python and reads them there, zeros of the model's output back as its predictions' vector column."""
    import numpy as np

    from hvdkeras.spark.common import versions
    from hvdkeras.spark.keras import transform as t

    def arrow_body(*columns: Any) -> Any:
        rows = len(t._feature(columns[0], "features", (FEATURES,)))
        return t._arrow_output("vector", np.zeros((rows, OUTPUTS), np.float32))

    def pandas_body(*columns: Any) -> Any:
        import pyarrow as pa

        return t._as_series(arrow_body(pa.Array.from_pandas(columns[0])), "vector")

    udf = versions.vectorized_udf(arrow_body, pandas_body, t.udf_type(["vector"]))
    out = df.withColumn("label_prob", t.output_column(udf(t.feature_column(df, "features")), "vector"))
    out.write.format("noop").mode("overwrite").save()


def in_the_jvm(df: Any) -> None:
    """The features converted as the transform converts them, written, with no Python."""
    from hvdkeras.spark.keras import transform as t

    df.withColumn("as_array", t.feature_column(df, "features")).write.format("noop").mode("overwrite").save()


@contextlib.contextmanager
def _fresh(rows: int, kind: str) -> Iterator[Any]:
    """A fresh session's frame of ``kind``, its rows cached and counted untimed; the session stopped after."""
    spark = session()
    try:
        yield frames(spark, rows)[kind]
    finally:
        spark.stop()


def _cold_floor(rows: int, kind: str) -> int:
    """The rows/s of a fresh session's first job: the transform without the model (:func:`without_the_model`)."""
    with _fresh(rows, kind) as df:
        return rate(rows, lambda: without_the_model(df))


def _measured(rows: int, kind: str, batch_size: int, model: Any, x: Any) -> Dict[str, Any]:
    """One kind's cold, warm, in-memory, floor and JVM rows/s, in one fresh session."""
    import hvdkeras.spark.keras as hvd

    with _fresh(rows, kind) as df:
        keras_model = hvd.KerasModel(model=model, feature_columns=["features"], label_columns=["label"],
                                     outputCols=["label_prob"], predict_batch_size=batch_size)

        def transform() -> None:
            keras_model.transform(df).write.format("noop").mode("overwrite").save()

        cold, warm = rate(rows, transform), rate(rows, transform)
        memory = statistics.median(rate(rows, lambda: model.predict(x, batch_size=batch_size, verbose=0))
                                   for _ in range(MEMORY_RUNS))
        rate(rows, lambda: without_the_model(df))  # its UDF's first batches
        floor = rate(rows, lambda: without_the_model(df))
        jvm = rate(rows, lambda: in_the_jvm(df))
        return {"cold": cold, "warm": warm, "memory": memory, "floor": floor, "jvm": jvm}


def one_round(index: int, rows: int, batch_size: int, model: Any, x: Any) -> Dict[str, Any]:
    """Each kind's rates (:func:`_measured`, and :func:`_cold_floor` in a session of its own; which of the two
    sessions goes first alternates by round), the kinds' order alternated too; the other processes' cores."""
    out: Dict[str, Any] = {}
    began, cpu = time.monotonic(), others_cpu()
    for kind in (KINDS if index % 2 == 0 else KINDS[::-1]):
        if index % 2 == 0:
            measured, cold_floor = _measured(rows, kind, batch_size, model, x), _cold_floor(rows, kind)
        else:
            cold_floor = _cold_floor(rows, kind)
            measured = _measured(rows, kind, batch_size, model, x)
        out[kind] = {**measured, "cold_floor": cold_floor}
    out["others_cores"] = others_cores(cpu, others_cpu(), time.monotonic() - began)
    return out


def summary(rounds: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The medians of each kind's rates (cold, warm, in memory, floor, JVM alone, cold floor), and the ratios to
    ``memory``."""
    measured = ("cold", "warm", "memory", "floor", "jvm", "cold_floor")
    medians = {kind: {what: statistics.median(r[kind][what] for r in rounds) for what in measured} for kind in KINDS}
    return {"median_rows_per_s": medians,
            "ratio": {kind: {what: round(medians[kind][what] / medians[kind]["memory"], 3)
                             for what in measured if what != "memory"} for kind in KINDS},
            "others_cores_max": max(r["others_cores"] for r in rounds)}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--record", help="write the JSON here (refused when the machine was busy)")
    parser.add_argument("--allow-busy", action="store_true", help="record a busy run, marked as such")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import numpy as np

    model = build_model()
    spark = session()
    try:  # the rows of the frames, for predict in memory
        x = np.asarray([r.features for r in frames(spark, args.rows)["array"].orderBy("id").collect()],
                       dtype=np.float32)
    finally:
        spark.stop()
    model.predict(x[:args.batch_size], batch_size=args.batch_size, verbose=0)  # the first predict traces it
    rounds = [one_round(i, args.rows, args.batch_size, model, x) for i in range(args.rounds)]
    result = {"rows": args.rows, "batch_size": args.batch_size, "rounds": rounds, **summary(rounds)}
    result["busy"] = result["others_cores_max"] > BUSY_CORES
    print(json.dumps(result, indent=2))
    if args.record:
        if result["busy"] and not args.allow_busy:
            print(f"not recorded: other processes kept {result['others_cores_max']} cores busy in a round (over"
                  f" {BUSY_CORES}); run it on an idle machine, or pass --allow-busy to record it marked busy",
                  file=sys.stderr)
            return 2
        with open(args.record, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
